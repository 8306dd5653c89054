#!/usr/bin/env python3
"""Every kind of server at once, for an hour, with faults while it runs (issue 64).

Servers on loopback, each with its own real client, whose count of handshakes made is the
truth: nginx (2 workers, HTTP/2, its OpenSSL loaded from a copy of the library that the
soak replaces on disk), Postfix (SMTP STARTTLS), PostgreSQL (`pgbench -C`, a backend per
connection), a JVM on JSSE (no TLS library) and, where scripts/deps.sh installed them,
nginx 1.26 on HTTP/3 with aioquic. tlsprof runs by `--comm` for them all.

The time goes in phases (--phase seconds). In each, every client makes connections until
the phase ends, while one fault happens, in turn: none; nginx reloaded; an nginx worker
killed with SIGKILL while it serves; the OpenSSL copy nginx maps replaced on disk (a new
file renamed over it) and nginx reloaded; a burst (10 times the nginx clients for 10 s);
the agent killed with SIGKILL and started again before the phase's load (its counters
start again from 0: what Prometheus sees as a reset). After each phase, once tlsprof has
settled: per server, the handshakes the client made against those tlsprof counted ok and
those with a CPU figure; the agent's RSS; its kernel errors. A row per phase; exit status 1
when any count is not exact (the CPU figures too with --exact: the default mode times
handshakes under its overhead budget); a phase that is not exact keeps the agent's log.

Usage: bench/soak_faults.py [--seconds 3600] [--phase 60] [--faults none,reload,...]
                            [-- tlsprof run arguments, e.g. --exact]
(bench/soak.py is the memory soak: one nginx, mixed load, RSS over time.)
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness import quic, services  # noqa: E402
from harness.agent import Agent  # noqa: E402
from harness.clients import https_connections  # noqa: E402
from harness.metrics import since, value  # noqa: E402
from harness.procs import wait_for  # noqa: E402
from harness.servers import Nginx  # noqa: E402

FAULTS = ["none", "reload", "kill_worker", "upgrade_library", "burst", "agent_restart"]
SETTLE = 20.0  # seconds for tlsprof's counts to reach the clients' after a phase


def library_copy(work: Path) -> Path:
    """A directory with copies of the OpenSSL libraries the dynamic loader finds."""
    d = work / "openssl"
    d.mkdir()
    for name in ("libssl.so.3", "libcrypto.so.3"):
        src = Path(subprocess.run(["bash", "-c", f"ldconfig -p | awk '/{name} .*x86-64|{name} .*AArch64/ "
                                   "{print $NF; exit}'"], capture_output=True, text=True).stdout.strip())
        shutil.copy(src, d / name)
    return d


def upgrade(libdir: Path):
    """The library replaced on disk as a package upgrade does: a new file renamed over it."""
    new = libdir / "libssl.so.3.new"
    shutil.copy(libdir / "libssl.so.3", new)
    os.rename(new, libdir / "libssl.so.3")


class Load:
    """One client's loop for a phase: batches of connections until `until`, counted."""

    def __init__(self, name: str, batch):
        self.name, self.batch = name, batch
        self.ok = self.failed = 0
        self.errors: list[str] = []

    def run(self, until: float):
        while time.monotonic() < until:
            try:
                c = self.batch()
            except Exception as e:  # a client that failed whole: counted, not made
                self.errors.append(repr(e)[:200])
                time.sleep(0.5)
                continue
            self.ok += int(c.get("ok", 0))
            self.failed += int(c.get("failed", 0))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--phase", type=float, default=60)
    ap.add_argument("--faults", default=",".join(FAULTS), help="the faults to take in turn (comma-separated)")
    ap.add_argument("agent", nargs="*", help="more arguments for tlsprof run (after --), e.g. --exact")
    args = ap.parse_args()
    faults = args.faults.split(",")
    if not faults or any(f not in FAULTS for f in faults):
        sys.exit(f"--faults: some of {','.join(FAULTS)}")
    work = Path(tempfile.mkdtemp(prefix="tlsprof-soak-"))
    libdir = library_copy(work)
    nginx = Nginx(work, workers=2, http2=True, env={"LD_LIBRARY_PATH": str(libdir)})
    postfix = services.Postfix(work)
    pg = services.Postgres(work)
    jvm = services.JsseServer(work)
    h3 = None
    if all(quic.available().get(k) is None for k in ("nginx", "h3_get")):
        h3 = quic.NginxH3(work, "soak")
        h3.start()
    comms = ["nginx", "smtpd", "postgres", "java"]
    # a column per server and its client: (process name, transport); HTTP/3 is nginx over QUIC
    columns = {c: (c, "tcp") for c in comms} | ({"h3": ("nginx", "quic")} if h3 else {})
    agent_args = [a for c in comms for a in ("--comm", c)] + args.agent
    agent = None
    rows, exact = [], True
    try:
        agent = Agent(*agent_args)
        started = time.monotonic()
        first_rss = None
        phase = 0
        while time.monotonic() - started < args.seconds:
            fault = faults[phase % len(faults)]
            if fault == "agent_restart":
                os.kill(agent.proc.pid, signal.SIGKILL)
                agent.proc.wait(timeout=10)
                agent = Agent(*agent_args)
            # ready: attached and the ports watched (its --ready-file); before, while it attaches,
            # a handshake is timed by the probes but its connection not yet followed
            wait_for(lambda: set(comms) <= set(agent.ready().values()), 30, "tlsprof ready")
            base = agent.mark()
            until = time.monotonic() + args.phase
            loads = {
                "nginx": [Load("nginx", lambda: https_connections(nginx.port, 40, concurrency=2, timeout=60))],
                "smtpd": [Load("smtpd", lambda: services.smtp_starttls_connections(postfix.port, 20))],
                "postgres": [Load("postgres", lambda: services.pgbench_connections(pg.port, 20))],
                "java": [Load("java", lambda: https_connections(jvm.port, 20, concurrency=2, timeout=60))],
            }
            if h3:
                loads["h3"] = [Load("h3", lambda: quic.h3_get(h3.port, 20, "soak"))]
            threads = [threading.Thread(target=l.run, args=(until,)) for ls in loads.values() for l in ls]
            for t in threads:
                t.start()
            time.sleep(args.phase / 3)
            if fault == "reload":
                nginx.reload()
            elif fault == "kill_worker":
                os.kill(random.choice(nginx.workers()), signal.SIGKILL)
            elif fault == "upgrade_library":
                upgrade(libdir)
                nginx.reload()
            elif fault == "burst":
                extra = [Load("nginx", lambda: https_connections(nginx.port, 40, concurrency=2, timeout=60))
                         for _ in range(9)]
                burst = [threading.Thread(target=l.run, args=(time.monotonic() + 10,)) for l in extra]
                for t in burst:
                    t.start()
                for t in burst:
                    t.join()
                loads["nginx"] += extra
            for t in threads:
                t.join()
            made = {c: sum(l.ok for l in ls) for c, ls in loads.items()}
            # a connection the client saw fail may have finished its handshake first (a worker
            # killed while it served): counted by tlsprof, not by the client
            lost = {c: sum(l.failed for l in ls) for c, ls in loads.items()}

            def counted():
                m = since(agent.scrape(), base)
                return {c: (value(m, "tlsprof_handshakes_total", comm=n, role="server", result="ok", transport=t),
                            value(m, "tlsprof_handshake_cpu_seconds_count", comm=n, role="server", transport=t))
                        for c, (n, t) in columns.items()}
            deadline = time.monotonic() + SETTLE
            got = counted()
            while time.monotonic() < deadline and any(got[c][0] < made[c] or got[c][1] < made[c] for c in columns):
                time.sleep(0.5)
                got = counted()
            agent.settle()
            got = counted()
            rss = rss_mib(agent.proc.pid)
            first_rss = first_rss or rss
            errors = {l["kind"]: v for n, l, v in agent.scrape() if n == "tlsprof_kernel_errors_total" and v}
            # what else a handshake the client made may have been counted as
            m = since(agent.scrape(), base)
            other = {c: {k: int(v) for k, v in (
                ("ok", value(m, "tlsprof_handshakes_total", comm=c, role="server", result="ok")
                 if c == "unknown" else 0),
                ("failed", value(m, "tlsprof_handshakes_total", comm=c, role="server", result="failed")),
                ("no TLS", value(m, "tlsprof_connections_without_tls_total", comm=c))) if v}
                for c in comms + ["unknown"]}
            other = {c: o for c, o in other.items() if o}
            # the default mode times handshakes under the overhead budget (a sample); --exact times each
            timed_all = "--exact" in args.agent
            ok = all(made[c] <= got[c][0] <= made[c] + lost[c] and (got[c][1] == got[c][0] or not timed_all)
                     for c in columns)
            exact &= ok
            row = (f"{phase:3d} {time.monotonic() - started:6.0f}s {fault:16s} "
                   + " ".join(f"{c} {made[c]}/{int(got[c][0])}/{int(got[c][1])}" for c in columns)
                   + f" rss {rss:.1f} MiB errors {errors or 'none'} {'exact' if ok else 'NOT EXACT'}")
            if other:
                row += f" also counted {other}"
            failed = {l.name: (l.failed, l.errors[:2]) for ls in loads.values() for l in ls if l.failed or l.errors}
            if failed:
                row += f" client failures {failed}"
            if not ok:  # its log kept, to find why
                kept = Path(tempfile.gettempdir()) / f"tlsprof-soak-phase{phase}.log"
                shutil.copy(agent.log_path, kept)
                row += f" log {kept}"
            print(row, flush=True)
            rows.append((fault, ok, {c: (made[c], int(got[c][0]), int(got[c][1])) for c in columns}))
            phase += 1
        print("per fault: phases (exact), then per server client made / tlsprof ok / with CPU, summed")
        for fault in faults:
            mine = [r for r in rows if r[0] == fault]
            if not mine:
                continue
            sums = {c: [sum(r[2][c][i] for r in mine) for i in range(3)] for c in columns}
            print(f"  {fault:16s} {len(mine):3d} ({sum(r[1] for r in mine)}) "
                  + " ".join(f"{c} {a}/{b}/{w}" for c, (a, b, w) in sums.items()), flush=True)
        print(f"phases {phase}; columns per server: client made/tlsprof ok/with CPU; agent RSS first "
              f"{first_rss:.1f} MiB, last {rss_mib(agent.proc.pid):.1f} MiB; "
              f"{'exact' if exact else 'NOT EXACT'}", flush=True)
    finally:
        if agent:
            agent.stop()
        for s in (h3, jvm, pg, postfix, nginx):
            if s:
                s.stop()
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if exact else 1)


if __name__ == "__main__":
    main()
