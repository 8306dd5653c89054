"""The fallback that hooks only OpenSSL's exported API (SSL_do_handshake, SSL_accept,
SSL_connect, with the role from SSL_set_accept_state/SSL_set_connect_state), forced with
`--hooks api`: the same exact counts for servers that call them."""
from harness.agent import Agent
from harness.clients import failing_handshakes, https_connections

N = 40


def check(agent, port, comm, pids):
    agent.wait_attached(pids)
    assert "via ssl-api" in agent.output(), agent.output()
    assert https_connections(port, N, concurrency=4)["ok"] == N
    assert failing_handshakes(port, 3, "AES128-SHA") == 3
    ok = agent.wait_value("tlsprof_handshakes_total", N, comm=comm, role="server", result="ok")
    failed = agent.wait_value("tlsprof_handshakes_total", 3, comm=comm, role="server", result="failed")
    unknown = agent.value("tlsprof_handshakes_total", role="unknown")
    assert (ok, failed, unknown) == (N, 3, 0), f"{comm}: ok {ok}, failed {failed}, role unknown {unknown}"


def test_nginx_with_api_hooks(nginx):
    with Agent("--comm", "nginx", "--hooks", "api") as agent:
        check(agent, nginx.port, "nginx", nginx.workers())


def test_haproxy_with_api_hooks(haproxy):
    """HAProxy calls SSL_do_handshake again after the handshake finished: not a new one."""
    with Agent("--pid", str(haproxy.pid), "--hooks", "api") as agent:
        check(agent, haproxy.port, "haproxy", [haproxy.pid])


def test_apache_with_api_hooks(apache):
    """Apache calls SSL_accept, which in Debian's libssl tail-calls SSL_do_handshake."""
    with Agent("--pid", str(apache.pid), "--hooks", "api") as agent:
        check(agent, apache.port, "apache2", [apache.pid, *apache.children()])
