#!/usr/bin/env python3
"""The agent's own CPU and memory, one binary against another under the same load: the
static release build (musl, `make dist`) against the glibc build (`make build`).

One nginx worker (ECDSA P-256, TLS 1.3) on CPU 0, ab on CPU 1. A run: `tlsprof run --pid
<worker>` starts; once it has attached, ab runs for SECONDS (-c 4, a new TLS connection
per request, or keep-alive with -k) while the metrics are scraped every second, as
Prometheus would, then the agent reads what is left (two more scans and scrapes).
Measured from /proc/<agent>/stat and status:
  start  - CPU seconds (utime + stime) from exec to attached (BPF load, calibration, scan)
  load   - CPU ms per 1000 requests (ab's count) from attached to the last scrape
  hwm    - peak resident memory (VmHWM) at the end
The binaries take turns (A-B, then B-A, ...); medians and ranges over the runs.
Usage: bench/static.py [--runs N] [--seconds S] [--workloads handshake,keepalive]
                       [--bin NAME=PATH ...]   (default: glibc and musl, below)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import harness.agent as agent_mod  # noqa: E402
from harness.procs import ROOT  # noqa: E402
from harness.servers import Nginx  # noqa: E402

BINS = {
    "glibc": ROOT / "target/release/tlsprof",
    "musl": ROOT / "target/x86_64-unknown-linux-musl/release/tlsprof",
}
WORKLOADS = {"handshake": [], "keepalive": ["-k"]}
PIN = os.cpu_count() >= 2
TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def hwm(pid: int) -> int:
    return next(int(line.split()[1]) * 1024 for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("VmHWM:"))


def one_run(binary: Path, nginx, worker: int, flags: list, seconds: float) -> tuple[float, float, int]:
    """(start CPU s, load CPU ms per 1000 requests, peak RSS bytes) of one agent run."""
    agent_mod.TLSPROF = binary
    with agent_mod.Agent("--pid", str(worker), scan_interval=2.0) as a:
        a.wait_attached([worker])
        pid = a.proc.pid
        start = own_cpu(pid)
        stop = threading.Event()

        def scrape():
            while not stop.wait(1.0):
                a.scrape_text()
        t = threading.Thread(target=scrape)
        t.start()
        try:
            out = subprocess.run([*(["taskset", "-c", "1"] if PIN else []), "ab", "-q", "-s", "30", "-c", "4",
                                  "-t", str(seconds), "-n", "10000000", *flags, f"https://127.0.0.1:{nginx.port}/"],
                                 check=True, capture_output=True, text=True).stdout
            requests = next(int(line.split()[2]) for line in out.splitlines() if line.startswith("Complete requests:"))
        finally:
            stop.set()
            t.join()
        a.settle()  # the events of the run read, and one more scrape
        load = (own_cpu(pid) - start) * 1e6 / requests
        return start, load, hwm(pid)


def fmt(values, scale=1.0, unit=""):
    v = [x * scale for x in values]
    return f"{statistics.median(v):8.2f}{unit} ({min(v):.2f}-{max(v):.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=6, help="runs per binary and workload (default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=20, help="ab -t (default: %(default)s)")
    ap.add_argument("--workloads", default="handshake,keepalive")
    ap.add_argument("--bin", action="append", default=[], help="NAME=PATH, instead of the two defaults")
    args = ap.parse_args()
    bins = dict(b.split("=", 1) for b in args.bin) if args.bin else BINS
    bins = {k: Path(v) for k, v in bins.items()}
    for name, path in bins.items():
        if not path.exists():
            raise SystemExit(f"bench: no {name} binary at {path} (make build; make dist)")

    work = Path(tempfile.mkdtemp(prefix="tlsprof-bench-"))
    nginx = Nginx(work, workers=1, extra_server="ssl_protocols TLSv1.3; keepalive_requests 100000;",
                  extra_main="worker_cpu_affinity 01;" if PIN else "")
    (worker,) = nginx.workers()
    print(f"nginx worker {worker}; ab -c 4 -t {args.seconds:g} per run; {args.runs} runs per binary")
    for name, path in bins.items():
        print(f"  {name}: {path}: {subprocess.run([path, '--version'], capture_output=True, text=True).stdout.strip()}")
    try:
        for wl in args.workloads.split(","):
            got = {name: [] for name in bins}
            for i in range(args.runs):
                order = list(bins) if i % 2 == 0 else list(reversed(bins))
                for name in order:
                    r = one_run(bins[name], nginx, worker, WORKLOADS[wl], args.seconds)
                    got[name].append(r)
                    print(f"  {wl:9} run {i + 1} {name:6} start {r[0]:.2f} s CPU, load {r[1]:.1f} ms CPU "
                          f"per 1000 requests, VmHWM {r[2] / 2**20:.1f} MiB", flush=True)
            print(f"{wl}: median (range) over {args.runs} runs")
            for name, rs in got.items():
                print(f"  {name:6} start CPU {fmt([r[0] for r in rs], unit=' s')}   load CPU "
                      f"{fmt([r[1] for r in rs], unit=' ms/1000 req')}   VmHWM {fmt([r[2] for r in rs], 2**-20, ' MiB')}")
            sys.stdout.flush()
    finally:
        nginx.stop()


if __name__ == "__main__":
    main()
