"""A tiny inetd: a parent that listens on a loopback port and, for each connection it
accepts, forks and execs a separate server program with the accepted socket as its standard
input and output (inetd's `nowait` services, systemd's Accept=yes sockets), then closes its
own copy and goes back to accept. The parent maps no TLS library and handles no byte of the
connection: the TLS server is the program it starts, a new process per connection, which
lives only as long as its connection. Children are reaped by the kernel (SIGCHLD ignored).
usage: inetd.py PORT MAX_SECONDS PROGRAM [ARGS...]"""
import os
import signal
import socket
import sys
import time

port, limit, argv = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
srv = socket.create_server(("127.0.0.1", port), backlog=128)
srv.settimeout(1.0)
deadline = time.monotonic() + limit
while time.monotonic() < deadline:
    try:
        conn, _ = srv.accept()
    except socket.timeout:
        continue
    if os.fork() == 0:
        try:
            srv.close()
            conn.setblocking(True)
            os.dup2(conn.fileno(), 0)
            os.dup2(conn.fileno(), 1)
            conn.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    conn.close()
