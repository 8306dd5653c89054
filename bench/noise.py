#!/usr/bin/env python3
"""How much two windows of one unchanged server differ, and what `tlsprof compare` calls of
it: the noise a before/after comparison must stand on (docs/report.md, "Before and after").

One nginx worker (ECDSA P-256, TLS 1.3), the same N new connections from Python clients in
`tlsprof report` windows one after the other, --pairs times two (a, b) or, with --runs, three
(a, a2, b). For each: the server's own schedstat per client handshake in a and b (the truth)
and its change, the figures `tlsprof compare a b` called changed at its default
--min-change, and with --runs those `tlsprof compare a b --also-before a2` called (the runs'
spread in the intervals). With --pin, the nginx worker runs on CPU 0 and the clients on CPU 1.
With --busy N, N processes copy 64 MiB buffers beside it all along (a host with other work;
each bounded to an hour). Each pair is also compared without the windows' parts (the
`batches` of each process taken out of both reports: the intervals of the samples alone,
as before the parts), in the column "called without parts".

    python3 bench/noise.py --pairs 20 [--connections 300] [--pin] [--runs] [--busy 2]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from harness.agent import TLSPROF  # noqa: E402
from harness.busy import Copiers  # noqa: E402
from harness.clients import https_connections  # noqa: E402
from harness.report import Report, timed_report  # noqa: E402
from harness.servers import Nginx  # noqa: E402


def without_parts(r: Report, out: Path) -> Path:
    """The report's JSON with each process's parts taken out."""
    doc = json.loads(r.json_path.read_text())
    for p in doc["processes"]:
        p.pop("batches", None)
    out.write_text(json.dumps(doc))
    return out


def window(srv: Nginx, n: int) -> tuple[Report, float]:
    r = timed_report(srv, lambda s: https_connections(s.port, n, concurrency=2))
    return r, r.truth_cpu / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--runs", action="store_true")
    ap.add_argument("--busy", type=int, default=0)
    args = ap.parse_args()
    # SIGTERM (timeout, kill) ends it through its `finally`: its nginx and copiers stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    copiers = Copiers(args.busy, seconds=3600)
    if args.pin:
        os.sched_setaffinity(0, {1})
    work = Path(tempfile.mkdtemp(prefix="tlsprof-noise-"))
    srv = Nginx(work / "nginx", extra_main="worker_cpu_affinity 01;" if args.pin else "")
    changes, called_pairs, called_runs, called_flat = [], 0, 0, 0

    def called(a: Report | Path, b: Report | Path, out: Path, *more: str) -> tuple[list[str], dict]:
        paths = [str(x.json_path if isinstance(x, Report) else x) for x in (a, b)]
        subprocess.run([str(TLSPROF), "compare", *paths, "--json", str(out),
                        "-o", "/dev/null", *more], check=True, capture_output=True)
        figs = [f for p in json.loads(out.read_text())["processes"] for f in p["figures"]]
        proc = next(f for f in figs if f["name"] == "process_cpu_per_handshake_seconds")
        return [f"{f['name']}{'@' + f['port'] if f['port'] else ''}:{f['verdict']}" for f in figs
                if f["verdict"] in ("up", "down")], proc

    print(f"# {args.pairs} {'triples' if args.runs else 'pairs'} of {args.connections} new connections, "
          f"pin={args.pin}, busy={args.busy}")
    print("pair  truth_a_ms  truth_b_ms  truth_change  tlsprof_process_change  parts  called (a b)"
          + "  |  called without parts" + ("  |  called (a b --also-before a2)" if args.runs else ""))
    try:
        for i in range(args.pairs):
            a, ta = window(srv, args.connections)
            if args.runs:
                a2, _ = window(srv, args.connections)
            b, tb = window(srv, args.connections)
            one, proc = called(a, b, work / f"compare-{i}.json")
            change = tb / ta - 1
            changes.append(change)
            called_pairs += bool(one)
            flat, _ = called(without_parts(a, work / f"a-{i}.json"), without_parts(b, work / f"b-{i}.json"),
                             work / f"compare-flat-{i}.json")
            called_flat += bool(flat)
            parts = [len(p.get("batches", [])) for r in (a, b) for p in json.loads(r.json_path.read_text())["processes"]]
            line = f"{i:4}  {ta * 1e3:10.4f}  {tb * 1e3:10.4f}  {change:+12.3f}  {proc['change']:+22.3f}  " \
                   f"{'/'.join(map(str, parts)):>5}  {' '.join(one) or '-'}  |  {' '.join(flat) or '-'}"
            if args.runs:
                two, _ = called(a, b, work / f"compare-runs-{i}.json", "--also-before", str(a2.json_path))
                called_runs += bool(two)
                line += f"  |  {' '.join(two) or '-'}"
            print(line, flush=True)
    finally:
        srv.stop()
        copiers.stop()
    mags = sorted(abs(x) for x in changes)
    print(f"# truth |change|: under 5% in {sum(m < 0.05 for m in mags)}, 5-10% in "
          f"{sum(0.05 <= m < 0.10 for m in mags)}, 10% or more in {sum(m >= 0.10 for m in mags)} "
          f"(largest {mags[-1]:.3f}); pairs with a figure called changed: {called_pairs} of {len(mags)}; "
          f"without the parts: {called_flat} of {len(mags)}"
          + (f"; with the second run before: {called_runs} of {len(mags)}" if args.runs else ""))


if __name__ == "__main__":
    main()
