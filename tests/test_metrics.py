"""The /metrics endpoint: valid for promtool, both exposition formats, client-side handshakes."""
import subprocess
import sys
import urllib.request

import pytest

from harness.agent import Agent
from harness.clients import https_connections
from harness.procs import ROOT, have, stop_pid
from harness.servers import Nginx


def test_promtool_check_metrics_is_clean(workdir):
    if not have("promtool"):
        pytest.skip("promtool (Debian package prometheus) not installed")
    nginx = Nginx(workdir, workers=1)
    try:
        with Agent("--comm", "nginx") as agent:
            agent.wait_attached(nginx.workers())
            https_connections(nginx.port, 5)
            agent.wait_value("tlsprof_handshakes_total", 5, comm="nginx")
            text = agent.scrape_text()
            req = urllib.request.Request(f"http://127.0.0.1:{agent.port}/metrics",
                                         headers={"Accept": "application/openmetrics-text; version=1.0.0"})
            with urllib.request.urlopen(req, timeout=5) as r:
                om_type, om = r.headers["Content-Type"], r.read().decode()
    finally:
        nginx.stop()
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", f"promtool: {r.stdout}{r.stderr}"
    for family in ("tlsprof_handshakes_total", "tlsprof_handshake_cpu_seconds", "tlsprof_handshake_duration_seconds",
                   "tlsprof_attached_processes", "tlsprof_events_lost_total", "tlsprof_probe_attach_failures_total",
                   "tlsprof_agent_cpu_seconds_total", "tlsprof_agent_resident_memory_bytes"):
        assert f"# TYPE {family} " in text, f"{family} missing from:\n{text}"
    assert om_type.startswith("application/openmetrics-text") and om.endswith("# EOF\n")


def test_client_side_handshakes_are_counted_as_client(workdir, tmp_path):
    """A traced process that connects out does client handshakes: role=client, exactly."""
    nginx = Nginx(workdir, workers=1)
    exe = tmp_path / "tlsclient"
    exe.symlink_to(sys.executable)
    client = subprocess.Popen([str(exe), str(ROOT / "tests/servers/tls_client.py"), str(nginx.port), "25"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout.readline().strip() == "ready"
        with Agent("--comm", "tlsclient", "--comm", "nginx") as agent:
            agent.wait_attached([client.pid, *nginx.workers()])
            client.stdin.write("go\n")
            client.stdin.flush()
            assert client.stdout.readline().strip() == "25"
            got = agent.wait_value("tlsprof_handshakes_total", 25, comm="tlsclient", role="client", result="ok")
            server = agent.value("tlsprof_handshakes_total", comm="nginx", role="server", result="ok")
            wrong = agent.value("tlsprof_handshakes_total", comm="tlsclient", role="server")
        assert got == 25 and server == 25 and wrong == 0, f"client {got}, server {server}, client as server {wrong}"
    finally:
        stop_pid(client.pid)
        client.wait(timeout=10)
        nginx.stop()
