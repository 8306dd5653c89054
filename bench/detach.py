#!/usr/bin/env python3
"""Attaching to and detaching from a server with many processes.

nginx with --workers worker processes (one per core on a big host: `worker_processes auto`),
then for each way of attaching uprobes:
  shared   the default: one uprobe per library file and probe, shared by the processes that
           map it, a perf event per process putting its breakpoints into that process only
           (agent/src/bpf/shared_uprobes.rs);
  own      `--avoid-hook shared_uprobes`: a uprobe of its own per process and probe (the
           perf uprobe PMU), each removal waiting for RCU grace periods under a global lock;
`tlsprof run --comm nginx-detach --exact` (nginx copied under that name) is started and timed until its ready file lists the
master and every worker (attach), ab makes --handshakes handshakes (each must be counted and
timed by the probes, as ab counts them: the probes work), the agent gets SIGINT and is timed
until it has exited (detach, with the shared uprobes' removal), and the kernel's uprobe
events are listed to check none is left behind.

Usage: bench/detach.py [--workers 64] [--handshakes 2000] [--ways shared,own] [--out FILE]
Exit status 1 when a count is wrong or a uprobe event is left.
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import Agent  # noqa: E402
from harness.clients import ab  # noqa: E402
from harness.metrics import value  # noqa: E402
from harness.procs import wait_for  # noqa: E402
from harness.servers import Nginx  # noqa: E402

# nginx under a name of its own: other nginx processes of the host are not counted
COMM = "nginx-detach"
ARGS = {"shared": [], "own": ["--avoid-hook", "shared_uprobes"]}


def uprobe_events() -> list[str]:
    for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        p = Path(d) / "uprobe_events"
        if p.exists():
            return [l for l in p.read_text().splitlines() if "tlsprof_" in l]
    return []


def one(way: str, nginx: Nginx, handshakes: int) -> dict:
    procs = [nginx.pid, *nginx.workers()]
    t0 = time.monotonic()
    agent = Agent("--comm", COMM, "--exact", *ARGS[way])
    wait_for(lambda: all(agent.attached(p) for p in procs), 120, f"tlsprof to attach to {len(procs)} nginx processes")
    attach = time.monotonic() - t0
    before = agent.scrape()
    done = ab(nginx.port, n=handshakes, concurrency=16)
    def counted():
        m = agent.scrape()
        return (value(m, "tlsprof_handshakes_total", comm=COMM, role="server", result="ok")
                - value(before, "tlsprof_handshakes_total", comm=COMM, role="server", result="ok"))
    wait_for(lambda: counted() >= done, 30, f"{done} handshakes counted")
    time.sleep(1)
    n = counted()
    timed = value(agent.scrape(), "tlsprof_handshake_cpu_seconds_count", comm=COMM, role="server") - \
        value(before, "tlsprof_handshake_cpu_seconds_count", comm=COMM, role="server")
    t1 = time.monotonic()
    agent.proc.send_signal(signal.SIGINT)
    agent.proc.wait(timeout=600)
    detach = time.monotonic() - t1
    log = agent.output()
    said = next((l.strip() for l in log.splitlines() if "detached" in l and "probes" in l), "")
    left = uprobe_events()
    return {"way": way, "processes": len(procs), "attach_s": attach, "detach_s": detach, "ab": done,
            "counted": n, "timed": timed, "left": len(left), "said": said}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--handshakes", type=int, default=2000)
    ap.add_argument("--ways", default="shared,own")
    ap.add_argument("--out")
    a = ap.parse_args()
    ok = True
    lines = [f"bench/detach.py --workers {a.workers} --handshakes {a.handshakes} on {os.uname().release}, "
             f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}"]
    with tempfile.TemporaryDirectory() as d:
        binary = Path(d) / COMM
        shutil.copy2("/usr/sbin/nginx", binary)
        nginx = Nginx(Path(d), workers=a.workers, binary=str(binary))
        try:
            for way in a.ways.split(","):
                r = one(way, nginx, a.handshakes)
                line = (f"{way:6} {r['processes']} processes: attached in {r['attach_s']:.1f} s, exited in "
                        f"{r['detach_s']:.1f} s; ab {r['ab']}, counted {r['counted']:.0f}, timed {r['timed']:.0f}; "
                        f"uprobe events left {r['left']}  [{r['said']}]")
                print(line, flush=True)
                lines.append(line)
                # ab -n opens a connection or so beyond its count (handshaked, no request)
                ok &= r["ab"] <= r["counted"] <= r["ab"] + 16 and r["timed"] == r["counted"] and r["left"] == 0
        finally:
            nginx.stop()
    if a.out:
        with open(a.out, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
