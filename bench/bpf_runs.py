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
`--judged` adds a third: `judged` (16 keep-alive connections opened before the agent came,
then every request on them): no new handshake tells whether nginx's probes see its
handshakes, so the kernel estimate beside them stays on, and the read side looks only at
reads within a connection's first bytes (bpf/estimate.bpf.h EST_GATE) for as long.
Usage: bench/bpf_runs.py [--requests N] [--agent-args "..."] [--judged]
Turns kernel.bpf_stats_enabled on for the run (it costs a clock read per program run) and
restores it.
"""
import argparse
import json
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import time
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


class OpenBefore:
    """`conns` keep-alive TLS connections opened now, to carry requests later."""

    def __init__(self, port: int, conns: int):
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        self.socks = [ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30))
                      for _ in range(conns)]
        self.get(1)

    def get(self, per_conn: int) -> int:
        """per_conn requests on each connection, in turn; how many were answered."""
        done = 0
        for _ in range(per_conn):
            for s in self.socks:
                s.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
                buf = b""
                while b"\r\n\r\n" not in buf:
                    buf += s.recv(65536)
                head, body = buf.split(b"\r\n\r\n", 1)
                length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                while len(body) < length:
                    body += s.recv(65536)
                done += 1
        return done

    def close(self):
        for s in self.socks:
            s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--agent-args", default="")
    ap.add_argument("--judged", action="store_true", help="add the `judged` workload (above)")
    args = ap.parse_args()
    before = STATS.read_text().strip()
    STATS.write_text("1")
    work = Path(tempfile.mkdtemp(prefix="tlsprof-bpfruns-"))
    nginx = Nginx(work, workers=1)
    try:
        others = {p["id"] for p in all_programs()}
        before_agent = OpenBefore(nginx.port, 16) if args.judged else None
        with Agent("--pid", str(nginx.pid), *args.agent_args.split()) as agent:
            agent.wait_attached(nginx.workers())
            ids = {p["id"] for p in all_programs()} - others
            rows = {}
            if before_agent:
                time.sleep(5)  # longer than any time-bound estimate window
                p0 = programs(ids)
                done = before_agent.get(args.requests // 16)
                p1 = programs(ids)
                before_agent.close()
                for prog, (cnt, ns) in p1.items():
                    c0, n0 = p0.get(prog, (0, 0))
                    rows.setdefault(prog, {})["judged"] = (cnt - c0, ns - n0, done, 16)
            ab(nginx.port, 200, False)  # settle: first connections, the budget's first cycle
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
        judged = f" {'judged: runs/req':>17} {'ns/req':>8}" if args.judged else ""
        print(f"{'program':<28} {'handshake: runs/conn':>20} {'ns/conn':>9} {'keepalive: runs/req':>20} {'ns/req':>8}"
              + judged)
        total = {"handshake": [0, 0], "keepalive": [0, 0], "judged": [0, 0]}
        for prog in sorted(rows, key=lambda p: -sum(v[1] for v in rows[p].values())):
            h = rows[prog].get("handshake", (0, 0, 1, 1))
            k = rows[prog].get("keepalive", (0, 0, 1, 1))
            j = rows[prog].get("judged", (0, 0, 1, 1))
            if h[0] == 0 and k[0] == 0 and j[0] == 0:
                continue
            total["handshake"][0] += h[0] / h[3]
            total["handshake"][1] += h[1] / h[3]
            for w, v in (("keepalive", k), ("judged", j)):
                total[w][0] += v[0] / v[2]
                total[w][1] += v[1] / v[2]
            print(f"{prog:<28} {h[0] / h[3]:>20.2f} {h[1] / h[3]:>9.0f} {k[0] / k[2]:>20.2f} {k[1] / k[2]:>8.0f}"
                  + (f" {j[0] / j[2]:>17.2f} {j[1] / j[2]:>8.0f}" if args.judged else ""))
        print(f"{'all':<28} {total['handshake'][0]:>20.2f} {total['handshake'][1]:>9.0f} "
              f"{total['keepalive'][0]:>20.2f} {total['keepalive'][1]:>8.0f}"
              + (f" {total['judged'][0]:>17.2f} {total['judged'][1]:>8.0f}" if args.judged else ""))
    finally:
        nginx.stop()
        STATS.write_text(before)


if __name__ == "__main__":
    main()
