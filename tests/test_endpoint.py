"""The metrics endpoint as an unfriendly neighbour meets it (issue 19): slow and huge requests,
idle and never-reading clients and garbage must not keep a healthy scrape waiting more than
a second or grow the agent past its bounds; TLS with client certificates and basic auth
through --web.config.file, accepted and refused, by curl and by a real Prometheus."""
from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import ssl
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from harness.agent import TLSPROF, Agent, run_tlsprof
from harness.clients import keepalive_connections
from harness.metrics import parse_metrics, value
from harness.procs import wait_for
from harness.servers import Nginx

# every scrape answered within a second: a timing, after the kernel matrix's guests
pytestmark = pytest.mark.quiet

MIB = 1 << 20
# The agent's own memory (64 MiB) plus the endpoint's documented bound: 256 connections,
# each holding at most a 16 KiB request head and its buffers (docs/metrics.md, "Bounds").
RSS_LIMIT = 64 * MIB + 8 * MIB


class Scraper:
    """A healthy scraper: one scrape every 0.2 s, each allowed 1 s, on its own thread."""

    def __init__(self, agent: Agent):
        self.agent, self.latencies, self.failures, self.rss = agent, [], [], []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                self.agent.scrape_text(timeout=1.0)
                self.latencies.append(time.monotonic() - t0)
            except OSError as e:
                self.failures.append(f"{time.monotonic() - t0:.2f}s: {e!r}")
            self.rss.append(self.agent.rss())
            self._stop.wait(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def check(self, what: str):
        assert len(self.latencies) >= 5, f"{what}: only {len(self.latencies)} scrapes answered ({self.failures[:5]})"
        assert not self.failures, f"{what}: {len(self.failures)} scrapes failed: {self.failures[:5]}"
        assert max(self.latencies) < 1.0, f"{what}: slowest scrape {max(self.latencies):.2f}s"
        assert max(self.rss) < RSS_LIMIT, f"{what}: agent RSS {max(self.rss) / MIB:.0f} MiB"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """nginx with tlsprof attached, its endpoint on loopback."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    nginx = Nginx(tmp_path_factory.mktemp("endpoint"), workers=1)
    agent = Agent("--pid", str(nginx.pid))
    try:
        agent.wait_attached(nginx.workers())
        yield agent
    finally:
        agent.stop()
        nginx.stop()


def refused(agent: Agent, reason: str) -> float:
    return agent.value("tlsprof_scrapes_refused_total", reason=reason)


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def test_slowloris_does_not_take_the_scrape_slots(endpoint):
    """Eight connections trickle a header one byte every 3 s, reconnecting whenever closed:
    every healthy scrape is answered within 1 s, and each trickler is closed at the header
    deadline (5 s)."""
    before = refused(endpoint, "deadline")
    stop = threading.Event()
    closed = []

    def trickle():
        while not stop.is_set():
            s = connect(endpoint.port)
            try:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ")
                while not stop.wait(3):
                    s.sendall(b"a")
            except OSError:
                closed.append(time.monotonic())
            finally:
                s.close()

    threads = [threading.Thread(target=trickle, daemon=True) for _ in range(8)]
    with Scraper(endpoint) as sc:
        for t in threads:
            t.start()
        time.sleep(13)
        stop.set()
        for t in threads:
            t.join(10)
    sc.check("slowloris")
    assert len(closed) >= 8, f"only {len(closed)} tricklers were closed"
    assert refused(endpoint, "deadline") - before >= 8


def send_header(port: int, size: int, deadline: float = 60) -> tuple[int, bytes]:
    """Sends a request whose one header is `size` bytes long, in 1 MiB pieces, until the
    agent closes the connection; returns (bytes sent, what it answered)."""
    s = connect(port)
    sent = 0
    chunk = b"a" * MIB
    end = time.monotonic() + deadline
    try:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: ")
        while sent < size and time.monotonic() < end:
            s.sendall(chunk[: min(MIB, size - sent)])
            sent += MIB
        s.sendall(b"\r\n\r\n")
    except OSError:
        pass
    try:
        answer = s.recv(200)
    except OSError:
        answer = b""
    s.close()
    return sent, answer


def test_huge_headers_are_refused_early(endpoint):
    """A header of a few MiB gets 431; one of 1,500 MiB is cut off after the first MiBs,
    and the agent's memory does not grow with either."""
    before = refused(endpoint, "too_large")
    with Scraper(endpoint) as sc:
        sent, answer = send_header(endpoint.port, 4 * MIB)
        assert answer.startswith(b"HTTP/1.1 431") or answer == b"", answer
        sent, _ = send_header(endpoint.port, 1500 * MIB)
        assert sent < 1500 * MIB, "the agent read the whole 1,500 MiB header"
        time.sleep(1)
    sc.check("huge headers")
    assert refused(endpoint, "too_large") - before == 2


def test_idle_connections_and_clients_that_never_read(endpoint):
    """1,000 connections that send nothing, then 50 that send a request and never read the
    answer: healthy scrapes go on; the oldest idle connections are closed to make room."""
    before = refused(endpoint, "evicted")
    with Scraper(endpoint) as sc:
        idle = [connect(endpoint.port) for _ in range(1000)]
        time.sleep(2)
        deaf = []
        for _ in range(50):
            s = connect(endpoint.port)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            deaf.append(s)
        time.sleep(3)
        for s in idle + deaf:
            s.close()
    sc.check("idle and deaf clients")
    assert refused(endpoint, "evicted") - before >= 1000 - 256


def test_garbage(endpoint):
    """Random bytes, a TLS ClientHello on the plain port, binary and bare newlines: the
    agent answers what it can (400) and keeps serving."""
    with Scraper(endpoint) as sc:
        for i in range(200):
            s = connect(endpoint.port)
            try:
                s.sendall([os.urandom(4096), b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64),
                           b"\r\n" * 1000, b"\x00" * 100 + b"\r\n\r\n"][i % 4])
                s.shutdown(socket.SHUT_WR)
                s.recv(100)
            except OSError:
                pass
            s.close()
        time.sleep(2)
    sc.check("garbage")
    assert endpoint.proc.poll() is None


# ------------------------------------------------------------------ TLS and basic auth

def openssl(*args: str, cwd: Path):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and two client certificates: one the CA
    signed, one self-signed."""
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "2", "-subj", "/CN=tlsprof test CA", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", "san.ext", cwd=d)
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "rogue.key",
            "-out", "rogue.crt", "-days", "2", "-subj", "/CN=rogue", cwd=d)
    return d


def bcrypt_hash(password: str) -> str:
    r = subprocess.run(["htpasswd", "-nbBC", "10", "alice", password], check=True, capture_output=True, text=True)
    return r.stdout.strip().split(":", 1)[1]


def client_context(pki: Path, cert: str | None = "client") -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return ctx


@contextmanager
def secured_agent(pki: Path, client_auth: str = "RequireAndVerifyClientCert", args: tuple = ()):
    cfg = pki / "web.yml"
    cfg.write_text(
        "tls_server_config:\n"
        "  cert_file: server.crt\n  key_file: server.key\n"  # relative to the file, as the toolkit reads them
        f"  client_auth_type: {client_auth}\n  client_ca_file: ca.crt\n"
        f"basic_auth_users:\n  alice: '{bcrypt_hash('wonderland')}'\n"
    )
    agent = Agent("--web.config.file", str(cfg), *args, ssl_context=client_context(pki), auth=("alice", "wonderland"))
    try:
        yield agent
    finally:
        agent.stop()


def curl(pki: Path, url: str, *args: str) -> tuple[int, str]:
    """curl's exit status and the HTTP status it got (000: none)."""
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                        "--cacert", str(pki / "ca.crt"), *args, url], capture_output=True, text=True)
    return r.returncode, r.stdout


@pytest.mark.skipif(not shutil.which("htpasswd"), reason="htpasswd (apache2-utils) not installed")
def test_tls_client_certificates_and_basic_auth(pki):
    with secured_agent(pki) as agent:
        url = agent.url
        ok = ["--cert", str(pki / "client.crt"), "--key", str(pki / "client.key")]
        assert curl(pki, url, *ok, "-u", "alice:wonderland") == (0, "200")
        assert curl(pki, url, *ok, "-u", "alice:wrong") == (0, "401")
        assert curl(pki, url, *ok, "-u", "mallory:wonderland") == (0, "401")
        assert curl(pki, url, *ok) == (0, "401")
        # no client certificate, or one the CA did not sign: the TLS handshake is refused
        rc, code = curl(pki, url, "-u", "alice:wonderland")
        assert rc != 0 and code == "000", (rc, code)
        rc, code = curl(pki, url, "--cert", str(pki / "rogue.crt"), "--key", str(pki / "rogue.key"),
                        "-u", "alice:wonderland")
        assert rc != 0 and code == "000", (rc, code)
        # plain HTTP on the TLS port gets nothing
        rc, code = curl(pki, url.replace("https", "http"))
        assert code in ("000", "400"), (rc, code)
        samples = parse_metrics(agent.scrape_text())
        assert value(samples, "tlsprof_scrapes_refused_total", reason="unauthorized") == 3
        assert value(samples, "tlsprof_scrapes_refused_total", reason="tls") >= 3


@pytest.mark.skipif(not shutil.which("htpasswd"), reason="htpasswd (apache2-utils) not installed")
def test_optional_client_certificate(pki):
    """VerifyClientCertIfGiven: no certificate is fine, a rogue one is refused."""
    with secured_agent(pki, "VerifyClientCertIfGiven") as agent:
        assert curl(pki, agent.url, "-u", "alice:wonderland") == (0, "200")
        rc, code = curl(pki, agent.url, "--cert", str(pki / "rogue.crt"), "--key", str(pki / "rogue.key"),
                        "-u", "alice:wonderland")
        assert code == "000", (rc, code)


@pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus not installed")
@pytest.mark.skipif(not shutil.which("htpasswd"), reason="htpasswd (apache2-utils) not installed")
def test_prometheus_scrapes_through_the_web_config(pki, tmp_path):
    from harness.prometheus import Prometheus
    with secured_agent(pki) as agent:
        tls = {"ca_file": str(pki / "ca.crt"), "cert_file": str(pki / "client.crt"),
               "key_file": str(pki / "client.key")}
        good = Prometheus(tmp_path, "good", f"127.0.0.1:{agent.port}", scrape={
            "scheme": "https", "tls_config": tls, "basic_auth": {"username": "alice", "password": "wonderland"}})
        bad = Prometheus(tmp_path, "bad", f"127.0.0.1:{agent.port}", scrape={
            "scheme": "https", "tls_config": tls, "basic_auth": {"username": "alice", "password": "guess"}})
        try:
            def up(prom):
                r = prom.query('up{job="tlsprof"}')
                return r and r[0]["value"][1]
            wait_for(lambda: up(good) == "1", 30, "Prometheus to scrape tlsprof through TLS and basic auth")
            wait_for(lambda: up(bad) == "0", 30, "Prometheus with a wrong password to get up == 0")
            assert good.query("tlsprof_agent_resident_memory_bytes"), "no tlsprof metrics in Prometheus"
            health = bad.api("targets")["activeTargets"][0]
            assert "401" in health["lastError"], health
        finally:
            good.stop()
            bad.stop()


def top_row(out: str, first: str) -> list[str]:
    """The cells of the line of `tlsprof top --once` output that starts with `first`."""
    return next((line.split() for line in out.splitlines() if line.split()[:1] == [first]), [])


def top_once(*args: str) -> subprocess.CompletedProcess:
    """`tlsprof top --once` over a 0.2 s window."""
    return subprocess.run([str(TLSPROF), "top", "--once", "--interval", "0.2", *args], capture_output=True,
                          text=True, timeout=30)


def top_refused(*args: str) -> str:
    """The one line `tlsprof top --once` says as it fails."""
    r = top_once(*args)
    lines = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(lines) == 1, (args, r.stderr)
    return lines[0]


def test_top_reads_an_agent_with_a_self_signed_certificate(tmp_path):
    """The agent served with a self-signed certificate made as the exporter toolkit's docs
    make one (`openssl req -x509`, which marks it CA:TRUE), given to the clients as their CA
    file: curl accepts it, and so must `top --url` (webpki alone refuses a CA certificate as
    a server's). Its name is still checked, and another self-signed certificate given as the
    CA file is still refused."""
    for name in ("agent", "other"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", cwd=tmp_path)
    text = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "agent.crt"), "-noout", "-ext", "basicConstraints"],
                          check=True, capture_output=True, text=True).stdout
    assert "CA:TRUE" in text, text
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: agent.crt\n  key_file: agent.key\n")
    agent = Agent("--web.config.file", str(cfg), ssl_context=ssl.create_default_context(cafile=str(tmp_path / "agent.crt")))
    try:
        url = f"https://127.0.0.1:{agent.port}/metrics"
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                            "--cacert", str(tmp_path / "agent.crt"), url], capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (0, "200"), r
        r = top_once("--url", url, "--ca-file", str(tmp_path / "agent.crt"))
        assert r.returncode == 0 and "tlsprof top:" in r.stdout, r.stderr
        for args, why in [(("--ca-file", str(tmp_path / "other.crt")), "give the agent's own certificate as --ca-file"),
                          (("--ca-file", str(tmp_path / "agent.crt"), "--server-name", "elsewhere.example"),
                           "not valid for this host name")]:
            line = top_refused("--url", url, *args)
            assert why in line, (args, line)
    finally:
        agent.stop()


@pytest.mark.skipif(not shutil.which("htpasswd"), reason="htpasswd (apache2-utils) not installed")
def test_top_and_report_read_the_https_endpoint(pki, tmp_path):
    """`top --url` and `report --url` read an agent served as the Kubernetes DaemonSet
    serves it (TLS, a client CA, basic auth) with what a Prometheus scrape configuration
    gives (a CA file, a client certificate and key, basic auth from the URL or the flags),
    and count what the client did; a wrong password, a missing CA or client certificate,
    plain HTTP on the TLS port each give one line and a non-zero exit."""
    n = Nginx(tmp_path / "n")
    tls = ["--ca-file", str(pki / "ca.crt"), "--cert-file", str(pki / "client.crt"),
           "--key-file", str(pki / "client.key")]
    try:
        with secured_agent(pki, args=("--pid", str(n.pid))) as agent:
            agent.wait_attached([n.pid])
            url = f"https://alice:wonderland@127.0.0.1:{agent.port}/metrics"
            p = subprocess.Popen([str(TLSPROF), "top", "--once", "--interval", "3", "--comm", "nginx",
                                  "--url", url, *tls], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            line = p.stderr.readline()
            assert "measuring" in line, line + p.stderr.read()
            c = keepalive_connections(n.port, 30, 4, end="close")
            out, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
            assert c == {"requests": 120, "connections": 30, "failed": 0}
            window = float(out.split(" s window")[0].rsplit(" ", 1)[1])
            r = top_row(out, "nginx")
            assert r and abs(float(r[1]) * window - 30) < 0.5 and r[10] == "4.0", out
            port = top_row(out, str(n.port))
            assert port and port[1] == "tls" and abs(float(port[2]) * window - 30) < 0.5 and port[7] == "100%", out

            # report: the user from --username, the password from a file, curl's flag names
            password = tmp_path / "password"
            password.write_text("wonderland\n")
            report = tmp_path / "report.json"
            p = subprocess.Popen([str(TLSPROF), "report", "--comm", "nginx", "--seconds", "60", "--until-eof",
                                  "--no-calibrate", "-o", str(tmp_path / "report.md"), "--json", str(report),
                                  "--url", f"https://127.0.0.1:{agent.port}/metrics", "--ca-file", str(pki / "ca.crt"),
                                  "--cert", str(pki / "client.crt"), "--key", str(pki / "client.key"),
                                  "--username", "alice", "--password-file", str(password)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            seen = ""
            while "observing" not in seen:
                line = p.stderr.readline()
                assert line, seen + p.communicate(timeout=30)[1]
                seen += line
            c = keepalive_connections(n.port, 25, 2, end="close")
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            assert c == {"requests": 50, "connections": 25, "failed": 0}
            nginx = next(x for x in json.loads(report.read_text())["processes"] if x["comm"] == "nginx")
            assert nginx["full"] + nginx["resumed"] == 25, nginx

            def fails(*args: str) -> str:
                line = top_refused(*args)
                assert "wonderland" not in line and "guess" not in line, "no password in messages"
                return line
            bare = f"https://127.0.0.1:{agent.port}/metrics"
            assert "the user name or password is wrong" in fails(
                "--url", f"https://alice:guess@127.0.0.1:{agent.port}/metrics", *tls)
            assert "it needs a user name and password" in fails("--url", bare, *tls)
            assert "not signed by a CA tlsprof trusts (--ca-file)" in fails("--url", url, *tls[2:])
            assert "does it need a client certificate" in fails("--url", url, *tls[:2])
            rogue = ["--cert-file", str(pki / "rogue.crt"), "--key-file", str(pki / "rogue.key")]
            assert "does it need a client certificate" in fails("--url", url, *tls[:2], *rogue)
            assert "is it https://?" in fails("--url", bare.replace("https:", "http:"))
            assert "not valid for this host name (--server-name)" in fails("--url", url, *tls, "--server-name",
                                                                           "elsewhere.example")
            # the name checked is --server-name's, not the URL's host (the certificate has localhost)
            r = top_once("--url", url, *tls, "--server-name", "localhost")
            assert r.returncode == 0 and "tlsprof top:" in r.stdout, r.stderr
            # each refusal counted by the agent: the two 401s, the three refused handshakes
            assert refused(agent, "unauthorized") >= 2 and refused(agent, "tls") >= 3
    finally:
        n.stop()


def test_web_config_errors_are_one_line(tmp_path):
    """A broken web configuration stops tlsprof before it loads anything, with the
    toolkit's words."""
    cases = {
        "tls_server_config:\n  key_file: k.pem\n": "missing one of cert or cert_file",
        "tls_server_config:\n  cert_file: nowhere.pem\n  key_file: k.pem\n": "failed to read cert_file",
        "basic_auth_users:\n  alice: plaintext\n": "bcrypt hashes must start with '$'",
        "tls_server_cofig: {}\n": "unknown field `tls_server_cofig`",
        "tls_server_config:\n  client_ca_file: ca.crt\n  cert_file: a\n  key_file: b\n  client_auth_type: Bogus\n":
            "failed to read cert_file",
    }
    for text, words in cases.items():
        cfg = tmp_path / "web.yml"
        cfg.write_text(text)
        r = run_tlsprof("run", "--web.config.file", str(cfg), "--duration", "1")
        assert r.returncode != 0 and words in r.stderr, (text, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "panicked" not in r.stderr
