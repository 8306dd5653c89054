"""Handshake accounting against a real nginx (Debian's package) and real TLS clients."""
import time

import pytest

from harness import failing
from harness.agent import Agent
from harness.clients import failing_handshakes, https_connections
from harness.figures import figure
from harness.procs import cpu_ns, have, steal_seconds, wait_for
from harness.servers import Nginx

N = 60


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_exact_handshake_count_per_tls_version(nginx, version):
    with Agent("--comm", "nginx") as agent:
        agent.wait_attached([nginx.pid, *nginx.workers()])
        client = https_connections(nginx.port, N, version=version)
        assert client["ok"] == N and client["failed"] == 0, f"client: {client}"
        assert client["versions"] == {f"TLSv{version}"}, f"client negotiated {client['versions']}"
        got = agent.wait_value("tlsprof_handshakes_total", N, comm="nginx", role="server", result="ok")
        samples = agent.scrape()
    assert got == N, f"expected exactly {N} ok server handshakes for nginx, tlsprof says {got}"
    failed = sum(v for n, l, v in samples if n == "tlsprof_handshakes_total" and l["result"] == "failed")
    assert failed == 0, f"no handshake failed, tlsprof says {failed}"
    # Only nginx is selected: the client (this Python process, on the same libssl) is not traced.
    comms = {l.get("comm") for n, l, v in samples if n.startswith("tlsprof_handshake") and v > 0}
    assert comms == {"nginx"}, f"handshakes attributed to {comms}"
    assert not [l for n, l, v in samples if n == "tlsprof_handshakes_total" and l["role"] != "server"]
    # Histograms saw every handshake, with plausible values.
    count = sum(v for n, l, v in samples if n == "tlsprof_handshake_cpu_seconds_count")
    cpu = sum(v for n, l, v in samples if n == "tlsprof_handshake_cpu_seconds_sum")
    wall = sum(v for n, l, v in samples if n == "tlsprof_handshake_duration_seconds_sum")
    assert count == N
    assert 0 < cpu / N < 0.05, f"CPU per handshake {cpu / N * 1e6:.0f} µs is not plausible"
    assert wall >= cpu, f"wall-clock time {wall} below CPU time {cpu}"


def test_failed_handshakes_are_counted_exactly(nginx):
    m_cipher, k_ok = 7, 10
    with Agent("--comm", "nginx") as agent:
        agent.wait_attached(nginx.workers())
        # The server has an ECDSA certificate: a client offering only RSA-authenticated
        # suites shares no cipher with it.
        assert failing_handshakes(nginx.port, m_cipher, "AES128-SHA:AES256-GCM-SHA384") == m_cipher
        assert https_connections(nginx.port, k_ok)["ok"] == k_ok
        failed = agent.wait_value("tlsprof_handshakes_total", m_cipher, comm="nginx", result="failed")
        ok = agent.value("tlsprof_handshakes_total", comm="nginx", result="ok")
        cost = agent.value("tlsprof_failed_handshake_cpu_seconds_total", comm="nginx")
    assert failed == m_cipher, f"expected {m_cipher} failed handshakes, got {failed}"
    assert ok == k_ok, f"expected {k_ok} ok handshakes, got {ok}"
    assert cost > 0, "failed handshakes cost CPU too"


@pytest.mark.parametrize("version", ["1.3", "1.2"])
def test_a_client_rejecting_the_certificate_is_a_failed_handshake(nginx, version):
    """Clients that verify the server's certificate against the system's CAs reject the
    test's self-signed one and answer the server's flight with an alert (TLS 1.3: after the
    server has sent all it had to, its Finished included): each is a failed handshake, in
    the default mode, exactly, beside the ok ones."""
    import ssl
    from harness.clients import connect
    rejecting, k_ok = 6, 5
    ctx = ssl.create_default_context()
    v = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[version]
    ctx.minimum_version = ctx.maximum_version = v
    with Agent("--comm", "nginx") as agent:
        agent.wait_attached(nginx.workers())
        rejected = 0
        for _ in range(rejecting):
            try:
                with connect(nginx.port) as raw, ctx.wrap_socket(raw, server_hostname="localhost"):
                    pass
            except ssl.SSLCertVerificationError:
                rejected += 1
        assert rejected == rejecting
        assert https_connections(nginx.port, k_ok, version=version)["ok"] == k_ok
        failed = agent.wait_value("tlsprof_handshakes_total", rejecting, comm="nginx", result="failed")
        ok = agent.value("tlsprof_handshakes_total", comm="nginx", result="ok")
    assert (failed, ok) == (rejecting, k_ok), f"failed {failed}, ok {ok}"


def test_a_client_gone_mid_client_hello_is_a_failed_handshake(nginx):
    """A client that sends part of a ClientHello and goes away (a scanner, a timeout, a
    health check): OpenSSL reads it inside a handshake call and fails at the end of the
    stream; nginx writes nothing. Each such connection is a failed handshake, exactly, under
    --exact too, whose read side is attached all along: where the wire counts (the send
    capture), a handshake call's reads do not make the connection TLS, which would leave it
    counted by no one (--exact's reads did so; the default mode's never did, and it counted
    them: the kernel side no longer depends on the mode, so --exact is the case tested)."""
    import socket
    n_gone, k_ok = 5, 3
    with Agent("--comm", "nginx", "--exact") as agent:
        agent.wait_attached([nginx.pid, *nginx.workers()])
        # the port is known to carry TLS once a handshake was seen on it
        assert https_connections(nginx.port, k_ok)["ok"] == k_ok
        for _ in range(n_gone):
            with socket.create_connection(("127.0.0.1", nginx.port)) as s:
                # a handshake record announcing 200 bytes of ClientHello, and 15 of them
                s.sendall(bytes([22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3]) + bytes(9))
                time.sleep(0.1)  # nginx reads them inside its handshake call
        failed = agent.wait_value("tlsprof_handshakes_total", n_gone, comm="nginx", result="failed")
        ok = agent.value("tlsprof_handshakes_total", comm="nginx", result="ok")
    assert (failed, ok) == (n_gone, k_ok), f"failed {failed}, ok {ok}"


def test_plain_http_to_the_tls_port_is_no_handshake(workdir):
    """nginx answers plain HTTP on its TLS port itself, without calling OpenSSL: tlsprof
    sees the connection close with no TLS from either side and counts it apart from
    handshakes (kind http), exactly, those before the port was seen carrying TLS too, while
    plain HTTP on nginx's plain port is not counted at all."""
    from harness.procs import free_port
    plain = free_port()
    nginx = Nginx(workdir, workers=2, plain_port=plain)
    try:
        with Agent("--comm", "nginx") as agent:
            agent.wait_attached([nginx.pid, *nginx.workers()])
            time.sleep(1.2)  # a scan after attaching: the listening ports are known
            # plain HTTP first, before any handshake has shown the port carries TLS
            assert failing.plain_http(nginx.port, 3) == 3
            assert failing.plain_http(plain, 6) == 6
            assert https_connections(nginx.port, 10)["ok"] == 10
            assert failing.plain_http(nginx.port, 4) == 4
            http = agent.wait_value("tlsprof_connections_without_tls_total", 7, comm="nginx", kind="http")
            apart = agent.value("tlsprof_connections_without_tls_total", comm="nginx")
            failed = agent.value("tlsprof_handshakes_total", comm="nginx", result="failed")
            ok = agent.value("tlsprof_handshakes_total", comm="nginx", result="ok")
    finally:
        nginx.stop()
    assert (http, apart) == (7, 7), f"expected 3 + 4 plain-HTTP connections to the TLS port apart, got {http} of {apart}"
    assert (failed, ok) == (0, 10), (failed, ok)


@pytest.mark.quiet
def test_handshake_cpu_is_consistent_with_the_servers_own_accounting(workdir):
    """Handshake-only workload, one worker: the handshake CPU tlsprof reports lies between a
    third of the worker's on-CPU time (/proc/PID/task/*/schedstat) and all of it."""
    if not have("ab"):
        pytest.skip("ab (apache2-utils) not installed")
    nginx = Nginx(workdir, workers=1)
    try:
        (worker,) = nginx.workers()
        with Agent("--comm", "nginx") as agent:
            agent.wait_attached([worker])
            before_hs = agent.value("tlsprof_handshake_cpu_seconds_sum") + agent.value("tlsprof_failed_handshake_cpu_seconds_total")
            before_steal = steal_seconds()
            before_cpu = cpu_ns(worker)
            import subprocess
            out = subprocess.run(["ab", "-n", "400", "-c", "16", "-s", "30", f"https://127.0.0.1:{nginx.port}/"],
                                 capture_output=True, text=True, timeout=120)
            assert "Complete requests:      400" in out.stdout, out.stdout + out.stderr
            time.sleep(1.0)
            after_cpu = cpu_ns(worker)
            steal = steal_seconds() - before_steal
            hs = agent.value("tlsprof_handshake_cpu_seconds_sum") + agent.value("tlsprof_failed_handshake_cpu_seconds_total") - before_hs
        server = (after_cpu - before_cpu) / 1e9
        assert server > 0
        share = figure("nginx_handshake_cpu_over_schedstat", hs / server)
        # The handshake clock is the kernel's monotonic clock, which runs on through the
        # hypervisor's steal time; schedstat leaves steal out. Steal anywhere on the
        # machine in the window bounds the difference.
        assert server / 3 < hs < server + steal, (
            f"handshake CPU {hs:.3f}s vs worker on-CPU {server:.3f}s (share {share:.0%}), steal {steal:.3f}s: "
            "expected between 1/3 and all of it (plus steal)")
    finally:
        nginx.stop()


def test_new_workers_after_reload_are_picked_up(nginx):
    with Agent("--comm", "nginx") as agent:
        agent.wait_attached(nginx.workers())
        before = agent.value("tlsprof_attached_processes", comm="nginx")
        probes = agent.value("tlsprof_attached_probes")
        new = nginx.reload()
        agent.wait_attached(new)
        # the old workers are gone and forgotten: as many processes and probes as before
        wait_for(lambda: agent.value("tlsprof_attached_processes", comm="nginx") == before, 10,
                 f"tlsprof to count {before} nginx processes again")
        assert agent.value("tlsprof_attached_probes") == probes
        client = https_connections(nginx.port, N)
        assert client["ok"] == N
        got = agent.wait_value("tlsprof_handshakes_total", N, comm="nginx", result="ok")
    assert got == N, f"after reload: expected {N} handshakes, got {got}"
