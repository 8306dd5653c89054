"""A plain-TCP request/response server for tlsprof's connection tests. It loads OpenSSL
(import ssl), so tlsprof traces it, and serves line requests ("ping\n" -> "pong\n"). After
PER_CONN requests it close()s the socket at once, without shutdown(): the socket is
orphaned, so the kernel hands it to a FIN_WAIT2 timewait socket as soon as the client
acknowledges the FIN, before the client's own FIN (the path the agent settles through
sock_diag). usage: churn_server.py PORT PER_CONN MAX_SECONDS"""
import socket
import ssl  # noqa: F401  (maps libssl.so into this process)
import sys
import time

port, per_conn, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
srv = socket.create_server(("127.0.0.1", port))
srv.settimeout(1.0)
print("serving", flush=True)
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        continue
    conn.settimeout(10)
    try:
        f = conn.makefile("rb")
        for _ in range(per_conn):
            if not f.readline():
                break
            conn.sendall(b"pong\n")
        f.close()
    except OSError:
        pass
    conn.close()
