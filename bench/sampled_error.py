#!/usr/bin/env python3
"""Error of the default mode's sampled figure: the mean CPU per full handshake of the
handshakes timed in the overhead budget's windows, against the mean over every handshake
of the same period, as `--exact` times them.

Two agents run at once on one nginx worker (ECDSA P-256, TLS 1.3) under `ab -c 8` with a
new connection per request: one in the default mode, one with --exact. Both see the same
handshakes on the same host at the same moments, so the difference between their means is
the sampling error alone, free of this host's drift between runs (which is larger). Each
handshake that both time carries the cost of both agents' probe programs (one trap runs
both), equally. After --warmup seconds under the load, --periods periods of --seconds each:
per period, handshakes counted by each, handshakes timed, and the two means.
Usage: bench/sampled_error.py [--periods 4] [--seconds 60] [--warmup 11]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import Agent  # noqa: E402
from harness.clients import ab  # noqa: E402
from harness.metrics import value  # noqa: E402
from harness.servers import Nginx  # noqa: E402


def full(samples) -> tuple[float, float, float]:
    """(handshakes counted, full handshakes timed, their CPU seconds) of nginx's server side."""
    sel = dict(comm="nginx", role="server", resumed="false")
    return (value(samples, "tlsprof_handshakes_total", comm="nginx", role="server", result="ok"),
            value(samples, "tlsprof_handshake_cpu_seconds_count", **sel),
            value(samples, "tlsprof_handshake_cpu_seconds_sum", **sel))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--periods", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--warmup", type=float, default=11)
    args = ap.parse_args()
    nginx = Nginx(Path(tempfile.mkdtemp(prefix="tlsprof-bench-")), workers=1, extra_server="ssl_protocols TLSv1.3;")
    (worker,) = nginx.workers()
    errors = []
    try:
        with Agent("--comm", "nginx", scan_interval=2.0) as default, \
                Agent("--comm", "nginx", "--exact", scan_interval=2.0) as exact:
            default.wait_attached([worker])
            exact.wait_attached([worker])
            ab(nginx.port, seconds=args.warmup)
            for i in range(args.periods):
                before = full(default.scrape()), full(exact.scrape())
                done = ab(nginx.port, seconds=args.seconds)
                time.sleep(2.5)  # the last connections settle
                after = full(default.scrape()), full(exact.scrape())
                (dn, dt, dc), (en, et, ec) = ((a - b for a, b in zip(x, y)) for x, y in zip(after, before))
                dm, em = dc / dt, ec / et
                errors.append(dm / em - 1)
                print(f"  period {i + 1}: ab {done} requests; handshakes counted: default {dn:.0f}, exact {en:.0f}; "
                      f"timed: default {dt:.0f} ({dt / dn:.1%}), exact {et:.0f}; mean CPU: default {dm * 1e6:.1f} µs, "
                      f"exact {em * 1e6:.1f} µs: {errors[-1]:+.1%}", flush=True)
    finally:
        nginx.stop()
    print(f"sampled mean CPU per full handshake against every handshake's, {args.periods} periods of "
          f"{args.seconds:g} s: errors {', '.join(f'{e:+.1%}' for e in errors)}; "
          f"median |error| {statistics.median(abs(e) for e in errors):.1%}, largest {max(abs(e) for e in errors):.1%}")


if __name__ == "__main__":
    main()
