"""The same exact handshake accounting for servers that drive OpenSSL differently:
node (OpenSSL inside the executable, handshake inside SSL_read), Apache httpd mod_ssl
(SSL_accept, threaded MPM, custom BIOs), a server that loads libssl late, and one that
serves before the agent has read its listener."""
import os
import select
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import failing
from harness.agent import Agent
from harness.certs import make_cert
from harness.clients import failing_handshakes, https_connections, tls_client_context
from harness.metrics import settled, since, value
from harness.procs import ROOT, free_port, have, stop_pid, wait_for, wait_port
from harness.servers import NODES, NodeServer

N = 50


@pytest.mark.parametrize("build", sorted(NODES))
def test_node_https_server_counted_exactly(workdir, build):
    """OpenSSL 1.1.1, 3.0 and 3.5 linked into node: the same exact counts."""
    if not NODES[build].exists():
        pytest.skip(f"{NODES[build]} not present (scripts/deps.sh fetches it)")
    node = NodeServer(workdir, NODES[build])
    try:
        # --comm node: node 24 renames its main thread "MainThread"; it is still found by
        # its executable's name, and reported as comm="node".
        with Agent("--comm", "node") as agent:
            agent.wait_attached([node.pid])
            assert "via statem-symbols" in agent.output(), agent.output()
            client = https_connections(node.port, N, concurrency=2)
            assert client["ok"] == N, client
            got = agent.wait_value("tlsprof_handshakes_total", N, comm="node", role="server", result="ok")
            failed = agent.value("tlsprof_handshakes_total", result="failed")
            cpu = agent.value("tlsprof_handshake_cpu_seconds_sum", comm="node")
        assert got == N, f"node: expected {N} handshakes, tlsprof says {got}"
        assert failed == 0
        assert cpu > 0
    finally:
        node.stop()


def test_process_exit_is_forgotten(workdir):
    """A traced process that exits leaves no probes, kernel state or file descriptors behind."""
    if not have("node"):
        pytest.skip("node not installed")
    node = NodeServer(workdir)
    with Agent("--comm", "node") as agent:
        try:
            agent.wait_attached([node.pid])
            assert agent.value("tlsprof_attached_probes") > 0
            assert https_connections(node.port, 5)["ok"] == 5
            fds_attached = len(list((__import__("pathlib").Path(f"/proc/{agent.proc.pid}/fd")).iterdir()))
        finally:
            node.stop()
        from harness.procs import wait_for
        wait_for(lambda: agent.value("tlsprof_attached_probes") == 0, 10, "probes to be detached")
        assert agent.value("tlsprof_attached_processes", comm="node") == 0
        fds_after = len(list((__import__("pathlib").Path(f"/proc/{agent.proc.pid}/fd")).iterdir()))
        assert fds_after < fds_attached, f"fds: {fds_attached} while attached, {fds_after} after the exit"
        assert f"forgetting {node.pid} (node)" in agent.output()


def test_apache_mod_ssl_threaded_counted_exactly(apache):
    with Agent("--pid", str(apache.pid)) as agent:
        agent.wait_attached([apache.pid, *apache.children()])
        client = https_connections(apache.port, N, concurrency=4)
        assert client["ok"] == N, client
        got = agent.wait_value("tlsprof_handshakes_total", N, comm="apache2", role="server", result="ok")
        # Apache hands everything to OpenSSL: plain HTTP fails there too, yet it never
        # offered TLS (its connections are counted apart); a cipher mismatch is a failed handshake
        assert failing.plain_http(apache.port, 4) == 4
        assert failing_handshakes(apache.port, 3, "AES128-SHA") == 3
        failed = agent.wait_value("tlsprof_handshakes_total", 3, comm="apache2", result="failed")
        http = agent.wait_value("tlsprof_connections_without_tls_total", 4, comm="apache2", kind="http")
        ok = agent.value("tlsprof_handshakes_total", comm="apache2", result="ok")
    assert got == N, f"apache: expected {N} handshakes, tlsprof says {got}"
    assert (failed, http) == (3, 4), f"apache: expected 3 failed handshakes and 4 plain-HTTP connections, got {failed}, {http}"
    assert ok == N


def test_library_loaded_late_and_served_before_the_agent_reads_the_listener(workdir, tmp_path):
    """DeleGate loads libssl with dlopen after start: tlsprof attaches its probes once it is
    mapped. And a server that starts listening and serving while the agent is busy (here:
    stopped, so that it has read neither the new library nor the listener): the kernel
    takes those connections on by itself, and the agent counts them once it runs again.
    Before the kernel marked a traced process's new listener at once, none of them was
    counted (the agent watched a port only once it had read it; a CI run counted 14 of 20
    where the agent was merely slow)."""
    key, crt = make_cert(workdir)
    port = free_port()
    exe = tmp_path / "latetls"  # a distinct comm for --comm: the kernel traces it from its exec
    exe.symlink_to(sys.executable)
    with Agent("--comm", "latetls") as agent:
        proc = subprocess.Popen([str(exe), str(ROOT / "tests/servers/late_tls_server.py"), str(port), str(crt),
                                 str(key), "2", "60"], stdout=subprocess.PIPE, text=True)
        try:
            agent.wait_attached([proc.pid])  # no TLS library yet: counted from its connections
            os.kill(agent.proc.pid, signal.SIGSTOP)
            try:
                ready, _, _ = select.select([proc.stdout], [], [], 0)
                assert not ready, "the server listened before the agent was stopped: nothing tested"
                # listening once it says so (no probe connection: every connection is the client's)
                assert proc.stdout.readline().strip() == "serving"
                client = https_connections(port, 20, concurrency=1)
            finally:
                os.kill(agent.proc.pid, signal.SIGCONT)
            assert client["ok"] == 20, client
            got = agent.wait_value("tlsprof_handshakes_total", 20, comm="latetls", result="ok")
            assert got == 20, f"expected 20 handshakes, got {got}"
            # taken on at their first send, they are counted as accepted at their close, with
            # their one exchange each
            c = settled(agent, port, 20)
            assert (c["accepted"], c["conns"], c["requests"]) == (20, 20, 20), c
            assert agent.value("tlsprof_exchanges_total", port=str(port)) == 20

            # the library is mapped now: probes attached, and they time the next handshakes
            wait_for(lambda: agent.value("tlsprof_handshake_cpu_method_info", comm="latetls", method="probes") == 1,
                     10, lambda: f"probes on latetls (log: {agent.output()[-1500:]})")
            base = agent.mark()
            assert https_connections(port, 5, concurrency=1)["ok"] == 5
            timed = agent.wait_value("tlsprof_handshake_cpu_seconds_count", 5, base=base, comm="latetls")
            m = since(agent.scrape(), base)
            assert (timed, value(m, "tlsprof_handshakes_total", comm="latetls", result="ok")) == (5, 5), m
            assert value(m, "tlsprof_probe_hits_total", comm="latetls") > 0, m
        finally:
            stop_pid(proc.pid)
            proc.wait(timeout=10)


def test_haproxy_counted_exactly(haproxy):
    """HAProxy calls SSL_do_handshake again on finished connections: still one per connection."""
    with Agent("--pid", str(haproxy.pid)) as agent:
        agent.wait_attached([haproxy.pid])
        client = https_connections(haproxy.port, N, concurrency=4)
        assert client["ok"] == N, client
        assert failing_handshakes(haproxy.port, 3, "AES128-SHA") == 3
        got = agent.wait_value("tlsprof_handshakes_total", N, comm="haproxy", role="server", result="ok")
        failed = agent.wait_value("tlsprof_handshakes_total", 3, comm="haproxy", result="failed")
    assert got == N, f"haproxy: expected {N} handshakes, tlsprof says {got}"
    assert failed == 3, f"haproxy: expected 3 failed handshakes, tlsprof says {failed}"


@pytest.mark.quiet
def test_time_blocked_in_a_handshake_is_not_cpu(workdir, tmp_path):
    """A blocking server waits inside its handshake call for the client's first flight:
    that wait is handshake wall-clock time, not handshake CPU."""
    key, crt = make_cert(workdir)
    port = free_port()
    exe = tmp_path / "blocktls"
    exe.symlink_to(sys.executable)
    proc = subprocess.Popen([str(exe), str(ROOT / "tests/servers/late_tls_server.py"), str(port), str(crt), str(key),
                             "0", "60"], stdout=subprocess.DEVNULL)
    try:
        wait_port(port)
        with Agent("--pid", str(proc.pid)) as agent:
            agent.wait_attached([proc.pid])
            ctx = tls_client_context()
            for _ in range(3):
                with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                    time.sleep(0.3)  # the server is in SSL_do_handshake, blocked in read()
                    with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                        s.recv(1024)
            agent.wait_value("tlsprof_handshakes_total", 3, comm="blocktls", result="ok")
            wall = agent.value("tlsprof_handshake_duration_seconds_sum", comm="blocktls")
            cpu = agent.value("tlsprof_handshake_cpu_seconds_sum", comm="blocktls")
    finally:
        stop_pid(proc.pid)
        proc.wait(timeout=10)
    assert wall >= 3 * 0.29, f"3 handshakes that each waited 0.3 s took {wall:.3f} s of wall-clock time"
    assert 0 < cpu < 0.1 * wall, f"handshake CPU {cpu * 1e3:.1f} ms for {wall * 1e3:.0f} ms mostly spent blocked"
