#!/usr/bin/env python3
"""What tlsprof's kernel-side code costs inside the server, window by window, from the
server's own call stacks (perf): the direct measure that bench/overhead.py's A/B ratio
cannot resolve on a shared VM, where runs without tlsprof differ by ±20% from one 30 s run
to the next.

One nginx worker (ECDSA P-256, TLS 1.3) pinned to CPU 0, ab on CPU 1 with a new TLS
connection per request (`--workload keepalive`: ab -k; its connections are opened again once
tlsprof is attached: tlsprof follows the connections accepted after it starts). perf samples every CPU at --hz with
kernel call stacks (`perf record -a -g -k CLOCK_MONOTONIC`) from --lead s before tlsprof
attaches until --seconds after. Each sample of the worker is classed by its kernel stack:
  probes      - a uprobe or uretprobe hit: the trap (asm_exc_int3, the uretprobe trampoline)
                and the handshake programs it runs
  tracepoints - tlsprof's programs on kernel tracepoints and packets (bpf_prog_*, the kernel's
                bpf_prog_run_array_cg that runs a cgroup's, bpf_trace_run*)
  rest        - the server's own work
Time 0 is the moment `tlsprof run` is started (what a user calls attaching: the agent loads
its programs, calibrates, and attaches within the first second; its ready file lists the
worker after its first scan). Per window length (2, 4, 10,
30 s, starting 0, 1, 2 ... s after attach), the share of the worker's samples in tlsprof's
code: the worst window, the first 10 s and the whole run, each the median over --runs runs
(and their range), and in the --lead s before it starts (a control: it must read 0).
Not in it: what tlsprof costs the server indirectly (caches its programs evict), and the
agent's own process (bench/overhead.py reports its CPU).
The floor arms (--modes floor-empty,floor-count) attach no tlsprof but one program of
bench/floor/floor.bpf.c on the send hook tlsprof counts requests at: one that returns at
once, and one that keeps a counter per socket; what any kernel-side request count costs the
worker at the least, on this host, measured the same way. floor-hooks attaches a program
that returns at once on each kernel hook the default mode runs a program at on a new
connection (send, read, socket state, scheduler switch, fork, exec, exit, resets): the
connection path's floor.
Usage: bench/attributed.py [--runs N] [--seconds S] [--modes default,exact,min-budget,floor-empty,floor-count,floor-hooks]
Needs perf (Debian: linux-perf).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import CLIENT_PIN, PIN, WORKLOADS, Attached  # noqa: E402
from harness.procs import cpu_ns  # noqa: E402
from harness.servers import Nginx  # noqa: E402

MODES = {"default": "--comm nginx", "no-hellos": "--comm nginx --no-client-hellos", "exact": "--comm nginx --exact",
         "min-budget": "--comm nginx --overhead-budget 0.001%"}
# Arms that are not tlsprof (bench/floor/floor.bpf.c): one program on the send hook tlsprof
# counts requests at, that returns at once or keeps a counter per socket: what any kernel-side
# request count costs the server at the least.
FLOORS = {"floor-empty": "floor_empty", "floor-count": "floor_count", "floor-hooks": "floor_hook_*"}
FLOOR_DIR = Path(__file__).resolve().parent / "floor"
WINDOWS = (2, 4, 10, 30)
# Probe hits below which a run's trap cost against its charge is not said: at 2999 Hz a
# worker's samples in its traps are then a handful or none.
MIN_HITS = 1000
PROBE = re.compile(r"asm_exc_int3|uprobe|uretprobe")
TRACEPOINT = re.compile(r"bpf_prog_|bpf_trace_run")
PROGRAM = re.compile(r"bpf_prog_[0-9a-f]+_(\w+)")


def samples(data: Path, worker: int) -> list[tuple[float, str, str, str]]:
    """(CLOCK_MONOTONIC time, class, program, leaf) of every sample of the worker: the program
    is the tlsprof program on its stack (the innermost), `trap` for a probe hit's trap outside
    its program, `-` for the server's own work; the leaf is the function the sample was in (a
    program's own code, or a kernel helper it called)."""
    out = subprocess.run(["perf", "script", "-i", str(data), "--tid", str(worker), "-F", "tid,time,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    got = []
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines:
            continue
        head = lines[0].split()
        t = float(head[1].rstrip(":"))
        stack = " ".join(lines[1:])
        kind = "probes" if PROBE.search(stack) else "tracepoints" if TRACEPOINT.search(stack) else "rest"
        prog = PROGRAM.search(stack)
        name = prog.group(1) if prog else "trap" if kind == "probes" else "(dispatch)" if kind == "tracepoints" else "-"
        leaf = lines[1].split()[1] if len(lines) > 1 and len(lines[1].split()) > 1 else "?"
        got.append((t, kind, name, PROGRAM.sub(r"\1", leaf)))
    return got


def shares(got, t0: float, start: float, length: float) -> tuple[float, float, float]:
    """(probes, tracepoints, samples) in [t0 + start, t0 + start + length)."""
    part = [k for t, k, _, _ in got if t0 + start <= t < t0 + start + length]
    n = max(1, len(part))
    return part.count("probes") / n, part.count("tracepoints") / n, len(part)


class Floor:
    """A floor arm's program (FLOORS), attached by bench/floor/floor.c from entry to exit;
    both are built into `work` on first use (clang, libbpf-dev)."""

    def __init__(self, program: str, work: Path):
        self.program, self.obj, self.loader = program, work / "floor.bpf.o", work / "floor"
        if not self.loader.exists():
            arch = "arm64" if os.uname().machine == "aarch64" else "x86"
            bpf = FLOOR_DIR.parent.parent / "bpf"
            subprocess.run(["clang", "-g", "-O2", "-target", "bpfel", "-Wall", "-Werror", f"-D__TARGET_ARCH_{arch}",
                            "-I", str(bpf), "-c", str(FLOOR_DIR / "floor.bpf.c"), "-o", str(self.obj)], check=True)
            subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-I", str(FLOOR_DIR.parent.parent / "scripts"), "-o",
                            str(self.loader), str(FLOOR_DIR / "floor.c"), "-lbpf"], check=True)

    def __enter__(self):
        self.proc = subprocess.Popen([str(self.loader), str(self.obj), self.program], stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "attached":
            self.proc.wait(timeout=30)
            raise SystemExit(f"bench: the floor program {self.program} did not attach (its line above says why)")
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def one_run(nginx, worker, mode, args, work: Path):
    flags, path = WORKLOADS[args.workload]
    floor = mode in FLOORS
    arm = Floor(FLOORS[mode], work) if floor else Attached(MODES[mode], worker)  # (a floor's build before any load)

    def load():
        return subprocess.Popen([*CLIENT_PIN, "ab", "-q", "-t", str(2 * args.lead + args.seconds + 30), "-n",
                                 "10000000", "-s", "30", *flags, f"https://127.0.0.1:{nginx.port}{path}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ab = load()
    data = work / "perf.data"
    try:
        time.sleep(args.lead)
        perf = subprocess.Popen(["perf", "record", "-a", "-g", "-k", "CLOCK_MONOTONIC", "-F", str(args.hz),
                                 "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(args.lead)
        t0 = time.monotonic()
        with arm as att:
            ready = time.monotonic() - t0
            if "-k" in flags:
                # keep-alive: the connections opened again now that tlsprof is attached, as a
                # server's are after tlsprof starts; those opened before are not followed
                # (their requests not counted), which would read as no cost at all
                ab.terminate()
                ab.wait(timeout=30)
                ab = load()
            cpu0 = cpu_ns(worker)
            time.sleep(max(0.0, t0 + args.seconds - time.monotonic()))
            worker_cpu = (cpu_ns(worker) - cpu0) / 1e9
            if not floor:
                # what the overhead budget charged for the worker's probes, against its CPU
                charged = att.agent.value("tlsprof_probe_cpu_seconds_total", comm="nginx")
                cal = {k: att.agent.value("tlsprof_probe_hit_cost_seconds", probe=k)
                       for k in ("uprobe_emulated", "uretprobe")}
                hits = att.agent.value("tlsprof_probe_hits_total", comm="nginx")
                programs = att.agent.value("tlsprof_probe_program_seconds_total", comm="nginx")
        perf.send_signal(2)
        perf.wait(timeout=60)
    finally:
        ab.terminate()
        ab.wait(timeout=30)
    got = samples(data, worker)
    data.unlink()
    if floor:
        where = "on each hook of the connection path" if mode == "floor-hooks" else "alone on tcp_sendmsg_locked"
        return got, t0, ready, 0.0, f"not tlsprof: {FLOORS[mode]} {where}"
    # what a hit cost the worker (perf: the probes' share of its samples since attached,
    # of its CPU), against what the calibration said (entry, return) and the programs
    paid = shares(got, t0, ready, args.seconds - ready)[0] * worker_cpu
    # (with few hits, perf has too few samples in them to say: a keep-alive run's 80 hits
    # make a sample or none, and the traps' share less the programs' own time goes negative)
    if hits < MIN_HITS:
        traps = f"too few hits ({hits:.0f}) to say what the traps took against their charge"
    elif paid <= programs or charged <= programs:
        traps = "no time in the traps to say what they took against their charge"
    else:
        traps = f"the traps took {(paid - programs) / (charged - programs):.2f} x what was charged for them"
    note = (f"a hit cost the worker {paid / max(hits, 1) * 1e6:.2f} us (perf), its program "
            f"{programs / max(hits, 1) * 1e6:.2f} us; calibrated {cal['uprobe_emulated'] * 1e6:.2f} us an entry and "
            f"{cal['uretprobe'] * 1e6:.2f} us a return; {traps}; "
            f"{hits:.0f} hits")
    return got, t0, ready, charged / max(worker_cpu, 1e-9), note


def print_timeline(got, t0, args):
    """Each second from --lead s before start: tlsprof's share of the worker's samples and
    the programs that made it."""
    for sec in range(-int(args.lead), int(args.seconds)):
        part = [(k, n) for t, k, n, _ in got if t0 + sec <= t < t0 + sec + 1]
        ours = [n for k, n in part if k != "rest"]
        top = sorted({n: ours.count(n) for n in ours}.items(), key=lambda x: -x[1])[:4]
        print(f"    {sec:>3} s {100 * len(ours) / max(1, len(part)):5.2f}% of {len(part):5} "
              + " ".join(f"{n}:{c}" for n, c in top))


def label(mode: str) -> str:
    return mode if mode in FLOORS else f"tlsprof-{mode}"


def fmt(values):
    vals = [100 * v for v in values]
    return f"{statistics.median(vals):.2f}% ({min(vals):.2f}-{max(vals):.2f})"


def own_cgroup() -> Path:
    """A new cgroup (v2), for nginx's processes to start in: where a service runs in
    production (systemd's nginx.service, a container), its listening sockets are made in
    its cgroup, so the programs tlsprof attaches per cgroup (the ClientHello capture's) see
    that service's connections and not its clients'. (A connection belongs to its
    listener's cgroup: nginx moved there after it listened would leave them in this one.)"""
    mounts = open("/proc/self/mountinfo").read().splitlines()
    root = next((l.split(" - ")[0].split()[4] for l in mounts if l.split(" - ")[1].startswith("cgroup2 ")), None)
    if root is None:
        raise SystemExit("bench: no cgroup v2 hierarchy is mounted (use --cgroup shared)")
    cg = Path(root) / f"tlsprof-bench-{os.getpid()}"
    cg.mkdir()
    return cg


def started_in(cgroup: Path | None, start):
    """start(), with this process in `cgroup` meanwhile (what it starts stays there)."""
    if cgroup is None:
        return start()
    own = open("/proc/self/cgroup").read().split("0::", 1)[1].split("\n", 1)[0]
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    try:
        return start()
    finally:
        (cgroup.parent / own.lstrip("/") / "cgroup.procs").write_text(str(os.getpid()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--lead", type=float, default=2, help="seconds of load before perf, and of perf before attach")
    ap.add_argument("--hz", type=int, default=2999)
    ap.add_argument("--timeline", action="store_true",
                    help="also print, per run, each second's share and its programs")
    ap.add_argument("--modes", default="default,exact,min-budget")
    ap.add_argument("--leaves", action="store_true",
                    help="also print, per program, the functions its samples were in (its own code, the helpers it calls)")
    ap.add_argument("--workload", default="handshake", choices=["handshake", "keepalive", "keepalive-4k"])
    ap.add_argument("--cgroup", default="own", choices=["own", "shared"],
                    help="own: nginx in a cgroup (v2) of its own, as systemd runs a service or a container "
                    "runtime a container, its clients outside it; shared: nginx in ab's cgroup")
    args = ap.parse_args()
    unknown = [m for m in args.modes.split(",") if m not in MODES and m not in FLOORS]
    if unknown:
        raise SystemExit(f"bench: no mode {', '.join(unknown)} (modes: {', '.join([*MODES, *FLOORS])})")
    if not shutil.which("perf"):
        raise SystemExit("bench: perf is not installed (Debian: apt-get install linux-perf)")
    work = Path(tempfile.mkdtemp(prefix="tlsprof-attributed-"))
    www = work / "www"
    www.mkdir()
    (www / "4k").write_bytes(b"x" * 4096)
    (www / "4k").chmod(0o644)
    work.chmod(0o755)
    cgroup = own_cgroup() if args.cgroup == "own" else None
    nginx = started_in(cgroup, lambda: Nginx(
        work, workers=1, extra_server="ssl_protocols TLSv1.3; keepalive_requests 100000; "
        f"location = /4k {{ alias {www}/4k; }}", extra_main="worker_cpu_affinity 01;" if PIN else ""))
    (worker,) = nginx.workers()
    modes = args.modes.split(",")
    rows = {m: [] for m in modes}
    try:
        for r in range(args.runs):
            for mode in modes:
                got, t0, ready, charged, note = one_run(nginx, worker, mode, args, work)
                rows[mode].append((got, t0))
                p, tp, n = shares(got, t0, 0, args.seconds)
                pre = shares(got, t0, -args.lead, args.lead)
                if args.timeline:
                    print_timeline(got, t0, args)
                after = shares(got, t0, ready, args.seconds - ready)
                print(f"  run {r + 1} {mode:<11} probes since attached {100 * after[0]:.2f}% of the worker's samples, "
                      f"the budget charged {100 * charged:.2f}% of its CPU; {note}")
                print(f"  run {r + 1} {mode:<11} whole: probes {100 * p:.2f}% tracepoints {100 * tp:.2f}% "
                      f"of {n} samples; before start {100 * (pre[0] + pre[1]):.2f}% of {pre[2]}; attached after {ready:.2f} s",
                      flush=True)
    finally:
        nginx.stop()
        if cgroup:
            time.sleep(0.5)
            cgroup.rmdir()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntlsprof's code in the nginx worker (perf -F {args.hz}, kernel stacks), {args.workload}: "
          f"share of the worker's samples, median of {args.runs} runs (range); 'worst N s' is the N-second window, "
          "of those starting 0, 1, 2 ... s after `tlsprof run` starts, whose median is highest")
    print(f"| arm | part | before start | first 10 s | {' | '.join(f'worst {w} s' for w in WINDOWS)} | whole run |")
    print("|---|---|---|---|" + "---|" * len(WINDOWS) + "---|")
    for mode in modes:
        runs = rows[mode]
        for part, pick in (("probes + tracepoints", lambda s: s[0] + s[1]), ("probes", lambda s: s[0]),
                           ("tracepoints", lambda s: s[1])):
            before = [pick(shares(g, t0, -args.lead, args.lead)) for g, t0 in runs]
            first = [pick(shares(g, t0, 0, 10)) for g, t0 in runs]
            whole = [pick(shares(g, t0, 0, args.seconds)) for g, t0 in runs]
            worst = []
            for w in WINDOWS:
                if w > args.seconds:
                    worst.append("")
                    continue
                best = None
                for start in range(0, int(args.seconds - w) + 1):
                    vals = [pick(shares(g, t0, start, w)) for g, t0 in runs]
                    if best is None or statistics.median(vals) > statistics.median(best[1]):
                        best = (start, vals)
                worst.append(f"{fmt(best[1])} at {best[0]} s")
            print(f"| {label(mode)} | {part} | {fmt(before)} | {fmt(first)} | {' | '.join(worst)} | {fmt(whole)} |")
    print("\nper program (the innermost tlsprof program on the sample's stack; 'trap': a probe's trap outside its "
          "program, '(dispatch)': the kernel's code that runs the programs): share of the worker's samples over the "
          "whole run, median of the runs")
    for mode in modes:
        runs = rows[mode]
        names = sorted({n for g, t0 in runs for t, k, n, _ in g if k != "rest"})
        per = []
        for name in names:
            vals = []
            for g, t0 in runs:
                part = [n for t, k, n, _ in g if t0 <= t < t0 + args.seconds]
                vals.append(part.count(name) / max(1, len(part)))
            per.append((statistics.median(vals), name))
        print(f"  {label(mode)}: " + ", ".join(f"{n} {100 * v:.2f}%" for v, n in sorted(per, reverse=True)))
    if args.leaves:
        print("\nper program, the functions its samples were in (the program's own code under its name, or a kernel "
              "function it called): share of the worker's samples, all runs together")
        for mode in modes:
            runs = rows[mode]
            total = sum(1 for g, t0 in runs for t, *_ in g if t0 <= t < t0 + args.seconds)
            leaves = {}
            for g, t0 in runs:
                for t, k, n, leaf in g:
                    if k != "rest" and t0 <= t < t0 + args.seconds:
                        leaves.setdefault(n, {}).setdefault(leaf, 0)
                        leaves[n][leaf] += 1
            for n, by in sorted(leaves.items(), key=lambda x: -sum(x[1].values())):
                top = sorted(by.items(), key=lambda x: -x[1])[:8]
                print(f"  {label(mode)} {n} {100 * sum(by.values()) / max(1, total):.2f}%: "
                      + ", ".join(f"{leaf} {100 * c / max(1, total):.2f}%" for leaf, c in top))


if __name__ == "__main__":
    main()
