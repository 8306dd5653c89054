"""Real clients and load: Python's ssl, ab, ss. Every loop is bounded in count and time;
every connection goes to loopback."""
from __future__ import annotations

import os
import select
import socket
import ssl
import subprocess
import threading
import time


def run_pool(n: int, concurrency: int, timeout: float, job):
    """Runs job() n times on `concurrency` threads, starting no new run after `timeout` s."""
    lock = threading.Lock()
    todo = iter(range(n))
    deadline = time.monotonic() + timeout

    def worker():
        while time.monotonic() < deadline:
            with lock:
                if next(todo, None) is None:
                    return
            job()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def tls_client_context(version: str | None = None, ciphers: str | None = None,
                       group: str | None = None) -> ssl.SSLContext:
    """group: the one key-exchange group offered (OpenSSL's name, "X25519"); else the
    library's defaults (OpenSSL 3.5's lead with X25519MLKEM768)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if version:
        v = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[version]
        ctx.minimum_version = ctx.maximum_version = v
    if ciphers:
        ctx.set_ciphers(ciphers)
    if group:
        ctx.set_ecdh_curve(group)  # SSL_CTX_set1_groups with OpenSSL 3
    return ctx


def connect(port: int, source: str | None = None, source_port: int = 0) -> socket.socket:
    """A TCP connection to the loopback port, with TCP_NODELAY as browsers, curl and servers
    set it: without it, the request written after the client's last handshake flight waits
    for the server's delayed ACK (40 ms a connection, nine tenths of the load's time here).
    From `source` (a loopback address) and `source_port`, if given: a port of the caller's
    choice with SO_REUSEADDR, as it may still be in TIME_WAIT from an earlier connection to
    another server port."""
    s = socket.socket()
    try:
        s.settimeout(10)
        if source_port:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if source:
            s.bind((source, source_port))
        s.connect(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        s.close()
        raise
    return s


def https_request(ctx: ssl.SSLContext, port: int, source: str | None = None, source_port: int = 0) -> tuple[str, str]:
    """One new TLS connection (from the loopback address `source` and port `source_port`, if
    given) with one request (Connection: close), the response read to EOF. Returns the
    version and cipher suite (OpenSSL name) it negotiated. A connection closed before any
    response raises: in TLS 1.3 the client's handshake ends before the server's does (at
    the client's Finished, which the server then reads), so a server gone meanwhile (a worker
    killed) finished no handshake of its own."""
    with connect(port, source, source_port) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            negotiated = s.version(), s.cipher()[0]
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            got = 0
            while chunk := s.recv(65536):
                got += len(chunk)
            if not got:
                raise ConnectionResetError("closed before any response")
    return negotiated


def https_connections(port: int, n: int, version: str | None = None, concurrency: int = 4,
                      timeout: float = 60.0, ciphers: str | None = None, group: str | None = None,
                      source: str | None = None, first_port: int = 0) -> dict:
    """Makes exactly n new TLS connections (from the loopback address `source`, if given;
    with `first_port`, connection i from port first_port + i, so that no two share their
    addresses and ports: the kernel's own choice may repeat a port whose last connection the
    server still holds in TIME_WAIT, which the new one then ends), one request each
    (Connection: close), reading each response to EOF. Returns the client's own counts, and the versions and cipher
    suites (OpenSSL names) it negotiated."""
    ctx = tls_client_context(version, ciphers, group)
    counts = {"ok": 0, "failed": 0, "versions": set(), "ciphers": set()}
    lock = threading.Lock()
    ports = iter(range(first_port, first_port + n)) if first_port else None

    def job():
        try:
            with lock:
                source_port = next(ports) if ports else 0
            version_used, cipher_used = https_request(ctx, port, source, source_port)
            with lock:
                counts["ok"] += 1
                counts["versions"].add(version_used)
                counts["ciphers"].add(cipher_used)
        except (OSError, ssl.SSLError):
            with lock:
                counts["failed"] += 1

    run_pool(n, concurrency, timeout, job)
    return counts


def resuming_connections(port: int, n: int, version: str | None = None, timeout: float = 60.0) -> dict:
    """n connections one after the other, each offering the session of the previous one
    (a session ID or ticket; in TLS 1.3 the ticket arrives after the handshake, so each
    response is read to EOF first). Returns the client's own counts: "full" and "resumed"
    handshakes, "failed" connections, and the versions negotiated."""
    ctx = tls_client_context(version)
    counts = {"full": 0, "resumed": 0, "failed": 0, "versions": set()}
    session = None
    deadline = time.monotonic() + timeout
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        try:
            with connect(port) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost", session=session) as s:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    while s.recv(65536):
                        pass
                    counts["resumed" if s.session_reused else "full"] += 1
                    counts["versions"].add(s.version())
                    session = s.session
        except (OSError, ssl.SSLError):
            counts["failed"] += 1
    return counts


def _read_response(s, buf: bytes) -> bytes:
    """Reads one HTTP/1.1 response with a Content-Length; returns what follows it."""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise ConnectionError("EOF before a whole response")
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(rest) < length:
        d = s.recv(65536)
        if not d:
            raise ConnectionError("EOF inside a response body")
        rest += d
    return rest[length:]


_SOURCES = iter(f"127.{a}.{b}.{c}" for a in range(100, 255) for b in range(256) for c in range(1, 255))
_SOURCES_LOCK = threading.Lock()


def next_source() -> str:
    """A loopback source address no connection of this test run used before. The server's
    TIME_WAIT socket for a 4-tuple dies when a new SYN reuses that tuple (the kernel
    recycles it), and the client side, which closed second, may reuse its port at once:
    distinct source addresses keep the kernel's TIME_WAIT count equal to the closes."""
    with _SOURCES_LOCK:
        return next(_SOURCES)


def keepalive_connections(port: int, conns: int, per_conn: int, end: str = "eof", concurrency: int = 2,
                          tls: bool = True, timeout: float = 60.0, path: str = "/", version: str | None = None,
                          ciphers: str | None = None) -> dict:
    """`conns` keep-alive connections with `per_conn` HTTP/1.1 requests each, every
    response read whole. How each connection ends:
      eof     - read to EOF (the server closes: its close_notify and FIN are read), then close;
      close   - the client closes first, with nothing unread (clean FIN);
      eof-pause - as eof, but waits 0.2 s before closing, so that its kernel acknowledges
                the server's FIN alone, before the client's FIN goes;
      linger0 - the client closes with SO_LINGER 0: a reset;
      unread  - the client waits for more data from the server (its close_notify and FIN,
                when the server closes), then closes without reading it: a reset;
    Returns the client's own counts: {"requests", "connections", "failed"}, and "ciphers"
    (the suites negotiated) when a version or ciphers were forced."""
    ctx = tls_client_context(version, ciphers)
    counts = {"requests": 0, "connections": 0, "failed": 0}
    negotiated = set()
    lock = threading.Lock()
    request = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()

    def one():
        raw = connect(port, source=next_source())
        s = ctx.wrap_socket(raw, server_hostname="localhost") if tls else raw
        if tls:
            with lock:
                negotiated.add(s.cipher()[0])
        done = 0
        try:
            buf = b""
            for _ in range(per_conn):
                s.sendall(request)
                buf = _read_response(s, buf)
                done += 1
            if end in ("eof", "eof-pause"):
                try:
                    while s.recv(65536):
                        pass
                except (ssl.SSLError, ConnectionResetError):
                    pass
                if tls:
                    # The TLS stream ends at the server's close_notify, which may come a
                    # moment before its FIN: read the TCP stream to its end too.
                    tcp = socket.socket(fileno=os.dup(s.fileno()))
                    tcp.settimeout(10)  # the descriptor is non-blocking: wait in poll
                    try:
                        while tcp.recv(65536):
                            pass
                    except OSError:
                        pass
                    finally:
                        tcp.close()
                if end == "eof-pause":
                    time.sleep(0.2)
            elif end == "unread":
                select.select([s], [], [], 10)
            elif end == "linger0":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        finally:
            s.close()
        return done

    def job():
        try:
            done = one()
            with lock:
                counts["requests"] += done
                counts["connections"] += 1
        except (OSError, ssl.SSLError, ConnectionError):
            with lock:
                counts["failed"] += 1

    run_pool(conns, concurrency, timeout, job)
    if version or ciphers:
        counts["ciphers"] = negotiated
    return counts


def ss_time_wait(port: int, family: str | None = None, peer: str | None = None) -> int:
    """Sockets in TIME_WAIT with this local port, as the kernel shows them to ss; family "4"
    or "6": only that address family's (another family's socket may have the same port);
    peer: only those towards that address."""
    to = f" and dst {peer}" if peer else ""
    return ss_count(*([f"-{family}"] if family else []), "state", "time-wait", f"( sport = :{port}{to} )")


def ss_count(*args: str) -> int:
    """How many TCP sockets `ss -Htan ARGS` lists."""
    out = subprocess.run(["ss", "-Htan", *args], capture_output=True, text=True, check=True).stdout
    return len([line for line in out.splitlines() if line.strip()])


# The states of a server's full socket between the TCP handshake and its close (TIME_WAIT
# is a separate socket: the full one has closed by then).
OPEN_STATES = ("established", "fin-wait-1", "fin-wait-2", "close-wait", "last-ack", "closing")


def ss_open(port: int) -> int:
    """Accepted connections on this local port whose server socket has not closed yet, as the
    kernel shows them to ss. Not the minisockets that take over a closed one: a server socket
    closed in FIN_WAIT2 (its client never sent a FIN, an aborted client) is handed to a
    TIME_WAIT minisocket that ss lists as fin-wait-2, with a timewait timer, until
    tcp_fin_timeout; its full socket has closed."""
    out = subprocess.run(["ss", "-Htano", *[w for s in OPEN_STATES for w in ("state", s)],
                          f"( sport = :{port} )"], capture_output=True, text=True, check=True).stdout
    return len([line for line in out.splitlines() if line.strip() and "timer:(timewait" not in line])


def failing_handshakes(port: int, n: int, ciphers: str) -> int:
    """n TLS 1.2 connections offering only `ciphers`, each expected to fail the handshake."""
    failed = 0
    ctx = tls_client_context("1.2", ciphers)
    for _ in range(n):
        try:
            with connect(port) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    pass
        except ssl.SSLError:
            failed += 1
    return failed


def ab_count(report: str, field: str) -> int:
    """A count from ab's report: field "Complete requests" or "Failed requests"."""
    return next(int(l.split()[-1]) for l in report.splitlines() if l.startswith(field + ":"))


def ab(port: int, n: int | None = None, seconds: float | None = None, concurrency: int = 8) -> int:
    """ab with a new TLS connection per request: exactly n requests, or as many as fit in
    `seconds`. Returns the completed requests as ab counts them (none may fail)."""
    bound = ["-n", str(n)] if n else ["-t", str(seconds), "-n", "10000000"]
    out = subprocess.run(["ab", "-q", "-s", "30", *bound, "-c", str(concurrency), f"https://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=(seconds or 0) + 180)
    assert out.returncode == 0, out.stderr
    assert ab_count(out.stdout, "Failed requests") == 0, out.stdout
    return ab_count(out.stdout, "Complete requests")


def curl_connections(port: int, n: int, curves: str | None, version: str | None = None, timeout: float = 60.0,
                     ciphers: str | None = None) -> dict:
    """n TLS connections from curl (OpenSSL), one per run, offering only the key-exchange
    groups in `curves` (curl --curves) and the TLS 1.2 suites in `ciphers`: the client forces
    them. Returns curl's own counts: connections it made (-w %{num_connects}) and runs that
    failed."""
    forced = (["--curves", curves] if curves else []) + (["--ciphers", ciphers] if ciphers else [])
    counts = {"connects": 0, "failed": 0}
    deadline = time.monotonic() + timeout
    pin = {"1.2": ["--tlsv1.2", "--tls-max", "1.2"], "1.3": ["--tlsv1.3"]}.get(version, [])
    for _ in range(n):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{num_connects}", "--max-time", "10",
                            *forced, *pin, f"https://127.0.0.1:{port}/index.html"],
                           capture_output=True, text=True, timeout=max(left, 1) + 5)
        if r.returncode == 0:
            counts["connects"] += int(r.stdout.strip() or 0)
        else:
            counts["failed"] += 1
    return counts
