#!/usr/bin/env python3
"""tlsprof's memory in a soak: its resident memory (RSS) over --minutes of mixed TLS load,
with server reloads and short-lived servers, and whether everything was still counted.

The set-up (everything on loopback, every load loop bounded in count and time):
  - nginx with 2 workers (ECDSA P-256, TLS 1.2 and 1.3, HTTP/2 on its TLS port, no
    resumption), `nginx -s reload` every --reload seconds (new workers each time);
  - load, each part a loop of runs of at most 30 s until the end:
      new        ab -r -c 8, a new TLS connection per request
      keepalive  ab -r -k -c 2, keep-alive requests (reconnecting after each reload)
      http2      h2load -c 4 -m 8 --rps 100, HTTP/2 streams on 4 connections (if h2load is
                 installed)
      resets     a client process (this script, `resets`) of connections aborted with a
                 TCP reset (SO_LINGER 0): half after their handshake, half before it
      servers    a short-lived `openssl s_server` every --server-every seconds, given a few
                 handshakes, stopped after about 8 s;
  - `tlsprof run` as deployed (no selection: every process with a TLS stack, clients too).
Sampled every --sample seconds: the agent's VmRSS; every 30 s a line of the timeline (RSS,
its anonymous and file-backed parts from /proc/PID/smaps_rollup, the handshakes per second
nginx accepted). At the end: the peak (VmHWM), where the resident memory is by mapping
(smaps), and the counts: nginx's accepted connections (stub_status, on a plain port, less
the status requests) against tlsprof's, tlsprof's handshakes against the clients' own
counts, and every loss counter (which must be 0).

Usage: bench/soak.py [--minutes 10] [--out FILE]
Exit status 1 when a count is not exact or something was lost; the RSS target (64 MiB) is
reported, not enforced.
"""
import argparse
import os
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from harness.agent import TLSPROF, Agent  # noqa: E402
from harness.certs import make_cert  # noqa: E402
from harness.procs import cpu_ns, free_port, stop_all, stop_pid, wait_port  # noqa: E402
from harness.servers import Nginx  # noqa: E402

TARGET_MIB = 64
RUN = 30  # seconds per run of a load client


def client_context() -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tls_once(port: int, request: bytes = b"") -> bool:
    """One TLS connection to the port: handshake (and a request read to its end)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
                client_context().wrap_socket(s) as t:
            if request:
                t.sendall(request)
                while t.recv(65536):
                    pass
        return True
    except (OSError, ssl.SSLError):
        return False


# ---- the reset client: a process of its own ----

def resets_main(port: int, seconds: float, rate: float):
    """Connections aborted with a TCP reset, `rate` a second for `seconds`: even ones after
    their handshake, odd ones right after connecting. Prints 'handshaken N reset M'."""
    ctx, linger = client_context(), struct.pack("ii", 1, 0)
    end, n, shaken, reset = time.monotonic() + seconds, 0, 0, 0
    while time.monotonic() < end and n < rate * seconds:
        t0 = time.monotonic()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
            if n % 2 == 0:
                t = ctx.wrap_socket(s)
                shaken += 1
                t.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                t.close()
            else:
                s.close()
            reset += 1
        except (OSError, ssl.SSLError):
            pass
        n += 1
        time.sleep(max(0.0, 1 / rate - (time.monotonic() - t0)))
    print(f"handshaken {shaken} reset {reset}", flush=True)


# ---- the soak ----

class Loop(threading.Thread):
    """Runs one load client again and again (RUN s each) until `end`; sums what it said."""

    def __init__(self, name, argv, end, parse):
        super().__init__(name=name, daemon=True)
        self.argv, self.end, self.parse = argv, end, parse
        self.runs, self.done, self.proc, self.errors, self.stalls = 0, 0, None, [], 0

    def run(self):
        while time.monotonic() < self.end - 1 and self.runs < 10000:
            left = int(min(RUN, self.end - time.monotonic()))
            if left < 1:
                break
            self.proc = subprocess.Popen([a.replace("SECONDS", str(left)) for a in self.argv],
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            out = self.proc.communicate(timeout=left + 120)[0]
            self.runs += 1
            self.stalls += "Total of " in out
            try:
                self.done += self.parse(out)
            except (ValueError, IndexError, AttributeError, StopIteration) as e:  # a client's failure
                self.errors.append(f"{e!r}: {out[-300:]}")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            stop_pid(self.proc.pid, signal.SIGINT)


def ab_done(out: str) -> int:
    """ab's completed requests; an ab that gave up on a stalled keep-alive connection (its -s
    timeout, as after a reload) says only 'Total of N requests completed'."""
    for line in out.splitlines():
        if line.startswith("Complete requests:") or line.startswith("Total of "):
            return int(line.split()[-1] if line.startswith("Complete") else line.split()[2])
    raise ValueError("no count in ab's output")


def h2_done(out: str) -> int:
    """h2load's 'requests: N total, N started, N done, N succeeded, ...': succeeded."""
    line = next(x for x in out.splitlines() if x.startswith("requests:"))
    return int(line.split(",")[3].split()[0])


class ShortServers(threading.Thread):
    """A short-lived openssl s_server every `every` s: up, 2.5 s (the agent attaches), a few
    handshakes, then stopped. Counts the handshakes it got through."""

    def __init__(self, key, crt, end, every, each=10):
        super().__init__(name="servers", daemon=True)
        self.key, self.crt, self.end, self.every, self.each = key, crt, end, every, each
        self.started, self.handshakes, self.proc = 0, 0, None

    def run(self):
        while time.monotonic() < self.end - 10 and self.started < 10000:
            t0, port = time.monotonic(), free_port()
            self.proc = subprocess.Popen(
                ["openssl", "s_server", "-quiet", "-www", "-no_ticket", "-num_tickets", "0", "-key", str(self.key),
                 "-cert", str(self.crt), "-accept", f"127.0.0.1:{port}"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.started += 1
            try:
                wait_port(port, 10)
                time.sleep(2.5)
                self.handshakes += sum(tls_once(port, b"GET / HTTP/1.0\r\n\r\n") for _ in range(self.each))
                time.sleep(max(0.0, 8 - (time.monotonic() - t0)))
            except AssertionError:
                pass
            finally:
                stop_pid(self.proc.pid)
                self.proc.wait(timeout=10)
            time.sleep(max(0.0, self.every - (time.monotonic() - t0)))


def status(port: int) -> int:
    """nginx's accepted connections so far (stub_status), this request's included."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stub_status", timeout=10) as r:
        return int(r.read().decode().splitlines()[2].split()[0])


def proc_kib(pid: int, path: str, *keys) -> list:
    got = {}
    for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in keys:
            got[k] = int(v.split()[0])
    return [got.get(k, 0) for k in keys]


def by_mapping(pid: int) -> list:
    """Resident KiB per mapping kind (smaps): the heap and anonymous memory, each file, the
    BPF maps and rings (anon_inode), the stacks; largest first."""
    out, name = {}, None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        f = line.split()
        if "-" in f[0] and len(f) >= 5 and not f[0].endswith(":"):
            name = f[5] if len(f) > 5 else "[anon]"
            name = "[anon: heap and threads' arenas]" if name in ("[anon]", "[heap]") else name
        elif f[0] == "Rss:":
            out[name] = out.get(name, 0) + int(f[1])
    return sorted(out.items(), key=lambda x: -x[1])


def cpu_pressure() -> float:
    """Seconds some task waited for a CPU (/proc/pressure/cpu): how busy the machine was."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return 0.0
    return int(line.rsplit("total=", 1)[1]) / 1e6


def total(samples, name, **labels) -> float:
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == x for k, x in labels.items()))


def losses(samples) -> dict:
    """Every non-zero loss counter: kernel errors, lost events, full tables."""
    return {f"{n}{{{','.join(f'{k}={x}' for k, x in l.items())}}}": v for n, l, v in samples
            if v and n in ("tlsprof_kernel_errors_total", "tlsprof_table_full_total", "tlsprof_events_lost_total")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--reload", type=float, default=12, help="seconds between nginx reloads")
    p.add_argument("--server-every", type=float, default=4, help="seconds between short-lived s_servers")
    p.add_argument("--resets", type=float, default=100, help="reset connections a second")
    p.add_argument("--sample", type=float, default=2, help="seconds between RSS samples")
    p.add_argument("--agent-args", default="", help="arguments of `tlsprof run` (default: none, as deployed)")
    p.add_argument("--out", type=Path, help="also write the report here")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tlsprof-soak-"))
    key, crt = make_cert(work)
    report, bad = [], []

    def say(line=""):
        print(line, flush=True)
        report.append(line)

    status_port = free_port()
    nginx = Nginx(work, workers=2, http2=True, connections=4096, plain_port=status_port,
                  extra_server="keepalive_requests 1000;")
    loops, servers, resets, agent, status_reads = [], None, None, None, 0
    try:
        agent = Agent(*args.agent_args.split(), scan_interval=2)
        agent.wait_attached([nginx.pid, *nginx.workers()], timeout=60)
        pid = agent.proc.pid
        # the peak of its start (BTF, kallsyms and the object parsed), before any load
        start_hwm, start_rss = proc_kib(pid, "status", "VmHWM", "VmRSS")
        cpu0, waited0 = cpu_ns(pid), cpu_pressure()
        accepts0 = status(status_port)
        status_reads += 1
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        url = f"https://127.0.0.1:{nginx.port}/"
        loops = [Loop("new", ["ab", "-q", "-r", "-s", "30", "-c", "8", "-t", "SECONDS", "-n", "10000000", url],
                      end, ab_done),
                 Loop("keepalive", ["ab", "-q", "-r", "-s", "30", "-k", "-c", "2", "-t", "SECONDS", "-n", "10000000",
                                    url], end, ab_done)]
        if shutil.which("h2load"):
            loops.append(Loop("http2", ["h2load", "-c", "4", "-m", "8", "--rps", "100", "-D", "SECONDS", url], end, h2_done))
        for t in loops:
            t.start()
        resets = subprocess.Popen([sys.executable, __file__, "resets", "--port", str(nginx.port), "--seconds",
                                   str(int(args.minutes * 60) - 5), "--rate", str(args.resets)],
                                  stdout=subprocess.PIPE, text=True)
        servers = ShortServers(key, crt, end, args.server_every)
        servers.start()

        say(f"# bench/soak.py --minutes {args.minutes:g} --reload {args.reload:g} --server-every "
            f"{args.server_every:g} --resets {args.resets:g}" + (f" --agent-args '{args.agent_args}'"
                                                                  if args.agent_args else ""))
        say(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, kernel "
            f"{os.uname().release}, binary {TLSPROF}")
        say(f"{'t (s)':>6} {'RSS MiB':>8} {'anon':>6} {'file':>6} {'max so far':>10} {'accepts/s':>9} "
            f"{'handshakes/s':>12} {'reloads':>7} {'servers':>7}")
        rss, reloads, next_reload, next_line = [], 0, t0 + args.reload, t0
        last = (t0, accepts0, total(agent.scrape(), "tlsprof_handshakes_total", comm="nginx", role="server"))
        while time.monotonic() < end:
            now = time.monotonic()
            rss.append(proc_kib(pid, "status", "VmRSS")[0])
            if now >= next_reload:
                # not nginx.reload(), which waits for the old workers to go: the sampling goes on
                subprocess.run([nginx.binary, "-c", str(nginx.conf), "-s", "reload"], check=True,
                               capture_output=True, timeout=30)
                reloads += 1
                next_reload += args.reload
            if now >= next_line:
                acc = status(status_port)
                status_reads += 1
                hs = total(agent.scrape(), "tlsprof_handshakes_total", comm="nginx", role="server")
                anon, file_ = proc_kib(pid, "smaps_rollup", "Anonymous", "Rss")
                dt = now - last[0]
                say(f"{now - t0:6.0f} {rss[-1] / 1024:8.1f} {anon / 1024:6.1f} {(file_ - anon) / 1024:6.1f} "
                    f"{max(rss) / 1024:10.1f} {(acc - last[1]) / dt if dt else 0:9.0f} "
                    f"{(hs - last[2]) / dt if dt else 0:12.0f} {reloads:7d} {servers.started:7d}")
                last, next_line = (now, acc, hs), next_line + 30
            time.sleep(max(0.0, min(args.sample, end - time.monotonic())))
        for t in loops:
            t.join(timeout=RUN + 150)
        servers.join(timeout=60)
        r_shaken, r_reset = (int(x) for x in resets.communicate(timeout=120)[0].split()[1::2])
        elapsed = time.monotonic() - t0
        agent_cpu, waited = (cpu_ns(pid) - cpu0) / 1e9, cpu_pressure() - waited0

        # settled: nginx's count of accepted connections (less the status requests), tlsprof's
        time.sleep(6)
        accepted_nginx = status(status_port) - accepts0 - status_reads
        status_reads += 1
        time.sleep(5)  # past two scans
        m = agent.scrape()
        hwm, now_rss = proc_kib(pid, "status", "VmHWM", "VmRSS")
        where = by_mapping(pid)
        accepted = total(m, "tlsprof_tcp_connections_accepted_total", comm="nginx", port=str(nginx.port))
        hs_ok = total(m, "tlsprof_handshakes_total", comm="nginx", role="server", result="ok")
        hs_failed = total(m, "tlsprof_handshakes_total", comm="nginx", role="server", result="failed")
        hs_small = total(m, "tlsprof_handshakes_total", comm="openssl", role="server", result="ok")
        hs_clients = total(m, "tlsprof_handshakes_total", role="client")
        lost = losses(m)
        if accepted != accepted_nginx:
            bad.append(f"accepted connections: tlsprof {accepted:.0f}, nginx {accepted_nginx}")
        if lost:
            bad.append(f"lost: {lost}")
        for t in loops:
            if t.errors:
                bad.append(f"{t.name}: {t.errors[:2]}")

        after = rss[len(rss) // 10:]  # the last nine tenths: past the start-up's growth
        say()
        say(f"load: {elapsed:.0f} s; nginx accepted {accepted_nginx} TLS connections "
            f"({accepted_nginx / elapsed:.0f}/s), tlsprof counted {hs_ok + hs_failed:.0f} server handshakes "
            f"({(hs_ok + hs_failed) / elapsed:.0f}/s: {hs_ok:.0f} ok, {hs_failed:.0f} failed) and "
            f"{hs_clients:.0f} client handshakes (ab, h2load, python: the clients are traced too)")
        say("clients: " + ", ".join(f"{t.name} {t.done} requests in {t.runs} runs"
                                   + (f" ({t.stalls} ended by ab's -s timeout)" if t.stalls else "") for t in loops)
            + f"; resets {r_reset} ({r_shaken} after their handshake); {servers.started} short-lived "
            f"s_servers, {servers.handshakes} handshakes to them; {reloads} nginx reloads")
        say(f"counts: accepted connections tlsprof {accepted:.0f} / nginx {accepted_nginx}; s_server "
            f"handshakes tlsprof {hs_small:.0f} / clients {servers.handshakes} (those before the attach "
            f"are not timed)")
        say(f"cpu: the agent {agent_cpu:.1f} s = {agent_cpu / elapsed * 100:.1f}% of a core; tasks waiting for a CPU "
            f"{waited / elapsed * 100:.0f}% of the time (/proc/pressure/cpu: the machine is shared; a starved agent "
            f"loses events when its rings fill)")
        say(f"losses: {lost or 'none (every kernel error, lost event and full table 0)'}")
        say(f"memory: peak RSS (VmHWM) {hwm / 1024:.1f} MiB, now {now_rss / 1024:.1f} MiB; sampled every "
            f"{args.sample:g} s: max {max(rss) / 1024:.1f}, median after the first tenth "
            f"{sorted(after)[len(after) // 2] / 1024:.1f} MiB (target < {TARGET_MIB}); once attached, before "
            f"the load: {start_rss / 1024:.1f} MiB (its start's peak {start_hwm / 1024:.1f})")
        say("resident by mapping at the end (KiB): " + ", ".join(f"{n} {k}" for n, k in where[:8]))
        say("result: " + ("exact, nothing lost" if not bad else "; ".join(bad)) + "; peak "
            + ("under" if hwm < TARGET_MIB * 1024 else "OVER") + f" {TARGET_MIB} MiB")
        sizes = [x for x in agent.output().splitlines() if "tables:" in x][-1:]
        if sizes:
            say("agent's tables at the end (its -v log): " + sizes[0].split("tables:", 1)[1].strip())
    finally:
        # every process this run started is stopped, by its pid, whatever failed before
        stop_all([*(t.stop for t in loops), lambda: resets and resets.poll() is None and stop_pid(resets.pid),
                  lambda: servers and servers.proc and servers.proc.poll() is None and stop_pid(servers.proc.pid),
                  lambda: agent and agent.stop(), nginx.stop])
    if args.out:
        args.out.write_text("\n".join(report) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "resets":
        r = argparse.ArgumentParser()
        r.add_argument("cmd")
        r.add_argument("--port", type=int, required=True)
        r.add_argument("--seconds", type=float, required=True)
        r.add_argument("--rate", type=float, default=100)
        a = r.parse_args()
        resets_main(a.port, a.seconds, a.rate)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
        sys.exit(main())
