"""Servers as they run on real hosts: chrooted (HAProxy with the configuration Debian and
RHEL ship), a TLS library replaced on disk while the server runs (every host between a
security update and the server's restart). Their probes attach through the mapped file
itself, and every handshake is timed (--exact) and counted as the client counts it. Where
the probes cannot attach, the reason is on tlsprof_handshake_cpu_method_info and in one
log line: a library the agent cannot open, one that has lost its handshake symbols."""
import os
import shutil
import subprocess

from harness.agent import Agent, as_user_with, unit_caps
from harness.clients import https_connections
from harness.metrics import value, wait_watched
from harness.procs import stop_pid, wait_for
from harness.servers import HAProxy, Nginx

N = 30
LIBSSL = "/usr/lib/x86_64-linux-gnu/libssl.so.3"


def counted(agent, comm: str, n: int) -> list:
    """Waits until the agent has counted n handshakes of `comm`; its metrics then."""
    agent.wait_value("tlsprof_handshakes_total", n, comm=comm)
    return agent.scrape()


def test_chrooted_haproxy(workdir):
    """HAProxy in a chroot of its own: /proc/PID/root is the empty jail, where the library
    it mapped before chrooting is not. Probed through map_files, every handshake timed;
    without the privilege map_files needs, the reason is file_unreadable."""
    srv = HAProxy(workdir, chroot=True)
    try:
        assert os.readlink(f"/proc/{srv.pid}/root") == str(srv.dir / "jail")
        assert not os.path.exists(f"/proc/{srv.pid}/root{LIBSSL}")
        with Agent("--pid", str(srv.pid), "--exact") as agent:
            agent.wait_attached([srv.pid])
            wait_watched(agent, srv.port)
            assert https_connections(srv.port, N)["ok"] == N
            m = counted(agent, "haproxy", N)
            assert value(m, "tlsprof_handshake_cpu_method_info", comm="haproxy", method="probes") == 1, m
            assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="haproxy") == N
            assert "no handshake probes" not in agent.output(), agent.output()
        # The unit's capabilities less CAP_SYS_ADMIN: no map_files, and the name leads nowhere.
        caps = [c for c in unit_caps() if c != "sys_admin"]
        with Agent("--pid", str(srv.pid), prefix=as_user_with(caps)) as agent:
            agent.wait_attached([srv.pid])
            wait_watched(agent, srv.port)
            assert https_connections(srv.port, N)["ok"] == N
            m = counted(agent, "haproxy", N)
            assert value(m, "tlsprof_handshake_cpu_method_info", comm="haproxy", method="kernel_estimate",
                         reason="file_unreadable") == 1, m
            line = f"no handshake probes for {srv.pid} (haproxy): file_unreadable: cannot open {LIBSSL}"
            assert agent.output().count(line) == 1, agent.output()
    finally:
        srv.stop()


def test_library_replaced_on_disk(workdir):
    """nginx on a libssl of its own directory, replaced by rename while it runs as a package
    update does: /proc/PID/maps says `(deleted)`. Found by --pid and by --comm, its master
    and both workers probed, every handshake timed."""
    lib = workdir / "lib"
    lib.mkdir()
    for f in ("libssl.so.3", "libcrypto.so.3"):
        shutil.copy(f"/usr/lib/x86_64-linux-gnu/{f}", lib / f)
    # a copy of nginx under a name of its own: --comm selects it alone on a shared machine
    binary = workdir / "nginx-upgraded"
    shutil.copy(shutil.which("nginx"), binary)
    nginx = Nginx(workdir, workers=2, env={"LD_LIBRARY_PATH": str(lib)}, binary=str(binary))
    try:
        shutil.copy(lib / "libssl.so.3", lib / "libssl.so.3.new")
        os.rename(lib / "libssl.so.3.new", lib / "libssl.so.3")
        maps = open(f"/proc/{nginx.workers()[0]}/maps").read()
        assert f"{lib}/libssl.so.3 (deleted)" in maps, maps
        for select in (["--pid", str(nginx.pid)], ["--comm", "nginx-upgraded"]):
            with Agent(*select, "--exact") as agent:
                agent.wait_attached(nginx.workers())
                wait_watched(agent, nginx.port)
                assert https_connections(nginx.port, N)["ok"] == N
                m = counted(agent, "nginx-upgraded", N)
                assert value(m, "tlsprof_handshake_cpu_method_info", comm="nginx-upgraded",
                             method="probes") == 3, (select, m)
                assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx-upgraded") == N, select
    finally:
        nginx.stop()


def test_library_without_its_symbols(workdir):
    """A process that maps a file named as a TLS library but holding none of its handshake
    functions (here: libz under libssl's name): traced, its reason symbol_not_found."""
    lib = workdir / "fake"
    lib.mkdir()
    shutil.copy("/usr/lib/x86_64-linux-gnu/libz.so.1", lib / "libssl.so.3")
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ, "LD_PRELOAD": str(lib / "libssl.so.3")})
    try:
        wait_for(lambda: "libssl.so.3" in open(f"/proc/{proc.pid}/maps").read(), 5, "the preload")
        with Agent("--pid", str(proc.pid)) as agent:
            agent.wait_attached([proc.pid])
            m = agent.scrape()
            assert value(m, "tlsprof_handshake_cpu_method_info", comm="sleep", method="kernel_estimate",
                         reason="symbol_not_found") == 1, m
            line = f"no handshake probes for {proc.pid} (sleep): symbol_not_found: {lib}/libssl.so.3 (openssl)"
            assert line in agent.output(), agent.output()
    finally:
        stop_pid(proc.pid)
        proc.wait()
