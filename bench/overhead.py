#!/usr/bin/env python3
"""Overhead of tlsprof on a real nginx, as server CPU per request, in every window a user
looks at: from the moment tlsprof attaches, in windows of 2, 4, 10 and 30 s.

Workloads against one nginx worker (ECDSA P-256, TLS 1.3) pinned to CPU 0, ab on CPU 1:
  handshake    - a new TLS connection per request (ab -c 16)
  keepalive    - keep-alive requests on reused connections (ab -k -c 16), 17-byte body
  keepalive-4k - the same with 4 KiB responses
  churn        - keep-alive with 5 requests per connection (nginx keepalive_requests 5,
                 as Domino's default), so connections open and close all the time

A run: ab starts, and after --lead seconds of load the arm starts: nothing (a run
without), `tlsprof run` in a mode (default: the overhead budget; exact: --exact), or the
per-call uprobe alternative (bpftrace, see ALTERNATIVE). Time 0 is the moment the arm is
attached (the agent's --ready-file lists the worker; bpftrace says "Attaching"). From
then on, every --bin seconds, the worker's on-CPU time (/proc/PID/task/*/schedstat, the
kernel's accounting) and the requests nginx served (its stub_status on a plain port, the
server's own count, less the status requests themselves) are read, for --seconds.

Every measured run has a run without just before and just after it (A-B-A) and the arms
take every place in the order in turn (a set). A window's ratio is the arm's CPU per
request in that window (e.g. 2-4 s after attach) over the mean CPU per request of the two
runs without around it. Per window length, the median over the sets is taken at every
start (1 s apart); reported: the worst of those medians (the window a user is likeliest to
see the cost in), the first 10 s, and the whole run, each with the range over the sets.

A last run per mode switches the kernel's BPF statistics on and counts uprobe hits, BPF
program runs and BPF time per request (both ab's side and nginx's).
Usage: bench/overhead.py [--pairs N] [--seconds S] [--workloads handshake,keepalive-4k] [--modes default,exact]

--baseline-args runs the "without" side with the agent too, with other arguments: the cost
of one feature alone, e.g. CPU attribution (sampling and per-process accounting):
  bench/overhead.py --agent-args "--comm nginx" --baseline-args "--comm nginx --sample-hz 0"
"""
import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import Agent  # noqa: E402
from harness.procs import cpu_ns, free_port  # noqa: E402
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
WINDOWS = (2, 4, 10, 30)

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


class Attached:
    """`tlsprof run` with these arguments, entered once it has attached to the worker; its
    own CPU (from /proc) is measured from then until `done`."""

    def __init__(self, args: str, worker: int, prefix: tuple = ()):
        self.args, self.worker, self.prefix = args, worker, prefix

    def __enter__(self):
        self.agent = Agent(*self.args.split(), scan_interval=2.0, prefix=self.prefix)
        self.agent.__enter__()
        self.agent.wait_attached([self.worker])
        self.cpu0, self.t0 = self.own_cpu(), time.monotonic()
        return self

    def own_cpu(self) -> float:
        f = Path(f"/proc/{self.agent.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

    def done(self):
        """(agent CPU share of one core since attach, peak RSS in bytes)."""
        cpu = (self.own_cpu() - self.cpu0) / (time.monotonic() - self.t0)
        hwm = next(int(line.split()[1]) * 1024 for line in
                   Path(f"/proc/{self.agent.proc.pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
        return cpu, hwm

    def __exit__(self, *exc):
        self.agent.__exit__(*exc)


def served(status_port: int) -> int:
    """Requests nginx has served (stub_status), this one included."""
    with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/stub_status", timeout=5) as r:
        return int(r.read().decode().splitlines()[2].split()[2])


def timeline(nginx, worker, flags, args, arm):
    """One run: ab under way for --lead s, then `arm` (a context manager) attached; per bin
    from then on, (worker CPU ns, requests). Returns (bins, what the arm said at the end)."""
    flags, path = flags
    ab = subprocess.Popen([*CLIENT_PIN, "ab", "-q", "-t", str(args.lead + args.seconds + 30), "-n", "10000000",
                           "-s", "30", *flags, f"https://127.0.0.1:{nginx.port}{path}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(args.lead)
        with arm as a:
            t0 = time.monotonic()
            last = (cpu_ns(worker), served(nginx.status_port))
            bins = []
            for i in range(1, round(args.seconds / args.bin) + 1):
                time.sleep(max(0.0, t0 + i * args.bin - time.monotonic()))
                now = (cpu_ns(worker), served(nginx.status_port))
                bins.append((now[0] - last[0], now[1] - last[1] - 1))  # less the status request
                last = now
            said = a.done() if hasattr(a, "done") else None
    finally:
        ab.terminate()
        ab.wait(timeout=30)
    return bins, said


def per_req(bins, start=0, n=None) -> float:
    """µs of worker CPU per request over bins[start:start+n]."""
    part = bins[start:start + n if n else None]
    return sum(c for c, _ in part) / 1e3 / max(1, sum(r for _, r in part))


# tlsprof's BPF programs, by name prefix (bpftool shows names cut at 15 characters).
OUR_PROGRAMS = ("hs_", "ssl_", "proc_", "conn_", "cpu_", "wire_", "req_", "est_")
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def bpf_usage():
    """(uprobe hits, all program runs, program run time ns) of tlsprof's programs."""
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout or "[]")
    ours = [p for p in progs if p.get("name", "").startswith(OUR_PROGRAMS)]
    return (sum(p.get("run_cnt", 0) for p in ours if p.get("type") == "kprobe"),
            sum(p.get("run_cnt", 0) for p in ours), sum(p.get("run_time_ns", 0) for p in ours))


class Counted(Attached):
    """The agent with the kernel's BPF run statistics on, from attach to `done`."""

    def __enter__(self):
        super().__enter__()
        self.b = bpf_usage()
        self.r0 = served(self.status_port)
        return self

    def done(self):
        a = bpf_usage()
        n = max(1, served(self.status_port) - self.r0)
        return tuple((x - y) / n for x, y in zip(a, self.b))


def probe_accounting(nginx, worker, flags, args, agent_args):
    """Uprobe hits, BPF program runs and BPF time per request over a run from attach:
    counted by the kernel where CPU time per request is noisy; without the uprobe trap
    itself (~10 us here)."""
    old = STATS.read_text().strip() if STATS.exists() else None
    try:
        STATS.write_text("1")
        arm = Counted(agent_args, worker)
        arm.status_port = nginx.status_port
        return timeline(nginx, worker, flags, args, arm)[1]
    except OSError:
        return None
    finally:
        if old is not None:
            STATS.write_text(old)


def windows(runs, baselines, seconds, bin_s):
    """Per window length: {L: (worst median, its start, (lo, hi)), 'first10': ..., 'whole': ...}
    over the sets; runs[i] are the bins of set i's run, baselines[i] its A-B-A baseline."""
    out = {}
    if not runs:
        return out
    nbins = min(len(b) for b in runs)

    def at(start, n):
        rs = [per_req(b, start, n) / base for b, base in zip(runs, baselines)]
        return statistics.median(rs), (min(rs), max(rs))

    for length in WINDOWS:
        n = round(length / bin_s)
        if n > nbins:
            continue
        step = max(1, round(1 / bin_s))
        cands = [(at(s, n), s * bin_s) for s in range(0, nbins - n + 1, step)]
        (med, spread), start = max(cands, key=lambda c: c[0][0])
        out[length] = (med, start, spread, statistics.median(c[0][0] for c in cands))
    if round(10 / bin_s) <= nbins:
        out["first10"] = at(0, round(10 / bin_s))
    out["whole"] = at(0, nbins)
    return out


def fmt(med, spread):
    return f"{med:.3f} ({spread[0]:.2f}-{spread[1]:.2f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=7, help="sets (default: %(default)s)")
    ap.add_argument("--seconds", type=float, default=30, help="seconds measured from attach (default: %(default)s)")
    ap.add_argument("--bin", type=float, default=0.5, help="seconds between readings (default: %(default)s)")
    ap.add_argument("--lead", type=float, default=2, help="seconds of load before the arm starts (default: %(default)s)")
    ap.add_argument("--agent-args", default="--comm nginx", help="arguments for `tlsprof run` (default: %(default)s)")
    ap.add_argument("--baseline-args", default=None,
                    help="run the baseline with the agent and these arguments instead of without the agent")
    ap.add_argument("--no-alternative", action="store_true",
                    help="do not measure the per-call uprobe alternative (bpftrace) beside tlsprof")
    ap.add_argument("--workloads", default="handshake", help="which of %s (default: %%(default)s)" % ",".join(WORKLOADS))
    ap.add_argument("--modes", default="default,exact",
                    help="tlsprof modes to measure: default (overhead budget), exact (--exact), min-budget "
                         "(--overhead-budget 0.001%%: the default's kernel side: the probes "
                         "get a first window at attach and, at the bench's rates, no other), no-probes (--no-handshake-probes: every handshake estimated from the kernel, "
                         "the read side on) (default: %(default)s)")
    ap.add_argument("--agent-cpu", default=None,
                    help="pin the agent to these CPUs (taskset -c): separates its own work from the kernel side's")
    args = ap.parse_args()
    agent_prefix = ("taskset", "-c", args.agent_cpu) if args.agent_cpu else ()
    modes = [m for m in args.modes.split(",") if m]
    extra = {"default": "", "exact": " --exact", "no-probes": " --no-handshake-probes",
             "min-budget": " --overhead-budget 0.001%",
             "no-probes-no-sampling": " --no-handshake-probes --sample-hz 0"}
    mode_args = {m: args.agent_args + extra[m] for m in modes}

    work = Path(tempfile.mkdtemp(prefix="tlsprof-bench-"))
    www = Path(tempfile.mkdtemp(prefix="tlsprof-bench-www-"))
    www.chmod(0o755)
    (www / "4k").write_bytes(b"x" * 4096)
    (www / "4k").chmod(0o644)
    status_port = free_port()
    nginx = Nginx(work, workers=1, extra_server="ssl_protocols TLSv1.3; keepalive_requests 100000; "
                  "location /churn { keepalive_requests 5; return 200 \"hello from nginx\\n\"; } "
                  f"location = /4k {{ alias {www}/4k; }}",
                  extra_main="worker_cpu_affinity 01;" if PIN else "", plain_port=status_port)
    nginx.status_port = status_port
    (worker,) = nginx.workers()
    if not args.no_alternative and not shutil.which("bpftrace"):
        raise SystemExit("bench: bpftrace is not installed (scripts/deps.sh installs it); or use --no-alternative")
    arms = [f"tlsprof-{m}" for m in modes] + ([] if args.no_alternative else ["alternative"])
    results = {}
    # The kernel's BPF statistics cost two clock reads per program run: off for the timed
    # runs, whatever an earlier (interrupted) measurement left behind.
    stats_before = STATS.read_text().strip() if STATS.exists() else "0"
    if stats_before != "0":
        print(f"bench: kernel.bpf_stats_enabled was {stats_before}: off for the timed runs", file=sys.stderr)
        STATS.write_text("0")
    try:
        for name in args.workloads.split(","):
            flags = WORKLOADS[name]
            bins = {a: [] for a in ["without"] + arms}
            bases = {a: [] for a in arms}
            own = {m: [] for m in modes}

            def arm_of(arm):
                if arm == "without":
                    if args.baseline_args is not None:
                        return Attached(args.baseline_args, worker, agent_prefix)
                    return contextlib.nullcontext()
                if arm == "alternative":
                    return Alternative(worker)
                return Attached(mode_args[arm.removeprefix("tlsprof-")], worker, agent_prefix)

            def run(arm, i):
                b, said = timeline(nginx, worker, flags, args, arm_of(arm))
                bins[arm].append(b)
                if arm.startswith("tlsprof-"):
                    own[arm.removeprefix("tlsprof-")].append(said)
                first = per_req(b, 0, round(2 / args.bin))
                print(f"  {name} set {i + 1}: {arm:16s} {per_req(b):8.1f} us/req (first 2 s {first:7.1f}) "
                      f"{sum(r for _, r in b) / args.seconds:8.0f} req/s", flush=True)

            run("without", 0)
            for i in range(args.pairs):
                for arm in arms[i % len(arms):] + arms[:i % len(arms)]:
                    run(arm, i)
                    run("without", i)
                    bases[arm].append(statistics.mean(per_req(b) for b in bins["without"][-2:]))
            results[name] = (
                {a: statistics.median(per_req(b) for b in bins[a]) for a in bins},
                {a: statistics.median(sum(r for _, r in b) / args.seconds for b in bins[a]) for a in bins},
                {a: windows(bins[a], bases[a], args.seconds, args.bin) for a in arms} | {
                    # the statistic's noise: each run without against the runs without before
                    # and after it (one arm between each), taken as an arm
                    "without": windows(bins["without"][1:-1], [statistics.mean(per_req(b) for b in (w0, w2))
                               for w0, w2 in zip(bins["without"], bins["without"][2:])], args.seconds, args.bin)},
                {m: probe_accounting(nginx, worker, flags, args, mode_args[m]) for m in modes},
                {m: (statistics.median(c for c, _ in own[m]), max(r for _, r in own[m])) for m in modes},
            )
    finally:
        nginx.stop()
        if stats_before != "0":
            STATS.write_text(stats_before)

    print(f"\ntlsprof overhead: nginx 1 worker, ECDSA P-256, TLS 1.3; {args.pairs} rotating A-B-A sets; each run "
          f"{args.seconds:g} s from attach (read every {args.bin:g} s) after {args.lead:g} s of load; "
          f"agent: tlsprof run {args.agent_args} (modes: {', '.join(modes)})" +
          (f"; baseline: tlsprof run {args.baseline_args}" if args.baseline_args is not None else "") +
          ("" if args.no_alternative else "; alternative: bpftrace uprobe+uretprobe on SSL_do_handshake/SSL_read/SSL_write"))
    print("ratio = server CPU per request over that of the runs without around it: median of the sets (their range); "
          "'worst N s' is the N-second window, of those starting 0, 1, 2 ... s after attach, whose median is highest")
    heads = ["first 10 s"] + [f"worst {w} s" for w in WINDOWS] + ["whole run"]
    print("| workload | arm | server CPU/req | req/s | " + " | ".join(heads) + " |")
    print("|---" * (4 + len(heads)) + "|")
    for name, (cost, rate, win, _, _) in results.items():
        for a in ["without"] + arms:
            w = win[a]
            cells = [fmt(*w["first10"]) if "first10" in w else "–"]
            for length in WINDOWS:
                cells.append(f"{fmt(w[length][0], w[length][2])} at {w[length][1]:g} s" if length in w else "–")
            cells.append(fmt(*w["whole"]) if "whole" in w else "–")
            label = "without (against its neighbours: the noise)" if a == "without" else a
            print(f"| {name} | {label} | {cost[a]:.1f} µs | {rate[a]:.0f} | " + " | ".join(cells) + " |")
    print("\n| workload | mode | uprobe hits/req | BPF runs/req | BPF time/req | agent CPU | agent CPU at 2,000 req/s | agent peak RSS |")
    print("|---" * 8 + "|")
    for name, (cost, rate, win, acct, own) in results.items():
        for m in modes:
            hits, runs, ns = acct[m] if acct[m] else (float("nan"),) * 3
            cpu, rss = own[m]
            # the agent's own CPU grows with the event rate: scaled to 2,000 requests (in the
            # handshake workload: handshakes) per second
            at_2000 = cpu / max(rate[f"tlsprof-{m}"], 1) * 2000
            print(f"| {name} | {m} | {hits:.2f} | {runs:.2f} | {ns / 1000:.2f} µs | {cpu:.2%} of a core | "
                  f"{at_2000:.2%} of a core | {rss / 2**20:.1f} MiB |", flush=True)


if __name__ == "__main__":
    main()
