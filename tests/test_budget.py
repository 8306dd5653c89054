"""The overhead budget (the default mode): the handshake probes are attached only as long
as their measured cost stays within --overhead-budget, so their duty cycle follows the load,
while the handshake, connection and request counts, taken from what the server sends and
from TCP state changes, stay exact. --exact keeps the probes on and times every handshake.

Checked against real nginx and real clients (a paced Python client, ab), through the
agent's own metrics: the duty cycle it reports, the hits and CPU its probes cost (hits x the
per-hit cost it measured on this host), and the counts against the clients' own counts.
No timing is asserted: the duty cycle is the mechanism's output, computed from counters."""
import threading
import time

import pytest

from harness.agent import Agent
from harness.clients import ab, https_connections, https_request, ss_open, tls_client_context
from harness.figures import figure
from harness.metrics import value
from harness.procs import have, wait_for
from harness.servers import Nginx

# CPU figures: after the kernel matrix's guests, on an otherwise idle machine
pytestmark = pytest.mark.quiet

# 0.1% of the server's CPU: a fifth of the default, so that ab's load is well over it here (the
# probes sit on instructions the kernel emulates: ~1 us a hit with its program, ~6 us of
# probes per new connection, ~6 ms/s at 1,000 connections/s)
BUDGET = 0.001
# Connections a second that the budget above covers in full (see the light phase below).
LIGHT_RATE = 8
# How far a process's samples in its traps may scale the calibrated trap cost
# (agent/src/agent/trap_cost.rs, SCALE_RANGE).
TRAP_SCALE = (0.5, 4.0)


def paced_connections(port: int, rate: float, seconds: float) -> int:
    """New TLS connections with one request each, at about `rate` per second for `seconds`.
    Returns how many completed (the test fails on any that did not)."""
    ctx = tls_client_context()
    done = 0
    t0 = time.monotonic()
    n = int(rate * seconds)
    for i in range(n):
        wait = t0 + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        https_request(ctx, port)
        done += 1
    return done


def figures(agent, port: int) -> dict:
    s = agent.scrape()

    def v(name, **labels):
        return value(s, name, **labels)

    return {
        "ok": v("tlsprof_handshakes_total", comm="nginx", role="server", result="ok"),
        "failed": v("tlsprof_handshakes_total", comm="nginx", role="server", result="failed"),
        # connections that never offered TLS (one ab connected and abandoned at its exit
        # before its ClientHello): no handshake, but a connection all the same
        "no_tls": v("tlsprof_connections_without_tls_total", comm="nginx"),
        "measured": v("tlsprof_handshake_cpu_seconds_count", comm="nginx"),
        "failed_cpu": v("tlsprof_failed_handshake_cpu_seconds_total", comm="nginx"),
        "duty": v("tlsprof_probe_duty_cycle", comm="nginx"),
        "probe_cpu": v("tlsprof_probe_cpu_seconds_total", comm="nginx"),
        "probe_program": v("tlsprof_probe_program_seconds_total", comm="nginx"),
        "hits": v("tlsprof_probe_hits_total", comm="nginx"),
        "accepted": v("tlsprof_tcp_connections_accepted_total", port=str(port)),
        # connections whose close the agent has processed (tlsprof_tcp_connections_total
        # waits for sock_diag to settle a server-closed socket's TIME_WAIT, up to
        # tcp_fin_timeout), and those it found ended without the kernel reporting their close
        "ended": v("tlsprof_requests_per_connection_count", port=str(port))
        + v("tlsprof_tcp_connections_total", port=str(port), closed_by="unknown"),
        "unknown": v("tlsprof_tcp_connections_total", port=str(port), closed_by="unknown"),
        "requests": v("tlsprof_requests_per_connection_sum", port=str(port)),
        # the same exchanges, counted as they happen (not at the connection's close)
        "exchanges": v("tlsprof_exchanges_total", port=str(port)),
        "hit_cost": v("tlsprof_probe_hit_cost_seconds", probe="uprobe"),
        "hit_cost_emulated": v("tlsprof_probe_hit_cost_seconds", probe="uprobe_emulated"),
        "hit_cost_return": v("tlsprof_probe_hit_cost_seconds", probe="uretprobe"),
        "errors": {l["kind"]: val for n, l, val in s if n == "tlsprof_kernel_errors_total" and val},
        "mode": {l["mode"] for n, l, val in s if n == "tlsprof_mode_info"},
        "sampled": {l["figure"] for n, l, val in s if n == "tlsprof_sampled_figure_info"},
    }


def unreported(f: dict) -> float:
    """Connections counted (a handshake, or none offered) that have neither ended (as the agent
    counts) nor are open (ss)."""
    return f["ok"] + f["failed"] + f["no_tls"] - f["ended"] - f["open"]


def settle(agent, port: int, connections: float) -> dict:
    """Waits until every connection so far is counted: each has ended (counted by the agent:
    as the kernel reported its close, or found ended unreported) or is still open on the
    server (ss), and each is one handshake or a connection without TLS; then two more agent
    scans (anything still in flight is counted by then) and the same check again. `open` is
    ss's count of server sockets not closed yet (harness.clients.ss_open: not the FIN_WAIT2
    minisockets that outlive a closed one, which the agent has counted ended). An end the
    kernel never reported is found at the agent's second reading of the port's sockets
    after it (agent/src/conns/unseen.rs): 1-2 s apart here, at most 20 s on a host where
    the readings cost more."""
    def done():
        f = figures(agent, port)
        f["open"] = ss_open(port)
        return f if f["ended"] + f["open"] >= connections and unreported(f) == 0 else None
    what = f"{connections} connections settled"
    try:
        wait_for(done, 45, what)
        agent.settle()
        return wait_for(done, 10, what)
    except AssertionError as e:
        raise AssertionError(f"{e}; at the end: {figures(agent, port)}, open (ss): {ss_open(port)}") from None


def delta(a: dict, b: dict) -> dict:
    return {k: b[k] - a[k] for k in a if isinstance(a[k], (int, float))}


@pytest.mark.skipif(not have("ab"), reason="ab not installed")
def test_duty_cycle_follows_load_counts_stay_exact(workdir):
    """Light load: the probes cost well under the budget and stay attached (duty 1), every
    handshake is timed. Heavy load (ab, a new connection per request): the probes are away
    most of each cycle, their cost stays within the budget, only part of the handshakes is
    timed, and yet handshakes, connections and requests are counted exactly. Light again:
    back to 1."""
    nginx = Nginx(workdir, workers=1)
    (worker,) = nginx.workers()
    try:
        with Agent("--pid", str(nginx.pid), "--overhead-budget", f"{BUDGET:.1%}", scan_interval=1.0) as agent:
            agent.wait_attached([worker])
            f0 = figures(agent, nginx.port)
            assert f0["mode"] == {"default"}, f0
            assert "tlsprof_handshake_cpu_seconds" in f0["sampled"], f0
            assert 1e-7 < f0["hit_cost"] < 1e-3, f"one uprobe hit measured at {f0['hit_cost']} s"
            assert 1e-8 < f0["hit_cost_emulated"] <= f0["hit_cost"] * 1.5, f0

            # Light: 8 connections a second for two duty cycles (2 s each). A light server is
            # budgeted as if it used half a CPU (duty.rs LIGHT_SERVER): 1 ms of probes a cycle at
            # this budget. The dearest probes seen, in a CI run under CPU contention, cost 26 us
            # a handshake (traps and programs; 6 us on a quiet machine): 16 handshakes a cycle
            # are 0.4 ms of it. At 15 a second that run lost 9 of 67 to a closed window.
            light = paced_connections(nginx.port, LIGHT_RATE, 4.5)
            f1 = settle(agent, nginx.port, light)
            d1 = delta(f0, f1)
            assert (d1["ok"], d1["failed"], d1["accepted"], d1["requests"], d1["exchanges"]) == \
                (light, 0, light, light, light), d1
            assert d1["failed_cpu"] == 0, f"no handshake failed, yet failed handshakes' CPU: {d1}"
            assert f1["duty"] == 1.0, f"light load, duty {f1['duty']}: {f1}"
            assert d1["measured"] == light, f"every handshake timed under light load: {d1}"

            # Heavy: ab for long enough that whole cycles (2 s) run under it; the duty cycle
            # of the last complete one is read while ab still runs.
            seen = {}

            def sample_duty():
                time.sleep(6.5)
                seen["duty"] = figures(agent, nginx.port)["duty"]

            sampler = threading.Thread(target=sample_duty)
            sampler.start()
            t0 = time.monotonic()
            heavy = ab(nginx.port, seconds=8)
            span = time.monotonic() - t0
            sampler.join()
            # ab's in-flight connections at its exit: at most its concurrency (8)
            f2 = settle(agent, nginx.port, f1["ended"] + f1["open"] + heavy)
            d2 = delta(f1, f2)
            # What the probes would cost if attached throughout, from the agent's own figures:
            # their CPU per timed connection at ab's rate. The budget over that is the duty
            # cycle the mechanism should reach; the load must be heavy enough for it to be
            # well below 1 (ab made 600-900 connections a second here: an expected duty of
            # 0.1-0.2), and then the duty read while ab ran is below 1, fewer handshakes are
            # timed than made, and the probes' cost stays within the budget (one cycle's
            # saved allowance and the removal's tail over 8 s: up to ~25% over it).
            assert d2["measured"] > 0, f"no handshake timed under heavy load: {d2}"
            expected = BUDGET / (d2["probe_cpu"] / d2["measured"] * heavy / span)
            assert expected < 0.5, f"ab made only {heavy} connections in {span:.0f} s: no heavy load ({d2})"
            assert seen["duty"] < 1.0, f"heavy load, duty {seen['duty']} (expected about {expected:.2f}): {d2}"
            assert d2["measured"] < d2["ok"], f"handshakes timed in windows only: {d2}"
            assert d2["probe_cpu"] / span <= BUDGET * 1.5, \
                f"the probes cost {d2['probe_cpu'] / span:.2%} of a CPU, budget {BUDGET:.1%}: {d2}"
            # Every connection is one handshake; ab's aborted in-flight connections at the end
            # of -t (at most its concurrency) may have finished theirs without a request.
            # Each accepted connection has ended or is open, exactly: under this contention the
            # kernel reports no close for a few (a CI run: 4 of 17,699), which the agent finds
            # ended all the same (closed_by="unknown": agent/src/conns/unseen.rs).
            assert d2["ok"] + d2["failed"] + d2["no_tls"] == d2["accepted"], d2
            assert d2["accepted"] == d2["ended"] + f2["open"] - f1["open"], (d2, f1["open"], f2["open"])
            figure("budget_connections_unreported", d2["unknown"])
            assert heavy <= d2["ok"] <= heavy + 8 and d2["failed"] + d2["no_tls"] <= 8, (heavy, d2)
            # Every request ab completed is one exchange, counted as it happened; the requests
            # summed at the connections' close lack those of a connection whose close went
            # unreported (a CI run: 2 unreported, 7,535 requests for ab's 7,536).
            assert heavy <= d2["exchanges"] <= heavy + 8, (heavy, d2)
            assert heavy - d2["unknown"] <= d2["requests"] <= d2["exchanges"], (heavy, d2)

            # Exact counts while the probes come and go (right after the heavy load, the
            # probes are away for the rest of the cycle, and back at the next): exactly N
            # connections from a client that counts its own.
            n = 600
            got = https_connections(nginx.port, n, concurrency=4)
            f3 = settle(agent, nginx.port, f2["ended"] + f2["open"] + n)
            d3 = delta(f2, f3)
            assert (got["ok"], got["failed"]) == (n, 0), got
            assert (d3["ok"], d3["failed"], d3["accepted"], d3["ended"] + d3["open"], d3["requests"], d3["exchanges"]) \
                == (n, 0, n, n, n, n), d3
            # None failed: a handshake the probes saw begin, and whose end came while they
            # were away, is not one that failed when its connection object is freed later
            # (bpf/hs_objects.bpf.h, ssl_free).
            assert d3["failed_cpu"] == 0, f"no handshake failed, yet failed handshakes' CPU: {d3}"

            # Light again: two full cycles under light load bring the duty back to 1 (the
            # heavy load may have left a debt of one cycle's allowance).
            light2 = paced_connections(nginx.port, LIGHT_RATE, 6.5)
            f4 = settle(agent, nginx.port, f3["ended"] + f3["open"] + light2)
            d4 = delta(f3, f4)
            assert (d4["ok"], d4["failed"]) == (light2, 0), d4
            assert f4["duty"] == 1.0, f"light load again, duty {f4['duty']}: {d4}"
    finally:
        nginx.stop()


@pytest.mark.skipif(not have("ab"), reason="ab not installed")
def test_exact_times_every_handshake(workdir):
    """--exact: the probes stay attached under heavy load (ab, a new connection per request:
    duty 1), every handshake is counted by them and timed, and their cost goes over what the
    default budget allows."""
    nginx = Nginx(workdir, workers=1)
    (worker,) = nginx.workers()
    try:
        with Agent("--pid", str(nginx.pid), "--exact", scan_interval=1.0) as agent:
            agent.wait_attached([worker])
            f0 = figures(agent, nginx.port)
            assert f0["mode"] == {"exact"} and not f0["sampled"], f0
            t0 = time.monotonic()
            heavy = ab(nginx.port, seconds=5)
            span = time.monotonic() - t0
            f1 = settle(agent, nginx.port, heavy)
            d = delta(f0, f1)
            # nothing was open before the load: what is open now is ss's count of it; every
            # connection ended or open, its close reported or found (the default-mode test above)
            counted = d["ok"] + d["failed"] + d["no_tls"]
            assert counted == d["accepted"] == d["ended"] + f1["open"] and counted - heavy <= 8, \
                (heavy, d, f1["open"])
            assert heavy <= d["ok"] <= heavy + 8 and d["measured"] == d["ok"], (heavy, d)
            assert f1["duty"] == 1.0, f1
            # about five hits per connection: two handshake calls (entry and return), SSL_free
            assert 4 * d["ok"] <= d["hits"] <= 7 * d["ok"], d
            # The cost: each hit's trap at one of the calibrated costs, scaled by what the
            # worker's own samples in traps show once there are enough of them (between half
            # and four times: agent/src/agent/trap_cost.rs), plus the programs' own run time,
            # which they time themselves: a return program reads the configuration and emits
            # the event (~1 us here), an entry one looks up and stores its thread.
            costs = [f1["hit_cost"], f1["hit_cost_emulated"], f1["hit_cost_return"]]
            per_hit = d["probe_program"] / d["hits"]
            assert 50e-9 < per_hit < 50e-6, f"the probe programs ran {per_hit * 1e9:.0f} ns a hit: {d}"
            traps = d["probe_cpu"] - d["probe_program"]
            low, high = TRAP_SCALE
            assert d["hits"] * min(costs) * low * 0.999 <= traps <= d["hits"] * max(costs) * high * 1.001, (costs, d)
            # what the budget of the test above would not have allowed
            assert d["probe_cpu"] / span > BUDGET, f"--exact probes cost {d['probe_cpu'] / span:.2%} of a CPU: {d}"
    finally:
        nginx.stop()


def test_bad_budget(workdir):
    """A budget that is not a percentage gets one line and a non-zero exit."""
    from harness.agent import run_tlsprof
    for bad in ("0%", "250%", "fast"):
        r = run_tlsprof("run", "--overhead-budget", bad)
        assert r.returncode != 0 and ("budget" in r.stderr.lower() or "percentage" in r.stderr), (bad, r.stderr)
        assert r.stderr.count("\n") <= 4 and "panicked" not in r.stderr, r.stderr
