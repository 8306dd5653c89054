"""OpenSSL linked statically into an executable that exports nothing: found through the
executable's .symtab; once stripped, counted from its connections, its CPU estimated."""
import shutil
import subprocess

import pytest

from harness.agent import Agent
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


def test_stripped_static_binary_is_counted_from_the_wire(static_servers, workdir):
    """A stripped executable with OpenSSL linked in shows no TLS code to the agent: asked for
    by pid, it is traced all the same, its handshakes counted and labelled from what its
    connections carry and their CPU estimated in the kernel, and the log says so once."""
    _, stripped = static_servers
    proc, port = start(stripped, workdir)
    try:
        with Agent("--pid", str(proc.pid)) as agent:
            agent.wait_attached([proc.pid])
            assert https_connections(port, 15, concurrency=1)["ok"] == 15
            got = agent.wait_value("tlsprof_handshakes_total", 15, comm="static_tls_stri", role="server", result="ok")
            cpu = agent.wait_value("tlsprof_handshake_cpu_seconds_count", 15, comm="static_tls_stri")
            method = agent.value("tlsprof_handshake_cpu_method_info", comm="static_tls_stri",
                                 method="kernel_estimate", reason="no_tls_library")
            log = agent.output()
    finally:
        stop_pid(proc.pid)
        proc.wait(timeout=10)
    assert got == 15 and cpu == 15, (got, cpu)
    assert method == 1, log
    assert log.count("no TLS library found") == 1, log
