#!/usr/bin/env python3
"""Overhead of tlsprof on a real nginx, measured as server CPU per request.

Four workloads against one nginx worker (ECDSA P-256, TLS 1.3):
  handshake    - a new TLS connection per request (ab -c 16)
  keepalive    - keep-alive requests on reused connections (ab -k -c 16), 17-byte body
  keepalive-4k - the same with 4 KiB responses
  churn        - keep-alive with 5 requests per connection (nginx keepalive_requests 5,
                 as Domino's default), so connections open and close all the time
For each workload, runs with the agent in each mode (--modes: default, the overhead
budget; exact, --exact) and with the per-call uprobe alternative (bpftrace, see
ALTERNATIVE; --no-alternative leaves it out) alternate with runs without: every measured
run has a run without just before and just after it (A-B-A), and the arms take every place
in the order in turn. Each run's cost is the worker's on-CPU time
(/proc/PID/task/*/schedstat, the kernel's own accounting) divided by the requests ab
completed. Prints the medians of the costs and, per arm, the median over the sets of its
cost divided by the mean of the two runs without around it.
Usage: bench/overhead.py [--pairs N] [--seconds S] [--workloads handshake,keepalive-4k] [--modes default,exact]

--baseline-args runs the "without" side with the agent too, with other arguments: the cost
of one feature alone, e.g. CPU attribution (sampling and per-process accounting):
  bench/overhead.py --agent-args "--comm nginx" --baseline-args "--comm nginx --sample-hz 0"
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import Agent  # noqa: E402
from harness.clients import ab_count  # noqa: E402
from harness.procs import cpu_ns  # noqa: E402
from harness.servers import Nginx  # noqa: E402

# nginx's worker on CPU 0, the load generator on CPU 1 (where there are two), so that
# the two do not trade places from run to run: that is most of the noise on 2 cores.
PIN = os.cpu_count() >= 2
CLIENT_PIN = ["taskset", "-c", "1"] if PIN else []

WORKLOADS = {
    "handshake": (["-c", "16"], "/"),
    "keepalive": (["-k", "-c", "16"], "/"),
    "keepalive-4k": (["-k", "-c", "16"], "/4k"),
    "churn": (["-k", "-c", "16"], "/churn"),
}

# The best-known alternative, as bcc's sslsniff/ssllatency and bpftrace's ssllatency.bt
# do it: an entry uprobe and a uretprobe on every SSL_do_handshake, SSL_read and
# SSL_write call, timing each call into a histogram (scoped to the worker, as -p does).
ALTERNATIVE = """
uprobe:LIB:SSL_do_handshake, uprobe:LIB:SSL_read, uprobe:LIB:SSL_write { @start[tid] = nsecs; }
uretprobe:LIB:SSL_do_handshake, uretprobe:LIB:SSL_read, uretprobe:LIB:SSL_write
/@start[tid]/ { @ns[probe] = hist(nsecs - @start[tid]); delete(@start[tid]); }
"""


def libssl_of(pid: int) -> str:
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if "libssl.so" in line:
            return line.split()[-1]
    raise SystemExit(f"pid {pid} maps no libssl: the alternative needs one")


class Alternative:
    """bpftrace running the per-call probes on one process, until stopped."""

    def __init__(self, pid: int):
        script = ALTERNATIVE.replace("LIB", libssl_of(pid))
        self.proc = subprocess.Popen(["bpftrace", "-p", str(pid), "-e", script], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        # "Attaching 6 probes..." once they are in (after a warning where RLIMIT_MEMLOCK
        # cannot be raised, which BPF memory accounting makes harmless).
        seen = ""
        while "Attaching" not in seen:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"bpftrace did not start: {seen}")
            seen += line

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(2)
        self.proc.communicate(timeout=30)


def run_ab(nginx, flags, seconds) -> int:
    """ab on the load generator's CPU for `seconds`; the requests it completed."""
    flags, path = flags
    out = subprocess.run([*CLIENT_PIN, "ab", "-q", "-t", str(seconds), "-n", "10000000", "-s", "30", *flags,
                          f"https://127.0.0.1:{nginx.port}{path}"], capture_output=True, text=True,
                         timeout=seconds + 60)
    return ab_count(out.stdout, "Complete requests")


def one_run(nginx, worker, flags, seconds):
    before = cpu_ns(worker)
    done = run_ab(nginx, flags, seconds)
    after = cpu_ns(worker)
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


def probe_accounting(nginx, worker, flags, seconds, agent_args, warmup=0.0):
    """One more run with the agent and the kernel's BPF run statistics on: how many probe
    hits and how much BPF program time each request costs. Deterministic where CPU time
    per request is noisy; it does not include the uprobe trap itself (~10 us here)."""
    old = STATS.read_text().strip() if STATS.exists() else None
    try:
        STATS.write_text("1")
        with Agent(*agent_args.split(), scan_interval=2.0) as agent:
            agent.wait_attached([worker])
            if warmup > 0:
                one_run(nginx, worker, flags, warmup)
            b = bpf_usage()
            done = run_ab(nginx, flags, seconds)
            a = bpf_usage()
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
    ap.add_argument("--no-alternative", action="store_true",
                    help="do not measure the per-call uprobe alternative (bpftrace) beside tlsprof")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="which workloads (default: %(default)s)")
    ap.add_argument("--warmup", type=float, default=11,
                    help="seconds of the workload with the agent attached before each measured run, so that "
                         "the run sees the overhead budget's steady state rather than its first cycle, which "
                         "spends a whole cycle's allowance at once (default: %(default)s)")
    ap.add_argument("--modes", default="default,exact",
                    help="tlsprof modes to measure: default (overhead budget), exact (--exact) (default: %(default)s)")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    mode_args = {m: args.agent_args + (" --exact" if m == "exact" else "") for m in modes}

    work = Path(tempfile.mkdtemp(prefix="tlsprof-bench-"))
    www = Path(tempfile.mkdtemp(prefix="tlsprof-bench-www-"))
    www.chmod(0o755)
    (www / "4k").write_bytes(b"x" * 4096)
    (www / "4k").chmod(0o644)
    nginx = Nginx(work, workers=1, extra_server="ssl_protocols TLSv1.3; keepalive_requests 100000; "
                  "location /churn { keepalive_requests 5; return 200 \"hello from nginx\\n\"; } "
                  f"location = /4k {{ alias {www}/4k; }}",
                  extra_main="worker_cpu_affinity 01;" if PIN else "")
    (worker,) = nginx.workers()
    if not args.no_alternative and not shutil.which("bpftrace"):
        raise SystemExit("bench: bpftrace is not installed (scripts/deps.sh installs it); or use --no-alternative")
    arms = ["without"] + [f"tlsprof-{m}" for m in modes] + ([] if args.no_alternative else ["alternative"])
    results = {}
    try:
        for name in args.workloads.split(","):
            flags = WORKLOADS[name]
            cost = {a: [] for a in arms}
            rps = {a: [] for a in arms}
            ratios = {a: [] for a in arms}
            own_cpu = {m: [] for m in modes}
            own_rss = {m: [] for m in modes}
            one_run(nginx, worker, flags, 1)  # warm-up
            others = arms[1:]

            def without():
                if args.baseline_args is not None:
                    with Agent(*args.baseline_args.split(), scan_interval=2.0) as agent:
                        agent.wait_attached([worker])
                        return one_run(nginx, worker, flags, args.seconds)
                return one_run(nginx, worker, flags, args.seconds)

            def record(arm, c, r, i):
                cost[arm].append(c)
                rps[arm].append(r)
                print(f"  {name} set {i + 1}: {arm:16s} {c:8.1f} us/req {r:8.0f} req/s", flush=True)

            # Every measured run is bracketed by two runs without (A-B-A): its ratio is to
            # their mean, which cancels this host's drift as far as it is linear over a few
            # tens of seconds; the arms take every place in the order in turn.
            record("without", *without(), 0)
            for i in range(args.pairs):
                order = others[i % len(others):] + others[:i % len(others)]
                for arm in order:
                    if arm.startswith("tlsprof-"):
                        mode = arm.removeprefix("tlsprof-")
                        with Agent(*mode_args[mode].split(), scan_interval=2.0) as agent:
                            agent.wait_attached([worker])
                            if args.warmup > 0:
                                one_run(nginx, worker, flags, args.warmup)
                            cpu0, t0 = agent.value("tlsprof_agent_cpu_seconds_total"), time.monotonic()
                            c, r = one_run(nginx, worker, flags, args.seconds)
                            time.sleep(2.2)  # the agent publishes its own usage at each scan
                            own_cpu[mode].append((agent.value("tlsprof_agent_cpu_seconds_total") - cpu0) /
                                                 (time.monotonic() - t0))
                            own_rss[mode].append(agent.value("tlsprof_agent_resident_memory_bytes"))
                    else:
                        with Alternative(worker):
                            c, r = one_run(nginx, worker, flags, args.seconds)
                    record(arm, c, r, i)
                    record("without", *without(), i)
                    ratios[arm].append(c / statistics.mean(cost["without"][-2:]))
            ratios["without"] = [1.0]
            results[name] = ({a: statistics.median(cost[a]) for a in arms},
                             {a: statistics.median(ratios[a]) for a in arms},
                             {a: statistics.median(rps[a]) for a in arms},
                             {m: probe_accounting(nginx, worker, flags, args.seconds, mode_args[m], args.warmup) for m in modes},
                             {m: statistics.median(own_cpu[m]) for m in modes},
                             {m: max(own_rss[m]) for m in modes})
    finally:
        nginx.stop()

    print(f"tlsprof overhead: nginx 1 worker, ECDSA P-256, TLS 1.3; {args.pairs} rotating sets x {args.seconds:g} s, each run between two without; "
          f"agent: tlsprof run {args.agent_args} (modes: {', '.join(modes)}; {args.warmup:g} s of load before each run)" +
          (f"; baseline: tlsprof run {args.baseline_args}" if args.baseline_args is not None else "") +
          ("" if args.no_alternative else "; alternative: bpftrace uprobe+uretprobe on SSL_do_handshake/SSL_read/SSL_write"))
    print("| workload | arm | server CPU/req | ratio to the runs without around it (median of sets) | req/s | uprobe hits/req | "
          "BPF runs/req | BPF time/req | agent CPU | agent CPU at 2,000 req/s | agent RSS |")
    print("|---" * 11 + "|")
    for name, (cost, ratio, rate, acct, cpu, rss) in results.items():
        for a in arms:
            row = f"| {name} | {a} | {cost[a]:.1f} µs | {ratio[a]:.3f} | {rate[a]:.0f} | "
            mode = a.removeprefix("tlsprof-") if a.startswith("tlsprof-") else None
            if mode:
                hits, runs, ns = acct[mode] if acct[mode] else (float("nan"),) * 3
                # The agent's own CPU grows with the event rate: scaled to 2,000 requests (in
                # the handshake workload: handshakes) per second.
                at_2000 = cpu[mode] / max(rate[a], 1) * 2000
                row += (f"{hits:.2f} | {runs:.2f} | {ns / 1000:.2f} µs | {cpu[mode]:.2%} of a core | "
                        f"{at_2000:.2%} of a core | {rss[mode] / 2**20:.1f} MiB |")
            else:
                row += "– | – | – | – | – | – |"
            print(row, flush=True)

if __name__ == "__main__":
    main()
