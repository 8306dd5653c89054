"""HTTP/3: QUIC handshakes counted, labelled, timed and read like TCP ones (tests/harness/
quic.py has the servers and clients). Three real HTTP/3 servers, each with another TLS stack
under its QUIC: nginx 1.26 of Debian 13 (OpenSSL 3.0 through nginx's compatibility layer),
Caddy of Debian 13 (Go 1.24 crypto/tls's QUIC API) and of Debian 12 (quic-go's own copy of
crypto/tls, qtls), ngtcp2's example server (GnuTLS); two
real clients, aioquic and ngtcp2's. The truth is the client's own: the connections it made,
the suite its TLS negotiated, the handshakes it resumed.

Every count is exact: N QUIC connections are N handshakes with transport="quic", N
ClientHellos read, N CPU figures under --exact, none failed; the default mode counts the
same handshakes (the wire counts in both). A Retry, resumption and 0-RTT do not change the
count. No byte after the handshake is read: a marker in every request path and response
body appears in no map, metric, log or the agent's memory. Hostile datagrams to the port
never stop the agent, and the handshakes that begin and never end are counted failed,
exactly."""
import json
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from harness import quic
from harness.agent import Agent
from harness.metrics import since, value
from harness.procs import wait_for
from harness.report import Report
from test_client_hello import agent_memory_has, maps_without

N = 20
# The agent's counts reach the client's at its next read of the kernel's events (every scan:
# 0.5 s), and two more scans are waited for after (counted()).
SETTLE = 3.0
QUIC = {"transport": "quic"}


def counted(agent: Agent, base: list, expected: int, **labels) -> dict:
    """tlsprof's QUIC server handshakes since `base`, once they reach `expected` or SETTLE
    passed, after two more scans (so that a count past `expected` shows too)."""
    def now():
        m = since(agent.scrape(), base)
        return {
            "ok": value(m, "tlsprof_handshakes_total", role="server", result="ok", **QUIC, **labels),
            "failed": value(m, "tlsprof_handshakes_total", role="server", result="failed", **QUIC),
            "cpu": value(m, "tlsprof_handshake_cpu_seconds_count", role="server", **QUIC, **labels),
            "hellos": value(m, "tlsprof_client_hellos_total"),
            "tcp": value(m, "tlsprof_handshakes_total", transport="tcp"),
            "unlabelled": value(m, "tlsprof_handshakes_unlabelled_total"),
        }
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        c = now()
        if c["ok"] >= expected and c["hellos"] >= expected:
            break
        time.sleep(0.2)
    agent.settle()
    return {k: int(v) for k, v in now().items()}


def start_agent(comm: str, *args: str) -> Agent:
    agent = Agent("--comm", comm, *args)
    try:
        wait_for(lambda: agent.ready_path.exists() and "quic: UDP port" in agent.output(), 15,
                 f"tlsprof to read the server's UDP port (log: {agent.output()[-2000:]})")
    except BaseException:
        agent.stop()
        raise
    return agent


# Debian 12's Caddy 2.6 (Go 1.19): its QUIC handshakes run in quic-go's own copy of
# crypto/tls (qtls), its TCP ones in crypto/tls
CADDY12 = Path("/usr/bin/caddy")


def server(kind: str, workdir, marker: str, **kw):
    if kind == "caddy12":
        quic.require("h3_get")
        if not CADDY12.exists():
            pytest.skip(f"Debian 12's caddy missing: {CADDY12} ({quic.DEPS})")
        return quic.CaddyH3(workdir, marker, binary=CADDY12, **kw)
    quic.require(kind, "h3_get")
    return {"nginx": quic.NginxH3, "caddy": quic.CaddyH3, "ngtcp2": quic.Ngtcp2Server}[kind](workdir, marker, **kw)


COMM = {"nginx": "nginx", "caddy": "caddy", "caddy12": "caddy", "ngtcp2": "gtlsserver"}

CASES = [
    # (server, its options, agent's mode)
    ("nginx", {"workers": 2}, "exact"),
    ("nginx", {"workers": 2}, "default"),
    ("nginx", {"retry": True}, "exact"),
    ("caddy", {}, "exact"),
    ("caddy", {}, "default"),
    ("caddy12", {}, "exact"),
    ("ngtcp2", {}, "exact"),
]


@pytest.mark.parametrize("kind,opts,mode", CASES,
                         ids=[f"{k}{'-retry' if o.get('retry') else ''}-{m}" for k, o, m in CASES])
def test_quic_handshakes_counted_labelled_timed(workdir, kind, opts, mode):
    """N aioquic connections, one GET each: N QUIC handshakes, labelled with the suite the
    client negotiated, N ClientHellos; under --exact N CPU figures (the probes' on
    SSL_do_handshake, Go's handshake, GnuTLS's gnutls_handshake, joined to the wire's
    connection by time), in the default mode none more than N; no TCP handshake."""
    marker = secrets.token_hex(8)
    with server(kind, workdir, marker, **opts) as srv:
        with start_agent(COMM[kind], *(["--exact"] if mode == "exact" else [])) as agent:
            base = agent.mark()
            c = quic.h3_get(srv.port, N, marker)
            assert (c["ok"], c["bodies_with_marker"]) == (N, N), c
            (suite, n), = c["ciphers"].items()
            got = counted(agent, base, N)
            labelled = counted(agent, base, N, cipher=suite, version="TLSv1.3", resumed="false")
            out = agent.stop()
    print(f"{kind} {opts} {mode}: client {c}; tlsprof {got}; with the client's suite {labelled}")
    assert (got["ok"], got["failed"], got["hellos"], got["tcp"]) == (N, 0, N, 0), got
    assert labelled["ok"] == N, (suite, labelled)
    assert got["unlabelled"] == 0, got
    if mode == "exact":
        assert labelled["cpu"] == N, labelled
    else:
        assert got["cpu"] <= N, got
    # the exit summary: the count and the figures agree
    row = next(line for line in out.splitlines() if line.startswith(COMM[kind]) and " server " in line)
    assert int(row.split()[3]) == N, row


def test_resumption_and_zero_rtt(workdir):
    """Caddy (which accepts 0-RTT) with aioquic resuming from its last ticket and sending its
    GET as early data: N handshakes, as many resumed as the client resumed, a 0-RTT packet
    in the client's first datagrams changes nothing."""
    marker = secrets.token_hex(8)
    with server("caddy", workdir, marker) as srv:
        with start_agent("caddy", "--exact") as agent:
            base = agent.mark()
            c = quic.h3_get(srv.port, N, marker, resume=True, zero_rtt=True)
            got = counted(agent, base, N)
            resumed = counted(agent, base, c["resumed"], resumed="true", cert="none")
    print(f"caddy resume+0-RTT: client {c}; tlsprof {got}; resumed {resumed}")
    assert c["ok"] == N and c["resumed"] == N - 1 and c["zero_rtt_accepted"] >= 1, c
    assert (got["ok"], got["failed"], got["hellos"], got["cpu"]) == (N, 0, N, N), got
    assert (resumed["ok"], resumed["cpu"]) == (c["resumed"], c["resumed"]), resumed


def test_ngtcp2_client_and_tcp_beside_quic(workdir):
    """nginx serving TLS over TCP and QUIC on one port number: curl over TCP and ngtcp2's
    client over QUIC, N/2 each: each handshake under its own transport, none twice."""
    marker = secrets.token_hex(8)
    quic.require("nginx", "ngtcp2_get")
    with server("nginx", workdir, marker) as srv:
        with start_agent("nginx", "--exact") as agent:
            base = agent.mark()
            q = quic.ngtcp2_get(srv.port, N // 2, marker)
            tcp = [subprocess.run(["curl", "-sk", "--max-time", "5", f"https://127.0.0.1:{srv.port}/"],
                                  capture_output=True, timeout=10) for _ in range(N // 2)]
            got = counted(agent, base, N // 2)
            m = since(agent.scrape(), base)
            protocol = value(m, "tlsprof_tls_connections_by_protocol_total", port=str(srv.port), protocol="quic")
    print(f"nginx tcp+quic: ngtcp2 {q}; curl {[t.returncode for t in tcp]}; tlsprof {got}")
    assert q["ok"] == N // 2 and all(t.returncode == 0 and marker.encode() in t.stdout for t in tcp), (q, tcp)
    assert (got["ok"], got["failed"], got["hellos"] - N // 2, got["tcp"]) == (N // 2, 0, N // 2, N // 2), got
    assert protocol == N // 2, protocol


def test_no_byte_after_the_handshake_is_read(workdir):
    """A 64-hex-digit marker in every request path and response body (nginx, aioquic, with
    resumption): in no map of the object, nowhere in the metrics, the log or the agent's
    memory; the host name the clients sent in their ClientHellos is in its memory (the
    ring buffer's pages: what was read is there)."""
    marker = secrets.token_hex(32)
    sni = f"quic-{secrets.token_hex(6)}.example"
    with server("nginx", workdir, marker) as srv:
        with start_agent("nginx") as agent:
            base = agent.mark()
            c = quic.h3_get(srv.port, 5, marker, path=f"/{marker}", sni=sni, resume=True)
            assert c["bodies_with_marker"] == 5, c
            got = counted(agent, base, 5)
            assert got["ok"] == 5, got
            assert marker not in agent.scrape_text() and marker not in agent.output()
            assert maps_without(agent.proc.pid, marker) >= 5
            found = agent_memory_has(agent.proc.pid, [marker.encode(), sni.encode()])
    assert not found[marker.encode()], "the marker is in the agent's memory"
    assert found[sni.encode()], "the ClientHello's host name is not: nothing was read"


def test_hostile_datagrams_and_refused_handshakes(workdir):
    """Garbage, lying lengths, unknown versions, truncated and corrupted Initials to the
    server's QUIC port (50 of each), then 5 real Initials whose client never answers, and 5
    aioquic clients that refuse the server's certificate (verifying it against itself: it
    names no host in a subjectAltName, which aioquic requires): the agent keeps running,
    counts no handshake for any datagram that does not open, exactly one failed handshake
    per abandoned Initial the server answered and per refusal (closed in an Initial packet,
    or no end after 10 s: wire/quic/flows.rs STALE), and the next N connections exactly."""
    quic.require("nginx", "h3_get")
    marker = secrets.token_hex(8)
    with server("nginx", workdir, marker) as srv:
        with start_agent("nginx") as agent:
            base = agent.mark()
            r = subprocess.run([str(quic.AIOQUIC_PYTHON), str(quic.ROOT / "tests/clients/quic_hostile.py"),
                                "--port", str(srv.port), "--each", "50", "--abandoned", "5"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr[-2000:]
            sent = json.loads(r.stdout.strip().splitlines()[-1])
            refused = quic.h3_get(srv.port, 5, cafile=str(srv.crt), connect_timeout=3)
            # the abandoned ones end after STALE (10 s), at a scan
            failed = lambda: value(since(agent.scrape(), base), "tlsprof_handshakes_total", result="failed")
            wait_for(lambda: failed() >= sent["abandoned_acknowledged"] + refused["failed"], 20,
                     f"the abandoned and refused handshakes to fail ({failed()})")
            c = quic.h3_get(srv.port, N, marker)
            got = counted(agent, base, N)
            assert agent.proc.poll() is None, agent.output()[-2000:]
    print(f"hostile: sent {sent}; refusing clients {refused}; client {c}; tlsprof {got}")
    assert sent["abandoned_acknowledged"] == 5, sent
    assert (refused["ok"], refused["failed"]) == (0, 5), refused
    assert c["ok"] == N, c
    assert (got["ok"], got["failed"], got["hellos"]) == (N, 10, N + 10), got


def test_report_shows_quic_beside_tcp(workdir):
    """`tlsprof report` over nginx while aioquic makes N HTTP/3 connections (a marker in each
    request path and response body) and curl N/2 over TCP: the report's processes give each
    transport's handshakes and the share over QUIC exactly, its Markdown a Transport section,
    and no report file holds the marker."""
    marker = secrets.token_hex(32)
    with server("nginx", workdir, marker) as srv:
        def load():
            q = quic.h3_get(srv.port, N, marker, path=f"/{marker}")
            tcp = sum(subprocess.run(["curl", "-sk", "--max-time", "5", f"https://127.0.0.1:{srv.port}/"],
                                     capture_output=True, timeout=10).returncode == 0 for _ in range(N // 2))
            return {"quic": q["ok"], "tcp": tcp}
        r = Report([srv.pid, *srv.workers()], load)
    p = r.proc("nginx")
    print(f"report: client {r.client}; transports {p['transports']}; share {p['quic_share']}")
    assert r.client == {"quic": N, "tcp": N // 2}, r.client
    assert p["transports"]["quic"]["handshakes"] == N and p["transports"]["tcp"]["handshakes"] == N // 2, p
    assert abs(p["quic_share"] - N / (N + N // 2)) < 1e-9, p["quic_share"]
    assert "## Transport" in r.text
    for f in (r.md, r.html, r.json_path):
        assert marker not in f.read_text(), f
