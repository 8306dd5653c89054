"""Clients whose connections are no TLS handshake, or a handshake that fails, one kind each:
what load balancers, old clients, strict clients and scanners do to a TLS port. Each
returns how many connections it made that ended as meant (the client's own count), so that a
test compares tlsprof's figure with it exactly. Every connection goes to loopback; every
loop is bounded in count (and each connection by a timeout).

`opened(port)` gives a socket ready for the client's TLS: a plain connect for a server that
speaks TLS from the first byte, or one that has been through a STARTTLS exchange
(`smtp_starttls`)."""
from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time

from harness.build import gotls
from harness.clients import connect, tls_client_context

TIMEOUT = 10.0


def plain(port: int) -> socket.socket:
    s = connect(port)
    s.settimeout(TIMEOUT)
    return s


def _line(s: socket.socket) -> bytes:
    """One SMTP reply (its last line, multi-line replies read through)."""
    buf = b""
    while True:
        chunk = s.recv(1)
        if not chunk:
            raise ConnectionError("closed mid-reply")
        buf += chunk
        if buf.endswith(b"\r\n"):
            if len(buf) >= 4 and buf[3:4] == b"-":
                buf = b""
                continue
            return buf


def smtp_starttls(port: int) -> socket.socket:
    """An SMTP session up to the server's 220 to STARTTLS: the next bytes are the client's TLS."""
    s = plain(port)
    try:
        assert _line(s).startswith(b"220"), "no greeting"
        s.sendall(b"EHLO client.localdomain\r\n")
        assert _line(s).startswith(b"250"), "EHLO refused"
        s.sendall(b"STARTTLS\r\n")
        assert _line(s).startswith(b"220"), "STARTTLS refused"
    except BaseException:
        s.close()
        raise
    return s


def tcp_checks(port: int, n: int, gap: float = 0.0) -> int:
    """n TCP health checks: connect and close, no byte sent (HAProxy's `check`, Kubernetes'
    tcpSocket probe, a port scan's connect)."""
    done = 0
    for _ in range(n):
        with connect(port):
            pass
        done += 1
        time.sleep(gap)
    return done


def handshakes(port: int, n: int, ctx: ssl.SSLContext, opened=plain) -> int:
    """n handshakes that fail at the client (an ssl.SSLError): how many did."""
    failed = 0
    for _ in range(n):
        with opened(port) as raw:
            try:
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    pass
            except (ssl.SSLError, ConnectionError):
                failed += 1
    return failed


def only_version(version: str) -> ssl.SSLContext:
    """A client that offers only this old version (TLS 1.0 or 1.1): servers that allow TLS
    1.2 at least answer protocol_version."""
    ctx = tls_client_context()
    v = {"1.0": ssl.TLSVersion.TLSv1, "1.1": ssl.TLSVersion.TLSv1_1}[version]
    ctx.minimum_version = ctx.maximum_version = v
    ctx.set_ciphers("ALL:@SECLEVEL=0")  # OpenSSL 3 offers nothing below TLS 1.2 at its default level
    return ctx


def only_cipher(cipher: str) -> ssl.SSLContext:
    """A TLS 1.2 client offering only `cipher` (OpenSSL's name), one the server lacks: the
    server answers handshake_failure."""
    return tls_client_context("1.2", cipher)


def verifying(version: str) -> ssl.SSLContext:
    """A client that checks the server's certificate against the system's CAs, which do not
    hold the test's own: it rejects the server's flight with unknown_ca (in the clear in TLS
    1.2; encrypted in TLS 1.3)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    v = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[version]
    ctx.minimum_version = ctx.maximum_version = v
    return ctx


def s_client(port: int, n: int, *args: str, starttls: str | None = None) -> int:
    """n runs of `openssl s_client ARGS` (after `-starttls PROTOCOL` if given), its standard
    input closed: how many failed their handshake (a non-zero exit)."""
    failed = 0
    for _ in range(n):
        r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", "localhost",
                            *(["-starttls", starttls] if starttls else []), *args],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)
        failed += r.returncode != 0
    return failed


def go_rejecting(port: int, n: int) -> int:
    """n TLS 1.3 clients on Go's crypto/tls that reject the server's certificate: Go sends
    its alert encrypted, under the handshake keys (OpenSSL's clients send theirs in the
    clear). How many were rejected (the client's count)."""
    r = subprocess.run([str(gotls()), "reject", str(port), str(n)], capture_output=True, text=True,
                       timeout=30 + 10 * n)
    assert r.returncode == 0, r.stderr
    return int(r.stdout)


def client_hello(version: str) -> bytes:
    """A ClientHello of Python's OpenSSL for this version, as it would send it."""
    ctx = tls_client_context(version)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def hello_then_hang_up(port: int, n: int, version: str, opened=plain) -> int:
    """n clients that send a whole ClientHello and hang up at once (FIN, before the server's
    answer): a client that gave up. The client reads what the server sends until its end:
    closed with unread data, its socket would reset instead."""
    hello = client_hello(version)
    done = 0
    for _ in range(n):
        with opened(port) as s:
            s.sendall(hello)
            s.shutdown(socket.SHUT_WR)
            try:
                while s.recv(65536):
                    pass
            except ConnectionError:
                pass
        done += 1
    return done


def hello_then_reset(port: int, n: int, version: str, opened=plain) -> int:
    """n clients that send a whole ClientHello and abort the connection (a reset: SO_LINGER
    0), as a client killed mid-handshake or a load balancer's TLS check that stops there."""
    hello = client_hello(version)
    done = 0
    for _ in range(n):
        with opened(port) as s:
            s.sendall(hello)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        done += 1
    return done


def plain_http(port: int, n: int, opened=plain) -> int:
    """n plain-HTTP requests to the TLS port; how many got an answer or an end."""
    done = 0
    for _ in range(n):
        with opened(port) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            try:
                while s.recv(65536):
                    pass
            except (ConnectionError, socket.timeout):
                pass
            done += 1
    return done
