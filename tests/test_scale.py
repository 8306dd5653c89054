"""Scale: many traced processes and open connections at once, and a
listening port a traced process opens after tlsprof attached to it.

The full-size run is the benchmark (bench/scale.py: 100 servers, 20,000 idle connections;
its figures are in bench/README.md); here the same script runs small, and must come out exact:
tlsprof's handshake and accepted-connection counts equal nginx's own stub_status and the
small servers' client, with every loss counter at 0."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

from harness.agent import Agent
from harness.procs import ROOT, stop_pid, wait_for

# A process that maps libssl (Python's ssl module), listens on one port, and opens a second
# listening port when told to, accepting and closing on both.
TWO_PORTS = r"""
import selectors, socket, ssl, sys, threading
sel = selectors.DefaultSelector()
def listen():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ)
    return s.getsockname()[1]
def serve():
    while True:
        for key, _ in sel.select(0.1):
            try:
                c, _ = key.fileobj.accept(); c.close()
            except BlockingIOError:
                pass
print(listen(), flush=True)
threading.Thread(target=serve, daemon=True).start()
sys.stdin.readline()
print(listen(), flush=True)
sys.stdin.readline()
"""


def test_a_port_opened_after_attach_is_watched():
    """The agent reads a process's open files again when its namespace's listening sockets
    change (not at every scan): a port opened later is watched, its connections counted."""
    proc = subprocess.Popen([sys.executable, "-c", TWO_PORTS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = int(proc.stdout.readline())
        with Agent("--pid", str(proc.pid)) as agent:
            agent.wait_attached([proc.pid])
            name = "tlsprof_tcp_connections_accepted_total"
            wait_for(lambda: agent.value(name, port=str(first)) == 0 and
                     any(m == name and l.get("port") == str(first) for m, l, _ in agent.scrape()),
                     15, f"port {first} watched")
            time.sleep(2)  # scans with nothing changed: the files are not read again
            proc.stdin.write("\n")
            proc.stdin.flush()
            second = int(proc.stdout.readline())
            wait_for(lambda: any(m == name and l.get("port") == str(second) for m, l, _ in agent.scrape()),
                     15, f"port {second}, opened after attach, watched")
            for port in (first, second):
                for _ in range(25):
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                        s.recv(1)
            for port in (first, second):
                assert agent.wait_value(name, 25, port=str(port)) == 25, port
    finally:
        stop_pid(proc.pid)


def test_many_servers_and_open_connections_counted_exactly():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--idle", "3000", "--servers", "20",
                          "--load", "3000", "--per-server", "5", "--idle-seconds", "4"],
                         capture_output=True, text=True, timeout=900)
    report = out.stdout
    assert out.returncode == 0 and "result: exact, nothing lost" in report, report + out.stderr[-3000:]
    # the scans were timed: both kinds, at every scan interval
    assert "scan processes over the whole run" in report and "scan ports over the whole run" in report, report
    assert "traced processes: 23" in report, report


def test_kernel_maps_sized_for_this_host():
    """The per-connection maps and the event rings are sized at start from the host's memory
    and CPUs, as docs/metrics.md ("Bounds") says: the loaded maps have those sizes."""
    import json
    import os
    mem = next(int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemTotal:"))
    conns = min(1 << (max(16384, min(mem // (128 * 1024), 262144)) - 1).bit_length(), 262144)
    cpus = os.cpu_count()
    scale = min(16, 1 << (max(1, cpus // 4) - 1).bit_length())
    want = {"hs_conns": conns, "conn_hash_store": conns, "hs_events": 256 * 1024 * scale,
            "conn_events": 512 * 1024 * scale, "wire_events": 2 * 1024 * 1024 * scale}
    with Agent("--comm", "tlsprof-none") as agent:
        maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                                         check=True).stdout)
        got = {m["name"]: m["max_entries"] for m in maps if m.get("name") in want}
        assert got == want, (got, want)
        assert f"kernel maps for {cpus} CPUs: {conns} connections" in agent.output()
