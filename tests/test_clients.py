"""What clients offer, against the clients' own ClientHellos as the packets carry them
(harness/hellos.py reads them off loopback and parses them, independently of tlsprof):

- every tlsprof_client_offers_total count equals the sum over the ClientHellos captured,
  for real clients told to offer different things (openssl s_client with -groups,
  -sigalgs, -cipher, -ciphersuites, -tls1_2, -alpn; curl over HTTP/2 and HTTP/1.1; Python
  ssl; gnutls-cli; node 16 on OpenSSL 1.1.1 and node 24 on OpenSSL 3.5, whose offer is
  post-quantum; h2load), and tlsprof_client_hellos_total per SNI equals the host names they
  sent;
- the policies: ecdsa_only fails exactly the clients that offered no ECDSA signature
  algorithm, tls13_only exactly those that offered at most TLS 1.2, and every policy counts
  each ClientHello once;
- resumption: clients that come back with a session (TLS 1.3 PSK, TLS 1.2 ticket) are
  counted as resumed while the server keeps its tickets, and as full handshakes once it
  has them off; the report's resumption_refused finding gives that exact share."""
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from harness.agent import Agent
from harness.figures import figure
from harness.clients import https_connections
from harness.hellos import Hellos, sigalg_family
from harness.servers import NODES, Nginx
from test_report import Report

pytestmark = pytest.mark.skipif(not shutil.which("nginx"), reason="needs nginx")

OFFERS = ("version", "group", "key_share", "cipher", "sigalg", "alpn", "resumption")
POLICIES = ("mozilla_modern", "mozilla_intermediate", "ecdsa_only", "tls13_only", "no_cbc_3des", "no_rsa_kex",
            "x25519_p256_only", "pq_hybrid_first")

NODE_CLIENT = """
const tls = require('tls');
const [port, name, n] = process.argv.slice(1);
let left = +n;
function one() {
  const s = tls.connect({port: +port, host: '127.0.0.1', servername: name, rejectUnauthorized: false}, () => s.end());
  s.on('close', () => { if (--left > 0) one(); });
  s.on('error', () => {});
}
one();
"""


def s_client(port: int, *args: str, sni: str | None = None, stdin: bytes = b"") -> subprocess.CompletedProcess:
    # with a request, read to the server's close (TLS 1.3 tickets come after the handshake)
    argv = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *(["-ign_eof"] if stdin else []), *args]
    argv += ["-servername", sni] if sni else ["-noservername"]
    return subprocess.run(argv, input=stdin, capture_output=True, timeout=20)


def clients(port: int, tmp: Path) -> dict:
    """Each kind of client a few times; returns how many connections each made."""
    made = Counter()
    # openssl s_client, told what to offer
    for args, n in ((("-tls1_3", "-groups", "X25519:P-256"), 3),
                    (("-tls1_3", "-groups", "P-384", "-ciphersuites", "TLS_AES_256_GCM_SHA384"), 2),
                    (("-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA", "-sigalgs",
                      "RSA+SHA256:RSA-PSS+SHA256"), 2),
                    (("-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA:DES-CBC3-SHA", "-sigalgs", "ECDSA+SHA256"), 2),
                    (("-alpn", "h2,http/1.1", "-sigalgs", "ed25519:RSA-PSS+SHA256"), 2)):
        for i in range(n):
            s_client(port, *args, sni=f"openssl{len(made)}.test")
            made[f"openssl{len(made)}"] += 1
    # curl over HTTP/2 and HTTP/1.1
    for flag, name in (("--http2", "curl2.test"), ("--http1.1", "curl1.test")):
        for _ in range(3):
            subprocess.run(["curl", "-sk", flag, "--resolve", f"{name}:{port}:127.0.0.1", "-o", "/dev/null",
                            f"https://{name}:{port}/"], timeout=20, check=True)
        made[name] += 3
    # Python's ssl (no SNI for an address)
    assert https_connections(port, 4, concurrency=1)["ok"] == 4
    made["python"] += 4
    if shutil.which("gnutls-cli"):
        for _ in range(2):
            subprocess.run(["gnutls-cli", "--insecure", "--sni-hostname=gnutls.test", "-p", str(port), "127.0.0.1"],
                           input=b"", capture_output=True, timeout=20)
        made["gnutls"] += 2
    for name, node in NODES.items():
        if node.exists():
            subprocess.run([str(node), "-e", NODE_CLIENT, str(port), f"{name}.test", "2"], timeout=30, check=True)
            made[name] += 2
    if shutil.which("h2load"):
        out = subprocess.run(["h2load", "-n", "8", "-c", "4", f"https://127.0.0.1:{port}/"], capture_output=True,
                             text=True, timeout=60)
        assert "8 succeeded" in out.stdout, out.stdout
        made["h2load"] += 4
    return made


def series(agent: Agent, name: str, port: int, *keys: str) -> Counter:
    """A metric's non-zero series on this port, summed by the labels `keys`."""
    got = Counter()
    for n, labels, v in agent.scrape():
        if n == name and labels.get("port") == str(port) and v:
            got[tuple(labels[k] for k in keys)] += int(v)
    return got


def offers(agent: Agent, port: int) -> Counter:
    return series(agent, "tlsprof_client_offers_total", port, "offer", "value")


def test_offers_equal_what_the_clients_sent(workdir):
    srv = Nginx(workdir / "clients", http2=True)
    try:
        with Agent("--pid", str(srv.pid)) as agent:
            agent.wait_attached(srv.workers())
            with Hellos(srv.port) as cap:
                made = clients(srv.port, workdir)
            hellos = cap.hellos()
            assert len(hellos) == cap.connections() == sum(made.values()), (cap.connections(), made)
            truth = cap.offers()
            agent.wait_value("tlsprof_client_hellos_total", len(hellos), timeout=20, comm="nginx",
                             port=str(srv.port))
            agent.settle()
            got = offers(agent, srv.port)
            assert got == truth, "\n".join(f"{k}: tlsprof {got[k]} clients {truth[k]}"
                                           for k in sorted(set(got) | set(truth)) if got[k] != truth[k])
            assert series(agent, "tlsprof_client_hellos_total", srv.port, "sni") == \
                Counter((h.sni or "none",) for h in hellos)
            assert sum(series(agent, "tlsprof_client_hellos_unread_total", srv.port, "reason").values()) == 0
            # node 24 (OpenSSL 3.5) offers the hybrid post-quantum group, with a key share
            if NODES["node24-openssl35"].exists():
                assert got[("key_share", "X25519MLKEM768")] >= 2, got

            policy = series(agent, "tlsprof_client_policy_outcomes_total", srv.port, "policy", "outcome")
            for (p, outcome), n in sorted(policy.items()):  # the closing note's per-policy counts
                figure("client_policy", n, policy=p, outcome=outcome, hellos=len(hellos))
            for p in POLICIES:  # each ClientHello once per policy
                assert sum(v for (q, _), v in policy.items() if q == p) == len(hellos), (p, policy)
            no_ecdsa = sum(1 for h in hellos if "ecdsa" not in {sigalg_family(a) for a in h.sigalgs})
            assert no_ecdsa >= 2  # the -sigalgs RSA clients at least
            assert policy[("ecdsa_only", "fail")] == no_ecdsa, policy
            tls12 = sum(1 for h in hellos if max(h.versions) < 0x0304)
            assert tls12 >= 4
            assert policy[("tls13_only", "fail")] == tls12, policy
            # the 3DES/CBC-only and RSA-transport-only offers
            assert policy[("no_cbc_3des", "fail")] == 2 and policy[("no_rsa_kex", "fail")] == 0, policy
    finally:
        srv.stop()


def resume(port: int, sess: Path, version: str, n: int) -> int:
    """n connections offering the session in `sess`; returns how many the server resumed."""
    resumed = 0
    for _ in range(n):
        out = s_client(port, version, "-sess_in", str(sess), sni="back.test", stdin=b"")
        resumed += b"Reused, TLS" in out.stdout
    return resumed


def test_returning_clients_refused_by_a_server_without_tickets(workdir):
    srv = Nginx(workdir / "resume", resumption=True)
    sessions = {}
    try:
        for version in ("-tls1_3", "-tls1_2"):
            sessions[version] = workdir / f"sess{version}.pem"
            out = s_client(srv.port, version, "-sess_out", str(sessions[version]), sni="back.test",
                           stdin=b"GET / HTTP/1.0\r\n\r\n")
            assert sessions[version].exists(), out.stderr
        with Agent("--pid", str(srv.pid)) as agent:
            agent.wait_attached(srv.workers())
            # the server keeps tickets: every return resumes
            assert resume(srv.port, sessions["-tls1_3"], "-tls1_3", 3) == 3
            assert resume(srv.port, sessions["-tls1_2"], "-tls1_2", 2) == 2
            agent.wait_value("tlsprof_client_resumptions_total", 3, timeout=20, comm="nginx", port=str(srv.port),
                             offered="psk", result="resumed")
            agent.settle()
            got = series(agent, "tlsprof_client_resumptions_total", srv.port, "offered", "result")
            assert got == Counter({("psk", "resumed"): 3, ("ticket", "resumed"): 2}), got
        # the same server with its session cache and tickets off
        srv.conf.write_text(srv.conf.read_text().replace("ssl_session_tickets on; ssl_session_cache shared:tlsprof:1m;",
                                                         "ssl_session_tickets off; ssl_session_cache off;"))
        srv.reload()
        returning = {"-tls1_3": 14, "-tls1_2": 8}  # the rule speaks from 20 (rules::MIN_EVENTS)

        def load():
            fresh = https_connections(srv.port, 8, concurrency=2)["ok"]
            back = {v: resume(srv.port, sessions[v], v, n) for v, n in returning.items()}
            return {"fresh": fresh, "resumed": back}
        report = Report(srv.pid, load)
    finally:
        srv.stop()
    assert report.client == {"fresh": 8, "resumed": {"-tls1_3": 0, "-tls1_2": 0}}, report.client
    f = report.one("resumption_refused")
    n = f["numbers"]
    assert (n["returning_clients"], n["refused"], n["refused_share"]) == (22, 22, 1.0), n
    assert (n["psk_offered"], n["psk_refused"], n["ticket_offered"], n["ticket_refused"]) == (14, 14, 8, 8), n
    assert "ssl_session_cache" in report.text and "ssl_session_tickets" in report.text, report.text
