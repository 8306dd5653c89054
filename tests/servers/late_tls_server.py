"""A TLS server that loads OpenSSL late, as DeleGate does with dlopen: the _ssl module
(and with it libssl.so) is imported only after a delay, then it serves one request per
connection. usage: late_tls_server.py PORT CERT KEY DELAY_SECONDS MAX_SECONDS"""
import socket
import sys
import time

port, cert, key, delay, limit = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
time.sleep(delay)
import ssl  # noqa: E402  (this maps libssl.so.3 into the process now)

ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = socket.create_server(("127.0.0.1", port))
srv.settimeout(1.0)
print("serving", flush=True)
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        continue
    try:
        conn.settimeout(10)
        with ctx.wrap_socket(conn, server_side=True) as s:
            s.recv(65536)
            s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n")
    except (OSError, ssl.SSLError):
        pass
