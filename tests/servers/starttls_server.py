"""A small SMTP-like server that starts TLS on request (STARTTLS, RFC 3207's exchange): a
greeting, an EHLO answer that offers STARTTLS, a "220" go-ahead, then TLS (Python's ssl:
OpenSSL), and a goodbye inside TLS. One connection at a time, for MAX_SECONDS at most.
For the kernel matrix's guests, whose roots carry no mail server.
usage: starttls_server.py PORT CERT KEY MAX_SECONDS"""
import socket
import ssl
import sys
import time

port, cert, key, limit = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv = socket.create_server(("127.0.0.1", port))
srv.settimeout(1.0)
deadline = time.monotonic() + limit


def serve(conn: socket.socket):
    conn.settimeout(10)
    conn.sendall(b"220 localhost ESMTP\r\n")
    f = conn.makefile("rb")
    while True:
        line = f.readline(1000).upper()
        if not line:
            return
        if line.startswith((b"EHLO", b"HELO")):
            conn.sendall(b"250-localhost\r\n250 STARTTLS\r\n")
        elif line.startswith(b"STARTTLS"):
            conn.sendall(b"220 2.0.0 Ready to start TLS\r\n")
            break
        elif line.startswith(b"QUIT"):
            conn.sendall(b"221 bye\r\n")
            return
        else:
            conn.sendall(b"502 unknown\r\n")
    with ctx.wrap_socket(conn, server_side=True) as s:
        tf = s.makefile("rb")
        while line := tf.readline(1000).upper():
            if line.startswith(b"QUIT"):
                s.sendall(b"221 bye\r\n")
                return
            s.sendall(b"250 ok\r\n")


while time.monotonic() < deadline:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        continue
    try:
        serve(conn)
    except (OSError, ssl.SSLError):
        pass
    finally:
        conn.close()
