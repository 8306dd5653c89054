"""HTTP/3 (QUIC) servers on loopback and their clients, for the QUIC tests.

Three real HTTP/3 servers, each configured from scratch in a directory of its own, run in
the foreground as this process's child (its pid is the server's, stopped by that pid), on a
fresh loopback port that is free for UDP and TCP alike:

- NginxH3: nginx 1.26 of Debian 13 (unpacked by scripts/deps.sh under
  $TLSPROF_TESTDEPS/quic/trixie, never installed), on Debian 12's OpenSSL 3.0 through
  nginx's OpenSSL compatibility layer (which has no 0-RTT: early data is always refused);
  QUIC and TLS over TCP on the same port number, a master and 1 or 2 workers.
- CaddyH3: Caddy 2.6 of Debian 13 (Go 1.24: quic-go on crypto/tls's QUIC API), one process.
- Ngtcp2Server: ngtcp2's example server on GnuTLS (`gtlsserver`, Debian 12's ngtcp2-server
  0.12.1), one process, serving a file.

Each answers GET / with a small body holding the test's marker. start() returns once the
UDP port is bound (ss) and one HTTP/3 GET through it has been answered with the marker (so
every server has made one QUIC handshake before the test's own).

The clients: h3_get() runs tests/clients/h3_get.py (aioquic, in scripts/deps.sh's venv),
ngtcp2_get() runs Debian 12's `gtlsclient` once per connection. Each makes its connections
one after another, is bounded in count and time, and is killed past a hard timeout. Every
address is loopback."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .certs import server_setup
from .procs import ROOT, gone, port_open, proc_children, stop_pid, wait_for
from .servers import TESTDEPS

QUIC = TESTDEPS / "quic"
TRIXIE = QUIC / "trixie"                       # Debian 13's nginx, nginx-common, caddy, dpkg -x'd
NGINX_H3 = TRIXIE / "usr/sbin/nginx"
NGINX_MIME_TYPES = TRIXIE / "etc/nginx/mime.types"
CADDY_H3 = TRIXIE / "usr/bin/caddy"
GTLSSERVER = Path("/usr/sbin/gtlsserver")      # Debian 12's ngtcp2-server
GTLSCLIENT = Path("/usr/bin/gtlsclient")       # Debian 12's ngtcp2-client
AIOQUIC_PYTHON = QUIC / "aioquic/bin/python"   # a venv with aioquic (scripts/deps.sh)
H3_GET = ROOT / "tests/clients/h3_get.py"

DEPS = "scripts/deps.sh test installs it"


def available() -> dict[str, str | None]:
    """Why each server or client cannot run here (None: it can)."""
    def need(path: Path, what: str) -> str | None:
        return None if path.exists() and os.access(path, os.X_OK) else f"{what} missing: {path} ({DEPS})"
    return {
        "nginx": need(NGINX_H3, "nginx 1.26 of Debian 13") or
        (None if NGINX_MIME_TYPES.exists() else f"nginx-common of Debian 13 missing: {NGINX_MIME_TYPES} ({DEPS})"),
        "caddy": need(CADDY_H3, "caddy of Debian 13"),
        "ngtcp2": need(GTLSSERVER, "ngtcp2's server (ngtcp2-server)"),
        "h3_get": need(AIOQUIC_PYTHON, "aioquic's venv"),
        "ngtcp2_get": need(GTLSCLIENT, "ngtcp2's client (ngtcp2-client)"),
    }


def require(*names: str):
    """Skips the calling test, saying why, when one of these is missing (names of available())."""
    why = [w for n in names if (w := available()[n])]
    if why:
        import pytest
        pytest.skip("; ".join(why))


def free_udp_port() -> int:
    """A loopback port free for UDP and for TCP alike (nginx and Caddy take both)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("127.0.0.1", 0))
            port = u.getsockname()[1]
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                    t.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no loopback port free for both UDP and TCP")


def udp_bound(port: int) -> set[int]:
    """The pids of the processes with a UDP socket bound to this local port (ss -lunp)."""
    out = subprocess.run(["ss", "-Hlunp", f"( sport = :{port} )"], capture_output=True, text=True,
                         timeout=10).stdout
    return {int(p) for p in re.findall(r"pid=(\d+)", out)}


def _started(pid: int) -> str | None:
    """When the process started (clock ticks after boot): with the pid, who it is."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError as e:
        return f"({path}: {e})"


class _H3Server:
    """One HTTP/3 server: configured by the subclass's _configure() (returns its argv),
    started in the foreground as this process's child, stopped by its pid."""
    kind = "h3"
    need = ""                 # the available() entry it needs
    tcp = True                # also listens on TCP (TLS over TCP) on the same port number
    stop_signal = signal.SIGTERM

    def __init__(self, tmp: Path, marker: str, cert: str = "ecdsa_p256"):
        # said as it is in each server's configuration: no nginx variable ($), no Caddy placeholder ({})
        if not re.fullmatch(r"[A-Za-z0-9 ._:/=+,@-]+", marker):
            raise ValueError(f"marker {marker!r}: letters, digits, space and ._:/=+,@- only")
        self.marker = marker
        self.dir, self.port, self.key, self.crt = server_setup(Path(tmp), self.kind, cert, free_udp_port())
        self.log = self.dir / "server.log"
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self._seen: dict[int, str] = {}   # every process of the server seen: pid -> its start time

    # -- what the subclasses give
    def _configure(self) -> list:
        raise NotImplementedError

    def _env(self) -> dict:
        return {}

    # --
    @property
    def pids(self) -> list[int]:
        """The server's processes: the one started, and its children (nginx's workers)."""
        if self.pid is None or gone(self.pid):
            return []
        return [self.pid, *proc_children(self.pid)]

    def start(self, timeout: float = 30.0):
        """Starts the server and waits until its UDP port is bound and one HTTP/3 GET (aioquic)
        is answered with the marker; a server that does not get there is stopped, and the
        error shows its log. Returns self."""
        require(self.need, "h3_get")
        argv = [str(a) for a in self._configure()]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=self.dir, env={**os.environ, **self._env()})
        self.pid = self.proc.pid
        try:
            wait_for(lambda: self.proc.poll() is not None or
                     (udp_bound(self.port) and (not self.tcp or port_open(self.port))), timeout,
                     f"{self.kind} to bind UDP (and TCP) port {self.port}")
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.kind} exited with {self.proc.returncode}")
            self._note()
            last: dict = {}

            def answered():
                nonlocal last
                if self.proc.poll() is not None:
                    return True
                last = h3_get(self.port, 1, self.marker, timeout=5)
                return last["ok"] == 1 and last["bodies_with_marker"] == 1
            try:
                wait_for(answered, timeout, f"{self.kind} to answer an HTTP/3 GET on port {self.port}", interval=0.3)
            except AssertionError as e:
                raise AssertionError(f"{e}; the client's last answer: {last}") from None
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.kind} exited with {self.proc.returncode}")
            self._note()
        except AssertionError as e:
            logs = self.logs()
            self.stop()
            raise AssertionError(f"{e}; its log: {logs}") from None
        return self

    def logs(self) -> str:
        return _tail(self.log)

    def stop(self):
        """Stops the server by its pid (and any child of it still there, by theirs)."""
        if self.proc is None:
            return
        self._note()
        if self.proc.poll() is None:  # not once it has been reaped: its pid may be another's
            stop_pid(self.pid, self.stop_signal)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for pid, started in self._seen.items():  # a worker its master left behind
            if pid != self.pid and not gone(pid) and _started(pid) == started:
                stop_pid(pid, signal.SIGKILL)

    def _note(self):
        for pid in self.pids:
            self._seen.setdefault(pid, _started(pid))

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


class NginxH3(_H3Server):
    """nginx 1.26 of Debian 13: `listen P quic reuseport` and `listen P ssl` on 127.0.0.1,
    http3 on, TLS 1.3 only, Alt-Svc, `return 200 "MARKER\\n"`. Run with `daemon off` and
    `master_process on`: `.pid` is the master (comm nginx), `.workers()` its `workers`
    workers. retry: quic_retry (a Retry packet before each handshake: address validation);
    early_data: ssl_early_data (the OpenSSL compatibility layer refuses 0-RTT all the same);
    quic_bpf: nginx's eBPF routing of QUIC packets to workers by connection ID (off: the
    kernel's reuseport hash of the 4-tuple, enough for clients that do not migrate).
    Session tickets on (keys made by the master, shared by the workers)."""
    kind = "nginx-h3"
    need = "nginx"

    def __init__(self, tmp: Path, marker: str, retry: bool = False, early_data: bool = False, workers: int = 1,
                 cert: str = "ecdsa_p256", quic_bpf: bool = False, binary: Path = NGINX_H3):
        super().__init__(tmp, marker, cert)
        self.retry, self.early_data, self.nworkers, self.quic_bpf, self.binary = (
            retry, early_data, workers, quic_bpf, binary)
        self.conf = self.dir / "nginx.conf"

    def _configure(self) -> list:
        d, p = self.dir, self.port
        self.conf.write_text(f"""
worker_processes {self.nworkers};
daemon off;
master_process on;
pid {d}/nginx.pid;
error_log {d}/error.log info;
{"quic_bpf on;" if self.quic_bpf else ""}
events {{ worker_connections 1024; }}
http {{
  include {NGINX_MIME_TYPES};
  default_type text/plain;
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{
    listen 127.0.0.1:{p} quic reuseport;
    listen 127.0.0.1:{p} ssl;
    http3 on;
    ssl_certificate {self.crt};
    ssl_certificate_key {self.key};
    ssl_protocols TLSv1.3;
    ssl_session_tickets on;
    ssl_early_data {"on" if self.early_data else "off"};
    quic_retry {"on" if self.retry else "off"};
    add_header Alt-Svc 'h3=":{p}"; ma=86400' always;
    location / {{ return 200 "{self.marker}\\n"; }}
  }}
}}
""")
        return [self.binary, "-p", d, "-e", d / "error.log", "-c", self.conf]

    def start(self, timeout: float = 30.0):
        super().start(timeout)
        try:
            wait_for(lambda: len(self.workers()) == self.nworkers, 10, f"{self.nworkers} nginx workers")
        except AssertionError as e:
            logs = self.logs()
            self.stop()
            raise AssertionError(f"{e}; its log: {logs}") from None
        self._note()
        return self

    def workers(self) -> list[int]:
        return proc_children(self.pid) if self.pid and not gone(self.pid) else []

    def logs(self) -> str:
        return _tail(self.dir / "error.log") + _tail(self.log)


class CaddyH3(_H3Server):
    """Caddy 2.6 of Debian 13 on 127.0.0.1 (`bind`), `https://localhost:P, https://127.0.0.1:P`
    with the test's certificate (`tls cert key`), HTTP/1.1, 2 and 3 (Caddy's default for
    HTTPS, said), `respond "MARKER"`, no admin endpoint, no automatic HTTPS, its storage
    and autosave in its own directory. One process, comm `caddy`."""
    kind = "caddy-h3"
    need = "caddy"

    def __init__(self, tmp: Path, marker: str, cert: str = "ecdsa_p256", binary: Path = CADDY_H3):
        super().__init__(tmp, marker, cert)
        self.binary = binary
        self.conf = self.dir / "Caddyfile"

    def _configure(self) -> list:
        d, p = self.dir, self.port
        self.conf.write_text(f"""{{
\tadmin off
\tauto_https off
\tstorage file_system {d}/storage
\tgrace_period 2s
\tservers {{
\t\tprotocols h1 h2 h3
\t}}
}}
https://localhost:{p}, https://127.0.0.1:{p} {{
\tbind 127.0.0.1
\ttls {self.crt} {self.key}
\trespond "{self.marker}" 200
}}
""")
        return [self.binary, "run", "--config", self.conf, "--adapter", "caddyfile"]

    def _env(self) -> dict:
        return {"HOME": str(self.dir), "XDG_DATA_HOME": str(self.dir), "XDG_CONFIG_HOME": str(self.dir)}


class Ngtcp2Server(_H3Server):
    """ngtcp2's example HTTP/3 server on GnuTLS (`gtlsserver`, Debian 12's ngtcp2-server
    0.12.1) on 127.0.0.1, serving htdocs/index.html (the marker) for GET /: QUIC only (no
    TCP), one process, comm `gtlsserver`. It accepts 0-RTT."""
    kind = "ngtcp2"
    need = "ngtcp2"
    tcp = False

    def __init__(self, tmp: Path, marker: str, cert: str = "ecdsa_p256", binary: Path = GTLSSERVER):
        super().__init__(tmp, marker, cert)
        self.binary = binary

    def _configure(self) -> list:
        htdocs = self.dir / "htdocs"
        htdocs.mkdir(exist_ok=True)
        (htdocs / "index.html").write_text(self.marker + "\n")
        return [self.binary, "-q", "-d", htdocs, "--timeout", "30s", "127.0.0.1", self.port, self.key, self.crt]


# --- clients ---------------------------------------------------------------------------------

def h3_get(port: int, n: int, marker: str | None = None, *, host: str = "127.0.0.1", path: str = "/",
           resume: bool = False, zero_rtt: bool = False, cafile: Path | str | None = None,
           sni: str = "localhost", alpn: str = "h3", groups: str | None = None,
           timeout: float = 60.0, connect_timeout: float = 10.0) -> dict:
    """n HTTP/3 connections one after another from tests/clients/h3_get.py (aioquic), each
    a new QUIC connection with one GET read whole; resume: each offers the previous
    connection's session ticket; zero_rtt: and sends its GET as 0-RTT early data; cafile:
    verify the certificate (it must name `sni` in a subjectAltName: aioquic checks only
    those, and certs.make_cert's have none), else none is verified. Returns the client's
    JSON: connections, ok, failed, bodies_with_marker, resumed, zero_rtt_sent,
    zero_rtt_accepted, statuses, seconds, errors. The client is killed `timeout` + 15 s
    after it started, and that fails the call."""
    require("h3_get")
    argv = [AIOQUIC_PYTHON, H3_GET, "--host", host, "--port", port, "--connections", n, "--path", path,
            "--sni", sni, "--alpn", alpn, "--timeout", timeout, "--connect-timeout", connect_timeout]
    argv += ["--marker", marker] if marker else []
    argv += ["--cafile", cafile] if cafile else ["--insecure"]
    argv += ["--resume"] if resume else []
    argv += ["--zero-rtt"] if zero_rtt else []
    argv += ["--groups", groups] if groups else []
    try:
        r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout + 15,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"h3_get.py killed after {timeout + 15} s; stderr: {e.stderr!r}") from None
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert r.returncode == 0 and lines, f"h3_get.py exited {r.returncode}: {r.stdout[-1000:]}{r.stderr[-2000:]}"
    return json.loads(lines[-1])


def ngtcp2_get(port: int, n: int, marker: str | None = None, *, host: str = "127.0.0.1", path: str = "/",
               resume: bool = False, zero_rtt: bool = True, timeout: float = 60.0) -> dict:
    """n HTTP/3 connections one after another from ngtcp2's client (`gtlsclient`, GnuTLS),
    one run each: `gtlsclient --exit-on-all-streams-close --download DIR HOST PORT URI`
    (without --exit-on-all-streams-close it waits for its 30 s idle timeout). It does not
    verify the certificate. resume: runs 2..n offer the session the previous run saved
    (--session-file, --tp-file); with it, the GET goes as 0-RTT early data where the ticket
    allows it, unless zero_rtt=False (--disable-early-data). Returns the client's own
    counts, read from its packet log: connections, ok (exit 0 and the body downloaded),
    failed, bodies_with_marker, zero_rtt_sent (runs that sent 0-RTT packets),
    zero_rtt_accepted (of those, the ones the server did not refuse: "Early data was
    rejected by server"), seconds, errors. gtlsclient 0.12 does not say whether a handshake
    resumed."""
    require("ngtcp2_get")
    counts = {"connections": n, "ok": 0, "failed": 0, "bodies_with_marker": 0, "zero_rtt_sent": 0,
              "zero_rtt_accepted": 0, "seconds": 0.0, "errors": []}
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    start = time.monotonic()
    deadline = start + timeout
    with tempfile.TemporaryDirectory(prefix="ngtcp2-get-") as tmp:
        t = Path(tmp)
        session = ["--session-file", t / "session", "--tp-file", t / "tp"] if resume else []
        for i in range(n):
            left = deadline - time.monotonic()
            if left <= 0:
                counts["failed"] += n - i
                counts["errors"].append(f"overall timeout ({timeout} s): {n - i} runs not made")
                break
            dl = t / f"dl{i}"
            dl.mkdir()
            argv = [GTLSCLIENT, "--exit-on-all-streams-close", "--no-http-dump",
                    "--timeout", "5s", "--handshake-timeout", "5s", "--download", dl, *session,
                    *([] if zero_rtt else ["--disable-early-data"]), host, port, f"https://{authority}{path}"]
            try:
                r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, errors="replace",
                                   timeout=min(left, 15), stdin=subprocess.DEVNULL)
                out, rc = r.stdout + r.stderr, r.returncode
            except subprocess.TimeoutExpired:
                out, rc = "", f"killed after {min(left, 15):.1f} s"
            if re.search(r" pkt tx .* type=0RTT ", out):
                counts["zero_rtt_sent"] += 1
                counts["zero_rtt_accepted"] += "Early data was rejected by server" not in out
            files = [f for f in dl.iterdir() if f.is_file()]
            if rc == 0 and files:
                counts["ok"] += 1
                if marker and any(marker.encode() in f.read_bytes() for f in files):
                    counts["bodies_with_marker"] += 1
            else:
                counts["failed"] += 1
                if len(counts["errors"]) < 5:
                    last = [line for line in out.splitlines() if line.strip()][-3:]
                    counts["errors"].append(f"run {i + 1}: exit {rc}, no body: {' | '.join(last)}")
    counts["seconds"] = round(time.monotonic() - start, 3)
    return counts
