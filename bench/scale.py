#!/usr/bin/env python3
"""tlsprof at scale: many traced processes, many open connections, and load, on one host.

The set-up:
  - nginx with 2 workers (ECDSA P-256, TLS 1.3, session resumption off, keep-alive 600 s),
    holding --idle concurrent TLS keep-alive connections that each made one request and
    then stay open and idle (a client process of this script, `hold`, from 127.0.0.2);
  - --servers small TLS servers (`openssl s_server -www`, one process each, own port);
  - `tlsprof run --comm nginx --comm openssl` in the default mode (or --agent-args).
Phases, each measured on its own:
  attach  agent start until its ready file lists every server process;
  open    the idle connections opened (--idle handshakes at the client's pace);
  idle    --idle-seconds with every connection open and no traffic: the agent's cost of
          watching (its scans of /proc and sock_diag);
  load    ab -n --load -c 16 against nginx, new connection per request, while every small
          server gets --per-server handshakes: the agent's CPU per handshake, scaled to
          2,000 handshakes/s.
Truth: the clients' own counts (the holder's, ab's Complete requests, the small servers'
client) and nginx's stub_status accepts (on a plain port, less the status requests).
Checked after the load settles: tlsprof's handshake and accepted-connection counts equal
them exactly; every kernel error, lost event and full table is 0; the agent's peak RSS
(VmHWM) and CPU; the time per scan (tlsprof_scan_duration_seconds, by scan).

Usage: bench/scale.py [--idle 20000] [--servers 100] [--load 40000] [--out FILE]
Exit status 1 when a count is not exact or something was lost (the figures are printed
either way); the RSS/CPU targets are reported, not enforced (a noisy shared machine).
"""
import argparse
import asyncio
import concurrent.futures
import os
import resource
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import Agent  # noqa: E402
from harness.certs import make_cert  # noqa: E402
from harness.clients import ab_count  # noqa: E402
from harness.metrics import parse_metrics  # noqa: E402
from harness.procs import cpu_ns, free_port, stop_all, stop_pid, wait_for, wait_port  # noqa: E402
from harness.servers import Nginx  # noqa: E402

HOLD_SOURCE = "127.0.0.2"  # the idle connections' own source address: their own ephemeral ports
HOLD_EACH = 5000  # connections per holder process


def raise_nofile(n: int) -> int:
    """Open files up to n, within the hard limit (no CAP_SYS_RESOURCE needed): what we got."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(n, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return max(soft, want)


def client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


# ---- the holder: a client process holding idle keep-alive connections ----

async def _open_one(port, ctx, sem, held, failed):
    async with sem:
        try:
            r, w = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=(HOLD_SOURCE, 0)), 60)
            w.write(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            await asyncio.wait_for(r.readuntil(b"hello from nginx\n"), 60)
            held.append(w)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
            failed.append(1)


async def _hold(port, n, seconds):
    ctx, sem, held, failed = client_context(), asyncio.Semaphore(64), [], []
    await asyncio.gather(*(_open_one(port, ctx, sem, held, failed) for _ in range(n)))
    print(f"held {len(held)} failed {len(failed)}", flush=True)
    # until the parent closes our stdin (or the deadline)
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.read), seconds)
    except asyncio.TimeoutError:
        pass
    for w in held:
        w.close()


def hold_main(args):
    raise_nofile(args.conns + 1024)
    asyncio.run(_hold(args.port, args.conns, args.seconds))


# ---- the bench ----

class SmallServer:
    """openssl s_server -www on a loopback port: one process, OpenSSL's libssl."""

    def __init__(self, key, crt):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["openssl", "s_server", "-quiet", "-www", "-no_ticket", "-num_tickets", "0", "-key", str(key),
             "-cert", str(crt), "-accept", f"127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid

    def stop(self):
        stop_pid(self.pid)
        self.proc.wait(timeout=10)


def small_handshake(port: int) -> bool:
    import socket
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s, \
                client_context().wrap_socket(s) as t:
            t.sendall(b"GET / HTTP/1.0\r\n\r\n")
            while t.recv(65536):
                pass
        return True
    except (OSError, ssl.SSLError):
        return False


def status(port: int) -> int:
    """nginx's accepted connections so far (stub_status), this request's included."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stub_status", timeout=10) as r:
        return int(r.read().decode().splitlines()[2].split()[0])


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def total(samples, name, **labels) -> float:
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items()))


def scan_times(samples) -> dict:
    """Per scan: (count, mean s, the smallest bucket bound holding every scan)."""
    out = {}
    for scan in ("processes", "ports"):
        n = total(samples, "tlsprof_scan_duration_seconds_count", scan=scan)
        s = total(samples, "tlsprof_scan_duration_seconds_sum", scan=scan)
        bounds = sorted((float(l["le"]), v) for nm, l, v in samples
                        if nm == "tlsprof_scan_duration_seconds_bucket" and l.get("scan") == scan)
        top = next((le for le, v in bounds if v >= n), float("inf"))
        out[scan] = (n, s / n if n else 0.0, top)
    return out


def diff_scans(a, b) -> dict:
    """Scans between two scan_times() (mean over those; max bound of the later)."""
    return {k: (b[k][0] - a[k][0], (b[k][1] * b[k][0] - a[k][1] * a[k][0]) / max(1, b[k][0] - a[k][0]), b[k][2])
            for k in b}


def losses(samples) -> dict:
    """Every non-zero loss counter: kernel errors by kind, lost events, full tables. Not
    tlsprof_unmatched_returns_total: a return probe whose call began before the probes were
    attached (the overhead budget attaches them every cycle, returns first), which loses
    nothing: that call's handshake is one the window was never to time, and it is counted."""
    out = {}
    for n, l, v in samples:
        if v and n in ("tlsprof_kernel_errors_total", "tlsprof_table_full_total", "tlsprof_events_lost_total"):
            out[f"{n}{{{','.join(f'{k}={x}' for k, x in l.items())}}}"] = v
    return out


def stop_agent(agent, say):
    """SIGTERM, and the time the agent takes to exit: the kernel removes its probes one at
    a time (a grace period each). SCALE_STACKS=1 prints where its threads wait meanwhile."""
    if agent is None:
        return
    t = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    seen = {}
    while os.environ.get("SCALE_STACKS") and agent.proc.poll() is None:
        for task in Path(f"/proc/{agent.proc.pid}/task").glob("*"):
            try:
                stack = Path(task, "stack").read_text().split("\n")[:7]
                comm = Path(task, "comm").read_text().strip()
            except OSError:
                continue
            k = comm + " | " + " < ".join(x.split()[-1].split("+")[0] for x in stack if x)
            seen[k] = seen.get(k, 0) + 1
        time.sleep(0.05)
    for k, v in sorted(seen.items(), key=lambda x: -x[1])[:10]:
        print(v, k)
    try:
        agent.proc.wait(timeout=900)
        say(f"stop:  the agent exited {time.monotonic() - t:.1f} s after SIGTERM (its probes removed)")
    finally:
        agent.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--idle", type=int, default=20000, help="idle TLS keep-alive connections to nginx")
    p.add_argument("--servers", type=int, default=100, help="small TLS servers (openssl s_server)")
    p.add_argument("--load", type=int, default=40000, help="new-connection requests by ab during the load phase")
    p.add_argument("--per-server", type=int, default=10, help="handshakes to each small server during the load")
    p.add_argument("--idle-seconds", type=float, default=20)
    p.add_argument("--agent-args", default="--comm nginx --comm openssl")
    p.add_argument("--out", type=Path, help="also write the report here")
    args = p.parse_args()
    raise_nofile(65536)
    work = Path(tempfile.mkdtemp(prefix="tlsprof-scale-"))
    key, crt = make_cert(work)
    report, bad = [], []

    def say(line=""):
        print(line, flush=True)
        report.append(line)

    status_port = free_port()
    nginx = Nginx(work, workers=2, connections=min(args.idle + 4096, 19000), plain_port=status_port,
                  extra_server="keepalive_timeout 600s; keepalive_requests 1000000;")
    smalls, holders, agent = [], [], None
    try:
        smalls = [SmallServer(key, crt) for _ in range(args.servers)]
        for s in smalls:
            wait_port(s.port, 30)
        pids = [nginx.pid, *nginx.workers(), *(s.pid for s in smalls)]
        accepts0 = status(status_port)

        t0 = time.monotonic()
        agent = Agent(*args.agent_args.split(), scan_interval=2)
        agent.wait_attached(pids, timeout=120)
        t_attach = time.monotonic() - t0
        a_pid = agent.proc.pid

        cpu0, t1 = cpu_ns(a_pid), time.monotonic()
        # holders of at most HOLD_EACH connections each: a process's open files are capped by
        # the hard limit, which root without CAP_SYS_RESOURCE cannot raise
        parts = [min(HOLD_EACH, args.idle - i) for i in range(0, args.idle, HOLD_EACH)]
        holders = [subprocess.Popen([sys.executable, __file__, "hold", "--port", str(nginx.port), "--conns",
                                     str(n), "--seconds", "1800"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for n in parts]
        held = hold_failed = 0
        for h in holders:
            line = h.stdout.readline().split()
            if len(line) < 4:
                raise SystemExit(f"a holder failed: {line}")
            held, hold_failed = held + int(line[1]), hold_failed + int(line[3])
        t_open, cpu_open = time.monotonic() - t1, cpu_ns(a_pid) - cpu0
        if hold_failed:
            bad.append(f"{hold_failed} idle connections failed to open")

        time.sleep(3)  # the last handshakes' events and a scan
        s_idle0, cpu1, t2 = scan_times(agent.scrape()), cpu_ns(a_pid), time.monotonic()
        time.sleep(args.idle_seconds)
        cpu_idle, t_idle = cpu_ns(a_pid) - cpu1, time.monotonic() - t2
        s_idle = diff_scans(s_idle0, scan_times(agent.scrape()))
        established = int(subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{nginx.port} )"],
                                         capture_output=True, text=True).stdout.count("\n"))

        cpu2, t3 = cpu_ns(a_pid), time.monotonic()
        ab = subprocess.Popen(["ab", "-q", "-s", "60", "-n", str(args.load), "-c", "16",
                               f"https://127.0.0.1:{nginx.port}/"], stdout=subprocess.PIPE, text=True)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ok_small = sum(pool.map(small_handshake, [s.port for s in smalls for _ in range(args.per_server)]))
        out = ab.communicate(timeout=1800)[0]
        t_load, cpu_load = time.monotonic() - t3, cpu_ns(a_pid) - cpu2
        ab_done, ab_failed = ab_count(out, "Complete requests"), ab_count(out, "Failed requests")
        if ab_failed or ab.returncode:
            bad.append(f"ab: {ab_failed} failed, exit {ab.returncode}")
        if ok_small != args.servers * args.per_server:
            bad.append(f"small servers: {ok_small} of {args.servers * args.per_server} handshakes")
        time_wait = int(subprocess.run(["ss", "-Htn", "state", "time-wait", f"( sport = :{nginx.port} )"],
                                       capture_output=True, text=True).stdout.count("\n"))

        # truth: nginx's own count of accepted connections, less the status requests
        tls_conns = status(status_port) - accepts0 - 1
        want_nginx = held + ab_done
        # (ab opens a few connections more than it counts requests: up to -c at the end)

        def counts():
            m = agent.scrape()
            return (m, total(m, "tlsprof_handshakes_total", comm="nginx", role="server"),
                    total(m, "tlsprof_handshakes_total", comm="openssl", role="server"),
                    total(m, "tlsprof_tcp_connections_accepted_total", comm="nginx", port=str(nginx.port)))
        try:
            wait_for(lambda: counts()[1:] == (tls_conns, ok_small, tls_conns), 60, "the counts to settle")
        except AssertionError:
            pass
        time.sleep(4)  # and stay there, past two scans
        m, hs_nginx, hs_small, accepted = counts()
        s_all = scan_times(m)
        lost = losses(m)
        rss_peak, rss_now = peak_rss(a_pid), total(m, "tlsprof_agent_resident_memory_bytes")
        duty = {l.get("comm"): v for n, l, v in m if n == "tlsprof_probe_duty_cycle"}
        for what, got, want in (("nginx handshakes", hs_nginx, tls_conns), ("s_server handshakes", hs_small, ok_small),
                                ("nginx accepted connections", accepted, tls_conns)):
            if got != want:
                bad.append(f"{what}: tlsprof {got:.0f}, truth {want}")
        if lost:
            bad.append(f"lost: {lost}")

        hs_load = ab_done + ok_small
        rate = hs_load / t_load
        per_hs = cpu_load / 1e9 / max(1, hs_load)
        # what the agent costs whatever the load (the idle phase's rate, which holds the
        # 60 s re-reading of the servers' open files when it falls in it), and what each
        # handshake adds to it
        idle_share = cpu_idle / 1e9 / t_idle
        marginal = max(0.0, cpu_load / 1e9 - idle_share * t_load) / max(1, hs_load)
        say(f"# bench/scale.py --idle {args.idle} --servers {args.servers} --load {args.load} "
            f"--per-server {args.per_server} --agent-args '{args.agent_args}'")
        say(f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs, kernel {os.uname().release}")
        say(f"traced processes: {len(pids)} (nginx master + 2 workers, {args.servers} s_server); "
            f"attached to all {t_attach:.1f} s after start")
        say(f"open:  {held} idle TLS keep-alive connections opened in {t_open:.1f} s ({held / t_open:.0f} hs/s); "
            f"agent CPU {cpu_open / 1e9:.2f} s = {cpu_open / 1e9 / max(1, held) * 1e6:.0f} µs per handshake")
        say(f"idle:  {established} connections established for {t_idle:.0f} s: agent "
            f"{cpu_idle / 1e9 / t_idle * 100:.2f}% of a core")
        for scan, (n, mean, top) in s_idle.items():
            say(f"       scan {scan}: {n:.0f} scans, mean {mean * 1e3:.2f} ms, all <= {top * 1e3:g} ms")
        say(f"load:  {ab_done} new-connection requests (ab -c 16) + {ok_small} handshakes to the s_servers in "
            f"{t_load:.1f} s = {rate:.0f} hs/s; agent CPU {cpu_load / 1e9:.2f} s = {per_hs * 1e6:.1f} µs per "
            f"handshake = {cpu_load / 1e9 / t_load * 100:.2f}% of a core at {rate:.0f} hs/s")
        say(f"       at 2,000 hs/s: {per_hs * 2000 * 100:.2f}% of a core with all of it counted per handshake, "
            f"{(idle_share + marginal * 2000) * 100:.2f}% as the idle phase's {idle_share * 100:.2f}% plus "
            f"{marginal * 1e6:.1f} µs per handshake over it (target <= 2%)")
        say(f"       TIME_WAIT sockets on nginx's port after the load: {time_wait}; probe duty cycle now: "
            + ", ".join(f"{c} {v:.2f}" for c, v in sorted(duty.items())))
        for scan, (n, mean, top) in s_all.items():
            say(f"       scan {scan} over the whole run: {n:.0f} scans, mean {mean * 1e3:.2f} ms, "
                f"all <= {top * 1e3:g} ms")
        say(f"memory: agent peak RSS (VmHWM) {rss_peak / 2**20:.1f} MiB, now {rss_now / 2**20:.1f} MiB (target <= 64)")
        say(f"counts: nginx handshakes {hs_nginx:.0f} / truth {tls_conns} (stub_status accepts; clients "
            f"{want_nginx}); accepted connections {accepted:.0f}; s_server handshakes {hs_small:.0f} / {ok_small}")
        say(f"losses: {lost or 'none (every kernel error, lost event and full table 0)'}")
        for line in agent.output().splitlines():
            if "skipped" in line:  # which program the kernel skipped, as the agent says it
                say(f"        {line}")
        say("result: " + ("exact, nothing lost" if not bad else "; ".join(bad)))
    finally:
        # every process this run started is stopped, whatever failed before
        stop_all([*(lambda h=h: (h.stdin.close(), h.wait(timeout=120)) for h in holders),
                  lambda: stop_agent(agent, say), *(s.stop for s in smalls), nginx.stop])
    if args.out:
        args.out.write_text("\n".join(report) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "hold":
        h = argparse.ArgumentParser()
        h.add_argument("cmd")
        h.add_argument("--port", type=int, required=True)
        h.add_argument("--conns", type=int, required=True)
        h.add_argument("--seconds", type=float, default=600)
        hold_main(h.parse_args())
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        sys.exit(main())
