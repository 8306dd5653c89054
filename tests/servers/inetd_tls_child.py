#!/usr/bin/python3
"""The TLS server that tests/servers/inetd.py starts for each connection, as inetd starts
one: the connection is its standard input (fd 0). It is Python's ssl module, so OpenSSL's
libssl: it makes the TLS handshake as the server, reads the client's request (up to its blank
line, as an HTTP client sends one), answers one small HTTP response and exits.
Executed directly (its #! line names the interpreter itself, no `env`, so that there is a
single exec), the process's command name is this file's: "inetd_tls_child".
usage: inetd_tls_child.py CERT KEY (with the connection on fd 0)"""
import socket
import ssl
import sys

cert, key = sys.argv[1], sys.argv[2]
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
conn = socket.socket(fileno=0)
conn.settimeout(10)
try:
    with ctx.wrap_socket(conn, server_side=True) as s:
        data = b""
        while b"\r\n\r\n" not in data and b"\n\n" not in data and len(data) < 65536:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n")
except (OSError, ssl.SSLError):
    sys.exit(1)
