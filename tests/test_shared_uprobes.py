"""The handshake uprobes shared per library file (agent/src/bpf/shared_uprobes.rs): one
tracefs uprobe event per file, offset and program, and a perf event per traced process that
puts the breakpoints into that process alone. The truth is the kernel's: its list of uprobe
events (tracefs uprobe_events) and its count of each one's hits in any process
(uprobe_profile). What could go wrong: a process that maps the same library but is not
traced gets the breakpoints; one process leaving takes the others' probes with it; events
are left in the kernel after the agent exits, is killed, or its processes are gone.
Detaching speed is bench/detach.py's (a benchmark, not a timed test)."""
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness.agent import Agent
from harness.clients import https_connections
from harness.metrics import value, wait_watched
from harness.procs import stop_pid, wait_for
from harness.servers import Nginx

N = 30
TRACED, OTHER = "nginx-shared", "nginx-other"


def tracefs(name: str) -> str:
    """A tracefs file as the kernel has it: where the host mounts tracefs, else through a
    mount of this test's own in a mount namespace of its own (nothing is left mounted)."""
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if (Path(d) / "uprobe_events").exists():
            return (Path(d) / name).read_text()
    with tempfile.TemporaryDirectory() as mnt:
        r = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tracefs nodev {mnt} && cat {mnt}/{name}"],
                           capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        return r.stdout


def events(agent_pid: int) -> list[tuple[str, str, str, int]]:
    """The agent's uprobe events: (kind p|r, name, file, offset)."""
    out = []
    for line in tracefs("uprobe_events").splitlines():
        head, _, where = line.partition(" ")
        kind, _, full = head.partition(":")
        group, _, name = full.partition("/")
        if group == f"tlsprof_{agent_pid}":
            path, _, off = where.strip().rpartition(":")
            out.append((kind, name, path, int(off, 16)))
    return out


def hits(names: set[str]) -> int:
    """The kernel's count of hits, in any process, of the uprobe events named."""
    total = 0
    for line in tracefs("uprobe_profile").splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in names:
            total += int(f[2])
    return total


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """nginx with 2 workers under a name of its own (traced), and another nginx mapping
    the same libssl under another name (not traced)."""
    d = tmp_path_factory.mktemp("shared-uprobes")
    made = {}
    try:
        for name, workers in ((TRACED, 2), (OTHER, 1)):
            binary = d / name
            binary.write_bytes(Path("/usr/sbin/nginx").read_bytes())
            binary.chmod(0o755)
            (d / f"srv-{name}").mkdir()
            made[name] = Nginx(d / f"srv-{name}", workers=workers, binary=str(binary))
        yield made[TRACED], made[OTHER]
    finally:
        for s in made.values():
            s.stop()


def test_one_uprobe_per_probe_and_file_breakpoints_only_where_traced(servers):
    traced, other = servers
    with Agent("--comm", TRACED, "--exact") as agent:
        procs = [traced.pid, *traced.workers()]
        agent.wait_attached(procs)
        wait_watched(agent, traced.port)
        ev = events(agent.proc.pid)
        assert "shared per file" in agent.output(), agent.output()[-2000:]
        # One event per probe, not per process: no (kind, file, offset) twice, though three
        # processes have each probe; each in the libssl they all map.
        where = [(k, os.stat(p).st_ino, off) for k, _, p, off in ev]
        assert ev and len(set(where)) == len(where), ev
        libssl = {os.stat(p).st_ino for p in maps_of(traced.workers()[0], "libssl")}
        assert {ino for _, ino, _ in where} <= libssl, (ev, libssl)
        names = {n for _, n, _, _ in ev}

        assert https_connections(traced.port, N)["ok"] == N
        m = agent.wait_value("tlsprof_handshakes_total", N, comm=TRACED)
        assert value(agent.scrape(), "tlsprof_handshake_cpu_seconds_count", comm=TRACED) == N
        h = hits(names)
        assert h >= 2 * N, h  # at least an entry and a return per handshake
        # The other nginx maps the same file: not one hit there.
        assert https_connections(other.port, N)["ok"] == N
        time.sleep(0.5)
        assert hits(names) == h
        assert value(agent.scrape(), "tlsprof_handshakes_total", comm=OTHER) == 0

        # A worker killed: its perf events close, the master's new worker gets its own, and
        # the others' breakpoints stay.
        gone = traced.workers()[0]
        os.kill(gone, signal.SIGKILL)
        wait_for(lambda: len(traced.workers()) == 2 and gone not in traced.workers(), 10, "nginx's new worker")
        agent.wait_attached([traced.pid, *traced.workers()])
        base = agent.mark()
        assert https_connections(traced.port, N)["ok"] == N
        agent.wait_value("tlsprof_handshakes_total", N, comm=TRACED, base=base)
        m = agent.scrape()
        assert value(m, "tlsprof_handshake_cpu_seconds_count", comm=TRACED) - \
            value(base, "tlsprof_handshake_cpu_seconds_count", comm=TRACED) == N
        assert events(agent.proc.pid) == ev, "the events stay while processes use them"
        pid = agent.proc.pid
        out = agent.stop()
    assert events(pid) == [], f"events left after the agent exited: {out[-1500:]}"


def maps_of(pid: int, lib: str) -> set[str]:
    return {l.split()[-1] for l in Path(f"/proc/{pid}/maps").read_text().splitlines() if lib in l and "/" in l}


def test_events_of_a_killed_agent_removed_by_the_next(servers):
    traced, _ = servers
    a = Agent("--comm", TRACED)
    try:
        a.wait_attached([traced.pid, *traced.workers()])
        first = a.proc.pid
        assert events(first), "the first agent made no event"
    finally:
        a.proc.kill()  # SIGKILL: no chance to remove them
        a.proc.wait(timeout=60)
    assert events(first), "the kernel keeps a killed agent's events"
    with Agent("--comm", TRACED) as b:
        b.wait_attached([traced.pid, *traced.workers()])
        assert events(first) == [], "the next agent removes them at start"
        assert events(b.proc.pid)


def test_events_released_once_their_processes_are_gone(tmp_path):
    """An nginx that stops while the agent runs: its events go once unused for 10 s
    (shared_uprobes::RELEASE_AFTER), at the agent's next scan."""
    binary = tmp_path / "nginx-release"
    binary.write_bytes(Path("/usr/sbin/nginx").read_bytes())
    binary.chmod(0o755)
    srv = Nginx(tmp_path, workers=1, binary=str(binary))
    try:
        with Agent("--comm", "nginx-release") as agent:
            agent.wait_attached([srv.pid, *srv.workers()])
            assert events(agent.proc.pid)
            srv.stop()
            stopped = time.monotonic()
            wait_for(lambda: not events(agent.proc.pid), 20, "the events of a stopped nginx released")
            assert time.monotonic() - stopped >= 9, "released before RELEASE_AFTER"
    finally:
        srv.stop()


def test_uprobes_of_their_own_per_process(servers):
    """--avoid-hook shared_uprobes: uprobes per process (the perf uprobe PMU), as where
    tracefs cannot be written; every handshake still timed, and no tracefs event."""
    traced, _ = servers
    with Agent("--comm", TRACED, "--exact", "--avoid-hook", "shared_uprobes") as agent:
        agent.wait_attached([traced.pid, *traced.workers()])
        wait_watched(agent, traced.port)
        assert events(agent.proc.pid) == []
        assert https_connections(traced.port, N)["ok"] == N
        agent.wait_value("tlsprof_handshakes_total", N, comm=TRACED)
        assert value(agent.scrape(), "tlsprof_handshake_cpu_seconds_count", comm=TRACED) == N
