"""Requests whatever the protocol's framing, against nginx's own count (stub_status) and the
clients' (wrk, siege, h2load, and a node HTTP/2 client that reuses its connections):

- exchanges (client data, then the server's answer) are exact requests where each request
  is answered before the next: HTTP/1.1 keep-alive from wrk, siege and h2load --h1;
- HTTP/2 connections are recognised where the ServerHello shows ALPN (TLS 1.2): counted
  as h2 in tlsprof_tls_connections_by_protocol_total, one per h2load connection; there (and
  under pipelining) exchanges are fewer than requests, never more;
- the keep-alive rule judges reuse by how long connections live: no finding on an HTTP/2
  client that reuses its connections (a few exchanges of many streams each), a finding on
  one that opens a connection per request."""
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from harness.agent import Agent
from harness.procs import ROOT, free_port, wait_for
from harness.servers import Nginx
from test_report import Report

pytestmark = pytest.mark.skipif(not all(shutil.which(c) for c in ("h2load", "wrk", "siege", "node")),
                                reason="needs h2load, wrk, siege and node (scripts/deps.sh)")


def stub_requests(port: int) -> int:
    """nginx's own request count, less the request that reads it."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/stub_status", timeout=5).read().decode()
    return int(text.splitlines()[2].split()[2]) - 1


def h2load(port: int, *args: str) -> dict:
    out = subprocess.run(["h2load", *args, f"https://127.0.0.1:{port}/"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed", out.stdout)
    clients = re.search(r"(\d+) total client", out.stdout)
    proto = re.search(r"Application protocol: (\S+)", out.stdout)
    return {"requests": int(m.group(3)), "failed": int(m.group(4)), "connections": int(clients.group(1)),
            "protocol": proto.group(1) if proto else None}


def wrk(port: int, seconds: int = 2) -> int:
    out = subprocess.run(["wrk", "-t1", "-c4", f"-d{seconds}s", f"https://127.0.0.1:{port}/"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(re.search(r"(\d+) requests in", out.stdout).group(1))


def siege(port: int, tmp: Path) -> int:
    rc = tmp / "siegerc"
    rc.write_text("connection = keep-alive\nprotocol = HTTP/1.1\nshow-logfile = false\nlogging = false\n")
    out = subprocess.run(["siege", "-R", str(rc), "-b", "-j", "-c", "2", "-r", "50", f"https://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout[out.stdout.index("{"):])
    assert s["failed_transactions"] == 0, s
    return s["successful_transactions"]


class Counts:
    """The agent's exchanges and protocols on the TLS port, and nginx's requests."""

    def __init__(self, agent: Agent, srv: Nginx, plain: int):
        self.agent, self.srv, self.plain = agent, srv, plain

    def now(self) -> dict:
        port = str(self.srv.port)
        return {"stub": stub_requests(self.plain),
                "exchanges": self.agent.value("tlsprof_exchanges_total", comm="nginx", port=port),
                **{p: self.agent.value("tlsprof_tls_connections_by_protocol_total", comm="nginx", port=port,
                                       protocol=p) for p in ("h2", "http/1.1", "encrypted")}}

    def during(self, load) -> tuple[dict, object]:
        """Runs the load; returns how each count moved (once the agent's settled) and its result."""
        before = self.now()
        result = load()
        requests = stub_requests(self.plain) - before["stub"] - 1  # less the read just above
        # exchanges and protocols are exported at each scan: wait for them to stop moving
        last = {}

        def settled():
            nonlocal last
            now = self.now()
            same = {k: v for k, v in now.items() if k != "stub"} == {k: v for k, v in last.items() if k != "stub"}
            last = now
            return same and now["exchanges"] - before["exchanges"] >= min(requests, 1)
        wait_for(settled, 20, "the agent's counts to settle")
        time.sleep(1.2)
        after = self.now()
        moved = {k: after[k] - before[k] for k in after if k != "stub"}
        moved["requests"] = requests
        return moved, result


def test_exchanges_against_stub_status(workdir):
    plain = free_port()
    tls13 = Nginx(workdir / "tls13", http2=True, plain_port=plain)
    plain12 = free_port()
    tls12 = Nginx(workdir / "tls12", http2=True, plain_port=plain12, protocols="TLSv1.2")
    try:
        with Agent("--pid", str(tls13.pid), "--pid", str(tls12.pid)) as agent:
            agent.wait_attached(tls13.workers() + tls12.workers())
            c13, c12 = Counts(agent, tls13, plain), Counts(agent, tls12, plain12)

            # HTTP/1.1, each request answered before the next: exact
            moved, n = c13.during(lambda: wrk(tls13.port))
            assert moved["exchanges"] == moved["requests"] >= n > 0, moved
            moved, n = c13.during(lambda: siege(tls13.port, workdir))
            assert moved["exchanges"] == moved["requests"] == n == 100, moved
            moved, r = c13.during(lambda: h2load(tls13.port, "--h1", "-n", "400", "-c", "4", "-m", "1"))
            assert r["requests"] == 400 and r["failed"] == 0, r
            assert moved["exchanges"] == moved["requests"] == 400, moved
            # TLS 1.3 hides ALPN's choice: counted as encrypted, one per connection
            moved, r = c13.during(lambda: h2load(tls13.port, "-n", "400", "-c", "4", "-m", "1"))
            assert r["protocol"] == "h2" and moved["requests"] == 400, (r, moved)
            assert moved["encrypted"] == 4 and moved["h2"] == 0, moved

            # TLS 1.2: h2 in the ServerHello, one per connection; exchanges no more than requests
            for m in ("1", "10"):
                moved, r = c12.during(lambda: h2load(tls12.port, "-n", "2000", "-c", "4", "-m", m))
                assert r == {"requests": 2000, "failed": 0, "connections": 4, "protocol": "h2"}, r
                assert moved["requests"] == 2000 and moved["h2"] == 4 and moved["http/1.1"] == 0, moved
                assert 0 < moved["exchanges"] <= 2000 + 4, moved  # + the server's SETTINGS
                if m == "10":
                    assert moved["exchanges"] < 1000, moved  # many streams per exchange
            # HTTP/1.1 pipelining: http/1.1 in the ServerHello; bursts of requests are one exchange
            moved, r = c12.during(lambda: h2load(tls12.port, "--h1", "-n", "2000", "-c", "4", "-m", "8"))
            assert r["requests"] == 2000 and moved["requests"] == 2000, (r, moved)
            assert moved["http/1.1"] == 4 and moved["h2"] == 0, moved
            assert 0 < moved["exchanges"] <= 2000, moved
    finally:
        tls13.stop()
        tls12.stop()


def h2_bursts(port: int, conns: int, bursts: int, streams: int, pause_ms: int) -> dict:
    out = subprocess.run(["node", ROOT / "tests/clients/h2_bursts.js", str(port), str(conns), str(bursts),
                          str(streams), str(pause_ms)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("protocols", ["TLSv1.2", "TLSv1.2 TLSv1.3"])
def test_keepalive_rule_on_http2(workdir, protocols):
    """A node HTTP/2 client that keeps each connection for 3 bursts of 10 streams, 300 ms
    apart (30 requests in ~3 exchanges, living ~0.6 s): no keep-alive finding, recognised as
    HTTP/2 (TLS 1.2) or not (TLS 1.3). h2load opening a connection per request: the finding."""
    srv = Nginx(workdir / protocols.replace(" ", "_"), http2=True, protocols=protocols)
    try:
        reused = Report(srv.pid, lambda: h2_bursts(srv.port, 24, 3, 10, 300))
        churn = Report(srv.pid, lambda: h2load(srv.port, "-n", "60", "-c", "60", "-m", "1"))
    finally:
        srv.stop()
    assert reused.client == {"connections": 24, "requests": 720, "failed": 0}, reused.client
    port = reused.proc()["ports"][str(srv.port)]
    assert port["ended"] == 24 and port["requests"] < 10 * 24, port  # few exchanges per connection
    assert reused.findings("keepalive") == [], reused.text
    row = next(r for r in reused.table("| Port |") if r[0] == str(srv.port))
    assert row[1] == ("h2" if protocols == "TLSv1.2" else "tls"), row  # its protocol, as far as TLS shows it
    assert row[4] == ("100%" if protocols == "TLSv1.2" else "0%"), row  # HTTP/2 share
    assert churn.client["requests"] == 60 and churn.client["connections"] == 60, churn.client
    hidden = protocols != "TLSv1.2" and churn.proc()["clients"]["hellos"] > 0
    if hidden:
        # TLS 1.3 hides the server's choice and h2load offers h2: not the keep-alive finding
        # (a connection may carry many requests), a softer one without a saving.
        assert churn.findings("keepalive") == [], churn.text
        soft = churn.one("keepalive_http2")
        assert soft["numbers"]["clients_offering_h2_share"] == 1.0 and soft["saving_cpu_cores"] is None, soft
        return
    f = churn.one("keepalive")
    assert f["numbers"]["requests_per_connection"] < 1.5, f
    assert f["numbers"]["http2_share"] == (1.0 if protocols == "TLSv1.2" else 0.0), f
    assert 0 < f["numbers"]["mean_lifetime_seconds"] < 0.5, f
    measured = next(l for l in churn.text.splitlines() if l.startswith("- Measured: ") and "requests each" in l)
    assert ("% HTTP/2" in measured) == (protocols == "TLSv1.2"), measured


def test_no_keepalive_finding_for_http2_over_tls13(workdir):
    """h2load over TLS 1.3, 100 clients, 30 concurrent streams, 30 requests per connection:
    one exchange or so per short-lived connection, the server's ALPN choice encrypted. The
    clients offered h2 (their ClientHellos), so no keep-alive finding ("clients open a new
    connection for every request" is wrong: each carried 30)."""
    srv = Nginx(workdir / "h2-tls13", http2=True, protocols="TLSv1.3")
    try:
        r = Report(srv.pid, lambda: h2load(srv.port, "-n", "3000", "-c", "100", "-m", "30"))
    finally:
        srv.stop()
    assert r.client["requests"] == 3000 and r.client["connections"] == 100, r.client
    if r.proc()["clients"]["hellos"] == 0:
        pytest.skip("no ClientHello read: the agent has no ClientHello capture yet")
    assert r.proc()["clients"]["offers"]["alpn"]["h2"] == 100, r.proc()["clients"]
    assert r.findings("keepalive") == [], r.text
    assert "new connection for every request" not in r.text
