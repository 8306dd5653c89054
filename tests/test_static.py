"""OpenSSL linked statically into an executable that exports nothing: found through the
executable's .symtab; once stripped, refused with one clear line."""
import shutil
import subprocess

import pytest

from harness.agent import Agent, run_tlsprof
from harness.certs import make_cert
from harness.clients import https_connections
from harness.procs import ROOT, free_port, stop_pid, wait_port


@pytest.fixture(scope="module")
def static_servers():
    from harness.build import BuildError, c_program
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    src, libs = ROOT / "tests/servers/static_tls_server.c", ("-static", "-lssl", "-lcrypto", "-lpthread", "-ldl")
    try:
        return c_program("static_tls", src, *libs), c_program("static_tls_stripped", src, *libs, strip=True)
    except BuildError as e:
        pytest.skip(f"cannot link OpenSSL statically (libssl-dev's static libraries?): {e}")


def start(exe, workdir):
    key, crt = make_cert(workdir)
    port = free_port()
    proc = subprocess.Popen([str(exe), str(port), str(crt), str(key), "60"])
    wait_port(port)
    return proc, port


def test_static_openssl_found_through_symtab(static_servers, workdir):
    exe, _ = static_servers
    proc, port = start(exe, workdir)
    try:
        with Agent("--pid", str(proc.pid)) as agent:
            agent.wait_attached([proc.pid])
            assert "via statem-symbols" in agent.output(), agent.output()
            assert https_connections(port, 15, concurrency=1)["ok"] == 15
            got = agent.wait_value("tlsprof_handshakes_total", 15, comm="static_tls", role="server", result="ok")
        assert got == 15, f"expected 15 handshakes, got {got}"
    finally:
        stop_pid(proc.pid)
        proc.wait(timeout=10)


def test_stripped_static_binary_is_refused_clearly(static_servers, workdir):
    _, stripped = static_servers
    proc, _ = start(stripped, workdir)
    try:
        r = run_tlsprof("run", "--pid", str(proc.pid), "--listen", "127.0.0.1:0")
    finally:
        stop_pid(proc.pid)
        proc.wait(timeout=10)
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "carries no TLS code" in lines[0] and "stripped" in lines[0], r.stderr
