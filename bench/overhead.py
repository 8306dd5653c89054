#!/usr/bin/env python3
"""Overhead of tlsprof on a real nginx, measured as server CPU per request.

Three workloads against one nginx worker (ECDSA P-256, TLS 1.3, small response):
  handshake  - a new TLS connection per request (ab -c 16)
  keepalive  - keep-alive requests on reused connections (ab -k -c 16)
  churn      - keep-alive with 5 requests per connection (nginx keepalive_requests 5,
               as Domino's default), so connections open and close all the time (ab -k -c 16)
For each workload, runs alternate without and with the agent (the order flips every
pair), and each run's cost is the worker's on-CPU time (/proc/PID/task/*/schedstat,
the kernel's own accounting) divided by the requests ab completed. Prints the medians
and the with/without ratio. Usage: bench/overhead.py [--pairs N] [--seconds S]

--baseline-args runs the "without" side with the agent too, with other arguments: the cost
of one feature alone, e.g. CPU attribution (sampling and per-process accounting):
  bench/overhead.py --agent-args "--comm nginx" --baseline-args "--comm nginx --sample-hz 0"
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from lib import Agent, Nginx, cpu_ns  # noqa: E402

# nginx's worker on CPU 0, the load generator on CPU 1 (where there are two), so that
# the two do not trade places from run to run: that is most of the noise on 2 cores.
PIN = os.cpu_count() >= 2
CLIENT_PIN = ["taskset", "-c", "1"] if PIN else []

WORKLOADS = {
    "handshake": (["-c", "16"], "/"),
    "keepalive": (["-k", "-c", "16"], "/"),
    "churn": (["-k", "-c", "16"], "/churn"),
}


def one_run(nginx, worker, flags, seconds):
    flags, path = flags
    before = cpu_ns(worker)
    out = subprocess.run([*CLIENT_PIN, "ab", "-q", "-t", str(seconds), "-n", "10000000", "-s", "30", *flags,
                          f"https://127.0.0.1:{nginx.port}{path}"], capture_output=True, text=True,
                         timeout=seconds + 60)
    after = cpu_ns(worker)
    done = next(int(l.split()[-1]) for l in out.stdout.splitlines() if l.startswith("Complete requests:"))
    return (after - before) / 1e3 / max(done, 1), done / seconds


# tlsprof's BPF programs, by name prefix (bpftool shows names cut at 15 characters).
OUR_PROGRAMS = ("hs_", "ssl_", "proc_", "conn_", "cpu_", "wire_")
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def bpf_usage():
    """(uprobe hits, all program runs, program run time ns) of tlsprof's programs."""
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout or "[]")
    ours = [p for p in progs if p.get("name", "").startswith(OUR_PROGRAMS)]
    return (sum(p.get("run_cnt", 0) for p in ours if p.get("type") == "kprobe"),
            sum(p.get("run_cnt", 0) for p in ours), sum(p.get("run_time_ns", 0) for p in ours))


def probe_accounting(nginx, worker, flags, seconds, agent_args):
    """One more run with the agent and the kernel's BPF run statistics on: how many probe
    hits and how much BPF program time each request costs. Deterministic where CPU time
    per request is noisy; it does not include the uprobe trap itself (~10 us here)."""
    old = STATS.read_text().strip() if STATS.exists() else None
    try:
        STATS.write_text("1")
        with Agent(*agent_args.split(), scan_interval=2.0) as agent:
            agent.wait_attached([worker])
            b = bpf_usage()
            out = subprocess.run([*CLIENT_PIN, "ab", "-q", "-t", str(seconds), "-n", "10000000", "-s", "30",
                                  *flags[0], f"https://127.0.0.1:{nginx.port}{flags[1]}"], capture_output=True,
                                 text=True, timeout=seconds + 60)
            a = bpf_usage()
        done = next(int(l.split()[-1]) for l in out.stdout.splitlines() if l.startswith("Complete requests:"))
        return (a[0] - b[0]) / done, (a[1] - b[1]) / done, (a[2] - b[2]) / done
    except (OSError, StopIteration):
        return None
    finally:
        if old is not None:
            STATS.write_text(old)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--agent-args", default="--comm nginx", help="arguments for `tlsprof run` (default: %(default)s)")
    ap.add_argument("--baseline-args", default=None,
                    help="run the baseline with the agent and these arguments instead of without the agent")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tlsprof-bench-"))
    nginx = Nginx(work, workers=1, extra_server="ssl_protocols TLSv1.3; keepalive_requests 100000; "
                  "location /churn { keepalive_requests 5; return 200 \"hello from nginx\\n\"; }",
                  extra_main="worker_cpu_affinity 01;" if PIN else "")
    (worker,) = nginx.workers()
    results = {}
    try:
        for name, flags in WORKLOADS.items():
            off, on, rps_off, rps_on, ratios, own_cpu, own_rss = [], [], [], [], [], [], []
            one_run(nginx, worker, flags, 1)  # warm-up
            for i in range(args.pairs):
                for with_agent in ((False, True) if i % 2 == 0 else (True, False)):
                    if with_agent:
                        with Agent(*args.agent_args.split(), scan_interval=2.0) as agent:
                            agent.wait_attached([worker])
                            cpu0, t0 = agent.value("tlsprof_agent_cpu_seconds_total"), time.monotonic()
                            cost, rps = one_run(nginx, worker, flags, args.seconds)
                            time.sleep(2.2)  # the agent publishes its own usage at each scan
                            own_cpu.append((agent.value("tlsprof_agent_cpu_seconds_total") - cpu0) /
                                           (time.monotonic() - t0))
                            own_rss.append(agent.value("tlsprof_agent_resident_memory_bytes"))
                        on.append(cost)
                        print(f"  {name} pair {i + 1}: with agent    {cost:8.1f} us/req {rps:8.0f} req/s", flush=True)
                        rps_on.append(rps)
                    elif args.baseline_args is not None:
                        with Agent(*args.baseline_args.split(), scan_interval=2.0) as agent:
                            agent.wait_attached([worker])
                            cost, rps = one_run(nginx, worker, flags, args.seconds)
                        off.append(cost)
                        print(f"  {name} pair {i + 1}: baseline      {cost:8.1f} us/req {rps:8.0f} req/s", flush=True)
                        rps_off.append(rps)
                    else:
                        cost, rps = one_run(nginx, worker, flags, args.seconds)
                        off.append(cost)
                        print(f"  {name} pair {i + 1}: without agent {cost:8.1f} us/req {rps:8.0f} req/s", flush=True)
                        rps_off.append(rps)
                ratios.append(on[-1] / off[-1])
            results[name] = (statistics.median(off), statistics.median(on), statistics.median(ratios),
                             statistics.median(rps_off), statistics.median(rps_on),
                             probe_accounting(nginx, worker, flags, args.seconds, args.agent_args),
                             statistics.median(own_cpu), max(own_rss))
    finally:
        nginx.stop()

    print(f"tlsprof overhead: nginx 1 worker, ECDSA P-256, TLS 1.3; {args.pairs} alternating pairs x {args.seconds:g} s; "
          f"agent: tlsprof run {args.agent_args}" +
          (f"; baseline: tlsprof run {args.baseline_args}" if args.baseline_args is not None else ""))
    print("| workload | server CPU/req without | with tlsprof | ratio (median of pairs) | req/s without | req/s with "
          "| uprobe hits/req | BPF runs/req | BPF time/req | agent CPU | agent RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, (off, on, ratio, r_off, r_on, acct, cpu, rss) in results.items():
        hits, runs, ns = acct if acct else (float("nan"),) * 3
        print(f"| {name} | {off:.1f} µs | {on:.1f} µs | {ratio:.3f} | {r_off:.0f} | {r_on:.0f} "
              f"| {hits:.2f} | {runs:.2f} | {ns / 1000:.2f} µs | {cpu:.2%} of a core | {rss / 2**20:.1f} MiB |")


if __name__ == "__main__":
    main()
