#!/usr/bin/env python3
"""One CPU figure per handshake of a process started per connection (issue 64), traced by
--comm in the default mode (or as the agent arguments after -- say), for SECONDS (default
300) with CLIENTS client loops at once (default 2), each of batches of 50 connections:

- postgres (the default): PostgreSQL under `pgbench -C`, a backend forked per connection,
  which often exits while its probes are being attached;
- smtpd: Postfix with max_use = 1, so that the master starts an smtpd (fork and exec) for
  every SMTP connection, each upgraded by STARTTLS (Python's smtplib); its TLS library is
  still being mapped by the dynamic loader when the agent first reads its memory map.

Prints the connections the client made (its own count), the handshakes tlsprof counted ok,
and those with a CPU figure. Exact when the three are equal; exit status 1 otherwise. Before
the fix of this bench's commit, 1 or 2 PostgreSQL handshakes in each 300 s run (21,400 to
26,200 handshakes) were given two figures.
Usage: bench/per_connection_figures.py [--server postgres|smtpd] [SECONDS [CLIENTS]] [-- agent arguments...]
"""
import argparse
import os
import shutil
import signal
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

BATCH = 50  # connections per client run (pgbench's setup connection included)


def server(name: str, work: Path):
    """The server, its comm and a function making n connections (the client's counts)."""
    if name == "postgres":
        pg = services.Postgres(work)
        return pg, "postgres", lambda n: services.pgbench_connections(pg.port, n, timeout=120)
    postfix = services.Postfix(work)
    try:
        postfix.postconf("max_use=1")
        os.kill(postfix.pid, signal.SIGHUP)  # the master reads main.cf again
    except BaseException:
        postfix.stop()
        raise
    return postfix, "smtpd", lambda n: services.smtp_starttls_connections(postfix.port, n, timeout=120)


def main():
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=("postgres", "smtpd"), default="postgres")
    ap.add_argument("seconds", nargs="?", type=float, default=300.0)
    ap.add_argument("clients", nargs="?", type=int, default=2)
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    work = Path(tempfile.mkdtemp(prefix="tlsprof-pcf-"))
    srv, comm, connect = server(args.server, work)
    try:
        with Agent("--comm", comm, *extra) as agent:
            # a postmaster is there from the start; an smtpd only while it serves a connection
            wait_for(lambda: agent.ready_path.exists(), 30, "tlsprof ready")
            connect(5)  # shows tlsprof the port
            agent.settle()
            time.sleep(3)
            agent.settle()
            base = agent.scrape()
            made, failed = [0], [0]
            lock = threading.Lock()
            until = time.monotonic() + args.seconds

            def loop():
                while time.monotonic() < until:
                    r = connect(BATCH)
                    with lock:
                        made[0] += r["ok"]
                        failed[0] += r["failed"]

            threads = [threading.Thread(target=loop) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()

            def counted():
                m = since(agent.scrape(), base)
                return (int(value(m, "tlsprof_handshakes_total", comm=comm, role="server", result="ok")),
                        int(value(m, "tlsprof_handshake_cpu_seconds_count", comm=comm, role="server")))
            # a process's figure comes up to tracker::WAIT (2 s) after its capture ends
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
            print(f"{comm}, {args.seconds:.0f} s, {args.clients} client loops: made {made[0]} "
                  f"(failed {failed[0]}), counted ok {ok}, with a CPU figure {figures}: "
                  f"{'exact' if exact else 'NOT EXACT'}")
            if not exact:  # its log kept, to find why
                kept = Path(tempfile.gettempdir()) / f"tlsprof-pcf-{comm}.log"
                shutil.copy(agent.log_path, kept)
                print(f"agent log: {kept}")
            return 0 if exact else 1
    finally:
        srv.stop()


if __name__ == "__main__":
    sys.exit(main())
