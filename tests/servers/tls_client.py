"""A long-lived TLS client for tlsprof's tests: waits until told to start (a line on
stdin), makes N new TLS connections with one request each, prints how many succeeded.
usage: tls_client.py PORT N"""
import socket
import ssl
import sys

port, n = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
print("ready", flush=True)
sys.stdin.readline()
ok = 0
for _ in range(n):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
            ok += 1
print(ok, flush=True)
