"""The kernel-only estimate of handshake CPU (bpf/estimate.bpf.h), which servers whose TLS
stack has no entry point to probe get, against the probes' figure on the same servers and
configurations (--no-handshake-probes switches the probes off): event-loop servers (nginx,
one worker, on OpenSSL; lighttpd on GnuTLS, which answers its costly configuration's
ClientHello with a HelloRetryRequest: a second ClientHello, for P-256) and a thread-per-connection one (Apache
httpd, its worker threads), RSA-2048 +
secp384r1 and ECDSA P-256 + X25519, TLS 1.3. The two methods take turns, two rounds, and
each method's figure is taken as a share of the server's own CPU accounting over the same
connections (schedstat of its processes): this VM's speed drifts by ±20% from one minute to
the next, which compared the methods' raw means as often as the methods."""
import os

import pytest

from harness import services
from harness.agent import Agent
from harness.clients import https_connections
from harness.figures import figure
from harness.metrics import value
from harness.procs import cpu_ns, have
from harness.servers import Apache, Lighttpd, Nginx

# CPU figures: after the kernel matrix's guests, on an otherwise idle machine
pytestmark = pytest.mark.quiet

N = 60
ROUNDS = 2
CONFIGS = {"costly": ("rsa2048", "secp384r1"), "cheap": ("ecdsa_p256", "X25519")}
METHODS = {"kernel_estimate": ["--no-handshake-probes"], "probes": ["--exact"]}
PG_N = 10
PAUSE = 0.4


def start(kind: str, workdir, cert: str, curve: str):
    if kind == "lighttpd-gnutls":
        srv = Lighttpd(workdir, module="gnutls", cert=cert, curves=curve)
        return srv, [srv.pid]
    if kind == "nginx":
        srv = Nginx(workdir, cert=cert, extra_server=f"ssl_ecdh_curve {curve};")
        return srv, [srv.pid, *srv.workers()]
    srv = Apache(workdir, cert=cert, extra=f"SSLOpenSSLConfCmd Curves {curve}")
    return srv, [srv.pid, *srv.children()]


@pytest.mark.parametrize("kind", ["nginx", "apache", "lighttpd-gnutls"])
def test_estimate_agrees_with_the_probes(workdir, kind):
    if not have({"nginx": "nginx", "apache": "apache2", "lighttpd-gnutls": "lighttpd"}[kind]):
        pytest.skip(f"{kind} not installed")
    servers = {}
    try:
        for k, (cert, curve) in CONFIGS.items():
            servers[k] = start(kind, workdir, cert, curve)
        pids = [p for _, ps in servers.values() for p in ps]
        sums = {(method, k): 0.0 for method in METHODS for k in CONFIGS}
        server_cpu = {(method, k): 0.0 for method in METHODS for k in CONFIGS}
        for _ in range(ROUNDS):
            for method, flags in METHODS.items():
                with Agent(*[a for p in pids for a in ("--pid", str(p))], *flags, "--sample-hz", "0") as agent:
                    agent.wait_attached(pids)
                    for k, (srv, ps) in servers.items():
                        cert, _ = CONFIGS[k]
                        before = server_ns(ps)
                        c = https_connections(srv.port, N, version="1.3", concurrency=1)
                        server_cpu[(method, k)] += (server_ns(ps) - before) / 1e9
                        assert c["ok"] == N, c
                        agent.wait_value("tlsprof_handshake_cpu_seconds_count", N, cert=cert, role="server")
                        m = agent.scrape()
                        # every handshake measured once, counted once, as the client made it
                        assert value(m, "tlsprof_handshake_cpu_seconds_count", cert=cert) == N
                        assert value(m, "tlsprof_handshake_duration_seconds_count", cert=cert) == N
                        assert value(m, "tlsprof_handshakes_total", cert=cert, result="ok") == N
                        sums[(method, k)] += value(m, "tlsprof_handshake_cpu_seconds_sum", cert=cert)
                    m = agent.scrape()
                    assert value(m, "tlsprof_handshake_cpu_method_info", method=method) == len(pids), m
                    other = next(x for x in METHODS if x != method)
                    assert value(m, "tlsprof_handshake_cpu_method_info", method=other) == 0
    finally:
        for srv, _ in servers.values():
            srv.stop()
    mean = {key: s / (N * ROUNDS) for key, s in sums.items()}
    # each method's handshake CPU as a share of the server's CPU over its connections
    share = {key: sums[key] / server_cpu[key] for key in sums}
    for k in CONFIGS:
        ratio = share[("kernel_estimate", k)] / share[("probes", k)]
        print(f"{kind} {k}: kernel estimate {mean[('kernel_estimate', k)] * 1e6:.0f} us/handshake "
              f"({share[('kernel_estimate', k)]:.2f} of the server's CPU), probes "
              f"{mean[('probes', k)] * 1e6:.0f} us ({share[('probes', k)]:.2f}): {ratio:.2f}")
        figure(f"estimate_over_probes[{kind},{k}]", ratio)
        # Measured here: 0.87-1.14 in earlier runs, 0.94-1.05 in four runs on 2026-11-25
        # (bench/results-accuracy.txt: bench/accuracy.py and a CI run); 0.7-1.4 is past both,
        # with room for this VM's ±20% drift between two minutes.
        assert 0.7 <= ratio <= 1.4, (k, ratio, mean, share)
        # neither method finds more handshake CPU than the server spent on its connections
        # (the handshakes' CPU is clocked in the kernel and includes steal, which schedstat
        # leaves out: 5% for it)
        for method in METHODS:
            assert share[(method, k)] <= 1.05, (method, k, share)
    for method in METHODS:
        assert mean[(method, "costly")] > mean[(method, "cheap")], mean


def server_ns(pids: list[int]) -> int:
    """CPU time of a server's processes (those still there), from the kernel's accounting."""
    return sum(cpu_ns(p) for p in pids if os.path.exists(f"/proc/{p}"))


def test_estimate_starts_at_the_client_hello_after_a_client_preamble(workdir):
    """A PostgreSQL client speaks first in plaintext (its SSLRequest, answered 'S'); the
    estimate's handshake starts where the client's TLS does, at its ClientHello, not at the
    preamble. The client waits PAUSE seconds between the 'S' and its ClientHello: a figure
    that began at the SSLRequest would last at least that long. Each backend, forked per
    connection, is estimated (--no-handshake-probes)."""
    why = services.available()["postgres"]
    if why:
        pytest.skip(why)
    srv = services.Postgres(workdir)
    try:
        with Agent("--comm", "postgres", "--no-handshake-probes", "--sample-hz", "0") as agent:
            agent.wait_attached([srv.pid])
            c = services.pg_ssl_connections(srv.port, PG_N, concurrency=1, pause=PAUSE)
            assert c["ok"] == PG_N and not c["failed"] and not c["after_errors"], c
            agent.wait_value("tlsprof_handshake_duration_seconds_count", PG_N, role="server")
            m = agent.scrape()
    finally:
        srv.stop()
    assert value(m, "tlsprof_handshakes_total", role="server", result="ok") == PG_N, m
    assert value(m, "tlsprof_handshake_cpu_seconds_count", role="server") == PG_N
    mean = value(m, "tlsprof_handshake_duration_seconds_sum", role="server") / PG_N
    print(f"postgres: mean estimated handshake {mean * 1e3:.1f} ms, the client's pause before its ClientHello "
          f"{PAUSE * 1e3:.0f} ms")
    # measured here: 43 ms a handshake (Python's client, with its own waits on loopback);
    # 245 ms with a 200 ms pause when the figure began at the SSLRequest (before 2026-11-28):
    # such a figure lasts the pause and more
    assert mean < PAUSE / 2, mean
