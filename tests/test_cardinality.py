"""Label values other local users control (issue 19): a process that renames itself 10,000
times and one that listens on 5,000 ports while mapping libssl. The series of every metric
stay within --max-series (plus the folded `other` series), the agent's memory within its
bound, counts stay exact (what is folded is counted under `other`), and tlsprof says what it
folded."""
from __future__ import annotations

import collections
import socket
import subprocess
import sys
import threading
import time

from harness.agent import Agent
from harness.metrics import parse_metrics
from harness.procs import stop_pid, wait_for

MIB = 1 << 20
RSS_LIMIT = 72 * MIB  # 64 MiB + the documented bounds (docs/endpoint.md)

# A process that maps libssl (Python's ssl module), listens on loopback, and renames itself:
# its comm (prctl) and its argv[0] (written over in place, as `ps` shows it), so that the
# name tlsprof gives it changes each time it looks.
RENAMER = r"""
import ctypes, socket, ssl, sys, time
n = int(sys.argv[1])
libc = ctypes.CDLL(None)
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(16)
rest = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
arg_start = int(rest[45])          # field 48 of /proc/PID/stat
print(ls.getsockname()[1], flush=True)
sys.stdin.readline()               # go
mem = open("/proc/self/mem", "r+b", buffering=0)
for i in range(n):
    name = b"r%06d" % i
    libc.prctl(15, name, 0, 0, 0)  # PR_SET_NAME
    mem.seek(arg_start); mem.write(name.ljust(15, b"\0"))
    # every 200th name is kept longer than tlsprof takes to attach, so that it sees
    # comm and argv[0] agree at least that often
    time.sleep(0.3 if i % 200 == 0 else 0.001)
print("done", flush=True)
sys.stdin.readline()
"""

# A process that maps libssl and listens on N loopback ports, accepting and closing.
LISTENER = r"""
import resource, selectors, socket, ssl, sys
n = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (n + 4096, n + 4096))
sel = selectors.DefaultSelector()
ports = []
for _ in range(n):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8); s.setblocking(False)
    sel.register(s, selectors.EVENT_READ); ports.append(s.getsockname()[1])
print(" ".join(map(str, ports)), flush=True)
while True:
    for key, _ in sel.select():
        try:
            c, _ = key.fileobj.accept(); c.close()
        except OSError:
            pass
"""


def series(text: str) -> dict[str, set]:
    """The label sets of each metric family (histogram buckets by their labels without le)."""
    out = collections.defaultdict(set)
    for name, labels, _ in parse_metrics(text):
        if not name.startswith("tlsprof_"):
            continue
        family = name.removesuffix("_bucket").removesuffix("_sum").removesuffix("_count").removesuffix("_total")
        out[family].add(tuple(sorted((k, v) for k, v in labels.items() if k != "le")))
    return out


def check_caps(text: str, cap: int):
    """Every family labelled by values others control (comm, port, library) within the cap;
    families with fixed label sets (the table of tlsprof_table_full, …) are not capped."""
    for family, sets in series(text).items():
        if not any(k in ("comm", "port", "library") for s in sets for k, _ in s):
            continue
        own = [s for s in sets if not any(v == "other" and k in ("comm", "port", "library") for k, v in s)]
        assert len(own) <= cap, f"{family}: {len(own)} series of their own, cap {cap}"
        assert len(sets) <= cap + 16, f"{family}: {len(sets)} series"


def spawn(code: str, argv0: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([argv0, "-c", code, *args], executable=sys.executable, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def test_a_process_renaming_itself_10000_times():
    cap = 20
    proc = spawn(RENAMER, "R" * 15, "10000")
    try:
        proc.stdout.readline()
        with Agent("--pid", str(proc.pid), "--max-series", str(cap), scan_interval=0.1) as agent:
            agent.wait_attached([proc.pid])
            proc.stdin.write("go\n")
            proc.stdin.flush()
            done = threading.Event()
            threading.Thread(target=lambda: proc.stdout.readline() and done.set(), daemon=True).start()
            rss = []
            while not done.wait(0.2):
                rss.append(agent.rss())
                assert len(rss) < 600, "10,000 renames took over 2 minutes"
            time.sleep(0.5)
            text = agent.scrape_text()
            check_caps(text, cap)
            samples = parse_metrics(text)
            folded = {l["metric"]: v for n, l, v in samples if n == "tlsprof_series_folded_total"}
            names = {l["comm"] for n, l, v in samples if n == "tlsprof_attached_processes"}
            assert len(names) > cap // 2, f"the renames were not seen: {names}"
            assert folded.get("attached_processes", 0) > 0, folded
            assert "other" in names, names
            assert max(rss) < RSS_LIMIT, f"agent RSS {max(rss) / MIB:.0f} MiB"
            out = agent.output()
            assert "tlsprof_attached_processes: 20 series reached" in out, out[-3000:]
    finally:
        stop_pid(proc.pid)


def test_a_process_listening_on_5000_ports():
    n, cap = 5000, 500
    proc = spawn(LISTENER, "python3-listener", str(n))
    try:
        ports = [int(p) for p in proc.stdout.readline().split()]
        assert len(ports) == n
        with Agent("--pid", str(proc.pid)) as agent:
            agent.wait_attached([proc.pid], timeout=60)
            for p in ports:
                with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
                    s.recv(1)  # the server closes it
            name = "tlsprof_tcp_connections_accepted_total"

            def accepted():
                return sum(v for m, _, v in parse_metrics(agent.scrape_text()) if m == name)
            wait_for(lambda: accepted() >= n, 30, lambda: f"{n} accepted connections (now {accepted()})")
            time.sleep(1)
            text = agent.scrape_text()
            check_caps(text, cap)
            samples = parse_metrics(text)
            per_port = {l["port"]: v for m, l, v in samples if m == name}
            assert sum(per_port.values()) == n, "a connection was lost or counted twice"
            assert len(per_port) == cap + 1 and per_port["other"] == n - cap, (len(per_port), per_port.get("other"))
            folded = {l["metric"]: v for m, l, v in samples if m == "tlsprof_series_folded_total"}
            assert folded["tcp_connections_accepted"] >= n - cap, folded  # updates, not connections
            assert agent.rss() < RSS_LIMIT, f"agent RSS {agent.rss() / MIB:.0f} MiB"
            assert "tlsprof_tcp_connections_accepted: 500 series reached" in agent.output()
    finally:
        stop_pid(proc.pid)
