#!/usr/bin/env python3
"""The spread of the accuracy figures the tests print but bound only loosely: the kernel
estimate against the probes, the report's estimated savings against what the change
really saved, the CPU split against a server that times its own TLS calls. On a shared
2-core VM one run of each moves by 10-35%, so a test asserts an ordering and a gross error
and this benchmark runs the same tests --runs times and reports each figure's minimum,
median and maximum. Every figure is a ratio or a difference against a truth measured in the
same run (tests/harness/figures.py records them; the session's summary prints them, so
every `make test` log is one more sample: --logs reads such logs instead of running).
Usage (root): bench/accuracy.py [--runs 3] [-k EXPR] [--out FILE] [--logs LOG...]
"""
import argparse
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = [
    "tests/test_estimate.py",
    "tests/test_report.py::test_group_and_certificate",
    "tests/test_report.py::test_record_cipher",
    "tests/test_cpu.py",
    "tests/test_cost.py",
    "tests/test_nginx.py::test_handshake_cpu_is_consistent_with_the_servers_own_accounting",
    "tests/test_stacks.py::test_go_server_concurrent_handshakes_share_of_its_cpu",
    "tests/test_negotiated.py::test_rsa_p384_costs_what_its_primitives_cost",
    "tests/test_top.py",
]


def figures_in(text: str):
    """(name, value) of every `figure:` line of a test log."""
    return [(n, float(v)) for n, v in re.findall(r"^figure: (\S+) (\S+)", text, re.M)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-k", default=None, help="pytest -k expression, to run a part")
    ap.add_argument("--out", default=None, help="also write the table here")
    ap.add_argument("--logs", nargs="*", default=None, help="read the figures from these test logs, run nothing")
    a = ap.parse_args()
    seen = defaultdict(list)
    failed = 0
    for log in a.logs or []:
        for name, v in figures_in(Path(log).read_text(errors="replace")):
            seen[name].append(v)
    for i in range(0 if a.logs is not None else a.runs):
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
        if a.k:
            cmd += ["-k", a.k]
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
        failed += r.returncode != 0
        for name, v in figures_in(r.stdout):
            seen[name].append(v)
        print(f"run {i + 1}/{a.runs}: {'passed' if r.returncode == 0 else 'FAILED'}", file=sys.stderr)
    lines = [f"{'figure':58} {'runs':>4} {'min':>8} {'median':>8} {'max':>8}"]
    for name in sorted(seen):
        v = seen[name]
        lines.append(f"{name:58} {len(v):>4} {min(v):>8.3f} {statistics.median(v):>8.3f} {max(v):>8.3f}")
    if a.logs is None:
        lines.append(f"test runs that failed: {failed} of {a.runs}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
