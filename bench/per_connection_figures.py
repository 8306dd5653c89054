#!/usr/bin/env python3
"""One CPU figure per handshake of a process started per connection (issue 64): PostgreSQL
under `pgbench -C` (a backend forked per connection, which often exits while its probes
are being attached), traced by --comm in the default mode, for SECONDS (default 300) with
CLIENTS pgbench loops at once (default 2), each of batches of 50 connections.

Prints the connections pgbench made (its own count), the handshakes tlsprof counted ok, and
those with a CPU figure. Exact when the three are equal; exit status 1 otherwise. Before
the fix of this bench's commit, 1 or 2 handshakes in each 300 s run (21,400 to 26,200
handshakes) were given two figures.
Usage: bench/per_connection_figures.py [SECONDS [CLIENTS]] [-- agent arguments...]
"""
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness import services  # noqa: E402
from harness.agent import Agent  # noqa: E402
from harness.metrics import since, value  # noqa: E402
from harness.procs import wait_for  # noqa: E402

BATCH = 50  # connections per pgbench run (its setup connection included)


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    seconds = float(args[0]) if args else 300.0
    clients = int(args[1]) if len(args) > 1 else 2
    work = Path(tempfile.mkdtemp(prefix="tlsprof-pcf-"))
    pg = services.Postgres(work)
    try:
        with Agent("--comm", "postgres", *extra) as agent:
            wait_for(lambda: "postgres" in agent.ready().values(), 30, "tlsprof ready")
            services.pgbench_connections(pg.port, 5)  # shows tlsprof the port
            agent.settle()
            time.sleep(3)
            agent.settle()
            base = agent.scrape()
            made, failed = [0], [0]
            lock = threading.Lock()
            until = time.monotonic() + seconds

            def loop():
                while time.monotonic() < until:
                    r = services.pgbench_connections(pg.port, BATCH, timeout=120)
                    with lock:
                        made[0] += r["ok"]
                        failed[0] += r["failed"]

            threads = [threading.Thread(target=loop) for _ in range(clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

            def counted():
                m = since(agent.scrape(), base)
                return (int(value(m, "tlsprof_handshakes_total", comm="postgres", role="server", result="ok")),
                        int(value(m, "tlsprof_handshake_cpu_seconds_count", comm="postgres", role="server")))
            # a backend's figure comes up to tracker::WAIT (2 s) after its capture ends
            deadline = time.monotonic() + 20
            got = counted()
            while time.monotonic() < deadline and (got[0] < made[0] or got[1] < got[0]):
                time.sleep(0.5)
                got = counted()
            agent.settle()
            time.sleep(3)
            agent.settle()
            ok, figures = counted()
            exact = made[0] == ok == figures
            print(f"{seconds:.0f} s, {clients} pgbench loops: made {made[0]} (failed {failed[0]}), "
                  f"counted ok {ok}, with a CPU figure {figures}: {'exact' if exact else 'NOT EXACT'}")
            return 0 if exact else 1
    finally:
        pg.stop()


if __name__ == "__main__":
    sys.exit(main())
