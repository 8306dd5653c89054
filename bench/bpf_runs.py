#!/usr/bin/env python3
"""What each of tlsprof's BPF programs costs per connection and per request, from the
kernel's own accounting (kernel.bpf_stats_enabled: run_cnt and run_time_ns per program, as
`bpftool prog show` reports them).

One nginx worker (ECDSA P-256, TLS 1.3), the agent in the default mode (or --agent-args),
and two workloads, each run after the agent settled: `handshake` (ab -c 16, a new TLS
connection per request) and `keepalive` (ab -k -c 16, every request on one of 16
connections). For each program of the agent's object: runs and BPF time per request and per
connection. The uprobes' trap cost (~10 µs a hit here, outside run_time_ns) is not in it:
bench/overhead.py measures the whole.
Usage: bench/bpf_runs.py [--requests N] [--agent-args "..."]
Turns kernel.bpf_stats_enabled on for the run (it costs a clock read per program run) and
restores it.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import Agent  # noqa: E402
from harness.clients import ab_count  # noqa: E402
from harness.servers import Nginx  # noqa: E402

STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def all_programs() -> list[dict]:
    return json.loads(subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True,
                                     check=True).stdout)


def programs(ids: set[int]) -> dict[str, tuple[int, int]]:
    """name -> (run_cnt, run_time_ns), summed over the programs `ids` (the agent's: those
    loaded after it started)."""
    got: dict[str, tuple[int, int]] = {}
    for p in all_programs():
        if p["id"] not in ids:
            continue
        name = p.get("name", "?")
        cnt, ns = got.get(name, (0, 0))
        got[name] = (cnt + p.get("run_cnt", 0), ns + p.get("run_time_ns", 0))
    return got


def ab(port: int, n: int, keepalive: bool) -> int:
    out = subprocess.run(["ab", "-q", "-s", "30", "-n", str(n), "-c", "16", *(["-k"] if keepalive else []),
                          f"https://127.0.0.1:{port}/"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert ab_count(out.stdout, "Failed requests") == 0, out.stdout
    return ab_count(out.stdout, "Complete requests")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--agent-args", default="")
    args = ap.parse_args()
    before = STATS.read_text().strip()
    STATS.write_text("1")
    work = Path(tempfile.mkdtemp(prefix="tlsprof-bpfruns-"))
    nginx = Nginx(work, workers=1)
    try:
        others = {p["id"] for p in all_programs()}
        with Agent("--pid", str(nginx.pid), *args.agent_args.split()) as agent:
            agent.wait_attached(nginx.workers())
            ids = {p["id"] for p in all_programs()} - others
            ab(nginx.port, 200, False)  # settle: first connections, the budget's first cycle
            rows = {}
            for name, keepalive in (("handshake", False), ("keepalive", True)):
                p0 = programs(ids)
                done = ab(nginx.port, args.requests, keepalive)
                p1 = programs(ids)
                conns = done if not keepalive else 16
                for prog, (cnt, ns) in p1.items():
                    c0, n0 = p0.get(prog, (0, 0))
                    rows.setdefault(prog, {})[name] = (cnt - c0, ns - n0, done, conns)
        print(f"nginx 1 worker, ECDSA P-256, TLS 1.3; agent {args.agent_args or '(default mode)'}; "
              f"{args.requests} requests per workload")
        print(f"{'program':<28} {'handshake: runs/conn':>20} {'ns/conn':>9} {'keepalive: runs/req':>20} {'ns/req':>8}")
        total = {"handshake": [0, 0], "keepalive": [0, 0]}
        for prog in sorted(rows, key=lambda p: -sum(v[1] for v in rows[p].values())):
            h = rows[prog].get("handshake", (0, 0, 1, 1))
            k = rows[prog].get("keepalive", (0, 0, 1, 1))
            if h[0] == 0 and k[0] == 0:
                continue
            total["handshake"][0] += h[0] / h[3]
            total["handshake"][1] += h[1] / h[3]
            total["keepalive"][0] += k[0] / k[2]
            total["keepalive"][1] += k[1] / k[2]
            print(f"{prog:<28} {h[0] / h[3]:>20.2f} {h[1] / h[3]:>9.0f} {k[0] / k[2]:>20.2f} {k[1] / k[2]:>8.0f}")
        print(f"{'all':<28} {total['handshake'][0]:>20.2f} {total['handshake'][1]:>9.0f} "
              f"{total['keepalive'][0]:>20.2f} {total['keepalive'][1]:>8.0f}")
    finally:
        nginx.stop()
        STATS.write_text(before)


if __name__ == "__main__":
    main()
