"""The scenarios the kernel matrix runs on Debian's own kernels in QEMU (tests/test_kernels.py
boots each and runs this file inside; the host does not collect it, see conftest.py): every
count exact against what the clients and the kernel itself say, every label what the client
negotiated. Inside the guests the CPU is emulated in software, where an agent's start (its
programs loaded and verified, a probe hit's cost calibrated) takes seconds: the scenarios run
in a few agent sessions, one per class, each attached to several servers at once, and each
test reads what moved since it began (a mark). Small loads; TLSPROF_SLOW stretches every wait."""
import json
import os
import ssl
import subprocess
from pathlib import Path

import pytest

from harness.agent import Agent
from harness.clients import (failing_handshakes, https_connections, keepalive_connections, resuming_connections,
                             ss_time_wait)
from harness.metrics import churn, hook_info, settled, since, value
from harness.procs import have, wait_for
from harness.servers import GoTLS, HAProxy, Lighttpd, Nginx

pytestmark = pytest.mark.kernel_scenario

TLS13 = dict(version="TLSv1.3", cipher="TLS_AES_256_GCM_SHA384", group="x25519", cert="ecdsa_p256")
# OpenSSL 3.5 (Debian 13) offers and prefers the hybrid post-quantum X25519MLKEM768 in TLS
# 1.3: the clients here and a server on the same OpenSSL (nginx, HAProxy) agree on it.
PQ = ssl.OPENSSL_VERSION_INFO >= (3, 5)
OPENSSL_TLS13 = dict(TLS13, group="X25519MLKEM768" if PQ else "x25519")
FORCED12 = "ECDHE-ECDSA-AES128-GCM-SHA256"
TLS12 = dict(version="TLSv1.2", cipher="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", group="x25519", cert="ecdsa_p256")
LIGHTTPD_MODULES = [m for m in ("gnutls", "mbedtls", "wolfssl") if Path(f"/usr/lib/lighttpd/mod_{m}.so").exists()]


def handshakes(m, comm: str, **labels) -> float:
    return value(m, "tlsprof_handshakes_total", comm=comm, role="server", **labels)


def labelled_load(port: int) -> dict:
    """6 TLS 1.3 connections, 4 TLS 1.2 ones with a forced suite: the clients' own counts."""
    t13 = https_connections(port, 6, version="1.3", concurrency=2)
    t12 = https_connections(port, 4, version="1.2", ciphers=FORCED12, concurrency=2)
    assert (t13["ok"], t12["ok"]) == (6, 4), (t13, t12)
    assert t13["ciphers"] == {"TLS_AES_256_GCM_SHA384"} and t12["ciphers"] == {FORCED12}, (t13, t12)
    return {"tls13": 6, "tls12": 4}


def report_hooks(**seen):
    """Adds to what the kernel test reads of this guest's hooks (TLSPROF_HOOKS_OUT)."""
    if out := os.environ.get("TLSPROF_HOOKS_OUT"):
        p = Path(out)
        data = json.loads(p.read_text()) if p.exists() else {"hooks": {}}
        data["hooks"].update(seen.pop("hooks", {}))
        data.update(seen)
        p.write_text(json.dumps(data))


class Session:
    """Servers started, then one agent attached to all of them; stopped in reverse."""

    def __init__(self, workdir, servers: dict, *flags: str):
        self.servers = {}
        self.agent = None
        try:
            for name, start in servers.items():
                self.servers[name] = start(workdir)
            pids = [s.pid for s in self.servers.values()]
            self.agent = Agent(*[a for p in pids for a in ("--pid", str(p))], *flags)
            workers = [w for s in self.servers.values() if isinstance(s, Nginx) for w in s.workers()]
            self.agent.wait_attached(pids + workers)
        except BaseException:
            self.stop()
            raise

    def __getitem__(self, name):
        return self.servers[name]

    def stop(self):
        if self.agent:
            self.agent.stop()
        for s in self.servers.values():
            s.stop()


def session(workdir, servers: dict, *flags: str):
    s = Session(workdir, servers, *flags)
    yield s
    s.stop()


# ------------------------------------------------------------------ the default mode

@pytest.fixture(scope="class")
def default_mode(workdir):
    """One agent in the default mode, attached to nginx (twice: one closing after each
    response), lighttpd on GnuTLS and HAProxy. Its overhead budget is 20%: in an emulated
    guest a hit's trap and program run 10-50 times slower than on hardware, and the budget
    charges the traps what the sampler sees them cost (up to 4 times the calibration,
    agent/trap_cost.rs); at 5% the trixie guest's probes missed one of eight handshakes in a
    row in one CI run, at the default 0.5% they could detach at once."""
    servers = {"nginx": lambda d: Nginx(d, workers=1, resumption=True),
               "nginx_close": lambda d: Nginx(d, workers=1, extra_server="keepalive_timeout 0;")}
    if have("lighttpd") and "gnutls" in LIGHTTPD_MODULES:
        servers["lighttpd"] = lambda d: Lighttpd(d, keepalive=2)
    if have("haproxy"):
        servers["haproxy"] = lambda d: HAProxy(d)
    yield from session(workdir, servers, "--overhead-budget", "20%")


@pytest.fixture(scope="class")
def exact(workdir, gotls_bin):
    """One agent with --exact, attached to nginx, lighttpd on each TLS library it has a
    module for, and the Go crypto/tls server: the probes count and time every handshake."""
    servers = {"nginx": lambda d: Nginx(d, workers=1), "gotls": lambda d: GoTLS(d, gotls_bin)}
    if have("lighttpd"):
        for mod in LIGHTTPD_MODULES:
            servers[f"lighttpd_{mod}"] = lambda d, mod=mod: lighttpd_on(d, mod)
    yield from session(workdir, servers, "--exact", "--sample-hz", "0")


def lighttpd_on(workdir, mod: str) -> Lighttpd:
    """lighttpd on one TLS module, with an ECDSA key, else an RSA one: Debian 13's lighttpd
    1.4.79 on mbed TLS 3.6 crashes at start on the ECDSA key (`lighttpd -tt` too)."""
    try:
        return Lighttpd(workdir, module=mod)
    except subprocess.CalledProcessError:
        return Lighttpd(workdir, module=mod, cert="rsa2048")


class TestDefaultMode:
    """The default mode's session: each test reads what moved since it began."""

    def test_hooks_reported(self, default_mode):
        """One hook (or none, or not_needed) per kernel capability, in the log and the metric;
        where the kernel test asks, they are written out for it (TLSPROF_HOOKS_OUT)."""
        m = default_mode.agent.scrape()
        hooks = hook_info(m)
        mode = next(l["mode"] for n, l, v in m if n == "tlsprof_mode_info")
        log = default_mode.agent.output()
        for cap in ["scheduler", "processes", "connections", "resets", "send_capture", "read_side", "hello_capture",
                    "send_side",
                    "connection_storage", "capture_loop"]:
            assert cap in hooks, (cap, hooks)
        assert hooks["connections"] != "none", hooks
        for cap, hook in hooks.items():
            if hook not in ("none", "not_needed") and cap not in ("connection_storage", "capture_loop"):
                assert f"kernel: {cap} by {hook}" in log, (cap, hook, log[-3000:])
        # the handshake uprobes shared per library file (tracefs: the guest's, or mounted by tlsprof)
        assert "uprobes: shared per file" in log, log[-3000:]
        report_hooks(hooks=hooks, mode=mode, release=os.uname().release)

    def test_nginx_counts_and_labels(self, default_mode):
        """nginx: every handshake counted once, labelled with what the client negotiated (TLS
        1.3, TLS 1.2 with a forced suite), and resumption as the client saw it."""
        base = default_mode.agent.mark()
        labelled_load(default_mode["nginx"].port)
        r = resuming_connections(default_mode["nginx"].port, 5, version="1.2")
        assert r["failed"] == 0 and r["full"] + r["resumed"] == 5 and r["resumed"] >= 3, r
        default_mode.agent.wait_value("tlsprof_handshakes_total", 15, base=base, comm="nginx", result="ok")
        m = since(default_mode.agent.scrape(), base)
        assert handshakes(m, "nginx", result="ok") == 15
        assert handshakes(m, "nginx", result="ok", resumed="false", **OPENSSL_TLS13) == 6
        assert handshakes(m, "nginx", result="ok", resumed="false", **TLS12) == 4
        assert handshakes(m, "nginx", result="ok", version="TLSv1.2", resumed="true", cert="none") == r["resumed"]
        assert handshakes(m, "nginx", result="failed") == 0
        assert value(m, "tlsprof_handshakes_unlabelled_total", comm="nginx") == 0

    def test_default_mode_with_its_budget(self, default_mode):
        """The default mode is on, with its overhead budget: under light load the handshake
        probes stay attached (duty cycle 1) and time every handshake that the wire counts."""
        base = default_mode.agent.mark()
        c = https_connections(default_mode["nginx"].port, 8, version="1.3", concurrency=1)
        assert c["ok"] == 8, c
        default_mode.agent.wait_value("tlsprof_handshake_cpu_seconds_count", 8, base=base, comm="nginx")
        now = default_mode.agent.scrape()
        m = since(now, base)
        assert value(now, "tlsprof_mode_info", mode="default", overhead_budget="0.2") == 1
        assert handshakes(m, "nginx", result="ok", **OPENSSL_TLS13) == 8
        assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx", **OPENSSL_TLS13) == 8
        assert value(now, "tlsprof_probe_duty_cycle", comm="nginx") == 1
        assert value(m, "tlsprof_probe_hits_total", comm="nginx") >= 8
        assert value(now, "tlsprof_sampled_figure_info", figure="tlsprof_handshake_cpu_seconds") == 1

    def test_client_hellos(self, default_mode):
        """8 TLS 1.3 and 4 TLS 1.2 connections: 12 ClientHellos read, none unreadable, cut,
        lost or malformed, whichever hook serves the capture here; the 8 TLS 1.3 clients'
        key shares counted: OpenSSL 3.5 (Debian 13) sends two, the post-quantum
        X25519MLKEM768 and x25519, older ones x25519 alone; the TLS 1.2 ones send none."""
        port = default_mode["nginx"].port  # not nginx_close: its TIME_WAIT count is another test's
        base = default_mode.agent.mark()
        t13 = https_connections(port, 8, version="1.3", concurrency=2)
        t12 = https_connections(port, 4, version="1.2", concurrency=2)
        assert (t13["ok"], t12["ok"]) == (8, 4), (t13, t12)

        def read():
            m = since(default_mode.agent.scrape(), base)
            hellos = sum(v for n, l, v in m if n == "tlsprof_client_hellos_total" and l.get("port") == str(port))
            unread = {r: value(m, "tlsprof_client_hellos_unread_total", comm="nginx", reason=r)
                      for r in ("unreadable", "cut", "lost", "malformed")}
            shares = {g: value(m, "tlsprof_client_offers_total", comm="nginx", port=str(port), offer="key_share",
                               value=g) for g in ("X25519MLKEM768", "x25519")}
            return hellos, unread, shares
        wait_for(lambda: read()[0] + sum(read()[1].values()) >= 12, 20, "12 ClientHellos read")
        default_mode.agent.settle()
        n, unread, shares = read()
        assert n == 12 and unread == {"unreadable": 0, "cut": 0, "lost": 0, "malformed": 0}, (n, unread)
        assert shares == {"X25519MLKEM768": 8 if PQ else 0, "x25519": 8}, shares
        report_hooks(hooks={"hello_capture": hook_info(default_mode.agent.scrape())["hello_capture"]})

    def test_requests_per_connection(self, default_mode):
        """5 keep-alive connections of 3 requests each, the client closing: 15 requests, 5
        connections, every one closed by the client."""
        port = default_mode["nginx"].port
        base = churn(default_mode.agent, port)
        client = keepalive_connections(port, 5, 3, end="close")
        assert client == {"requests": 15, "connections": 5, "failed": 0}, client
        c = settled(default_mode.agent, port, 5, base)
        assert (c["requests"], c["conns"], c["client"]) == (15, 5, 5), c

    def test_time_wait_equals_ss(self, default_mode):
        """nginx closes each connection after its response (keepalive_timeout 0) and the
        clients read to the end: a server-side TIME_WAIT each, as many as ss shows."""
        port = default_mode["nginx_close"].port
        client = keepalive_connections(port, 6, 1, end="eof")
        assert client["connections"] == 6 and client["failed"] == 0, client
        c = settled(default_mode.agent, port, 6)
        kernel = ss_time_wait(port)
        assert kernel == 6 and c["time_wait"] == 6 and c["server"] == 6, (c, kernel)
        # the gauge is read at the agent's sock_diag dumps, spaced by their cost
        sockets = wait_for(lambda: churn(default_mode.agent, port)["time_wait_sockets"] == kernel and kernel, 20,
                           f"the TIME_WAIT gauge of port {port} to read {kernel}")
        assert sockets == 6

    def test_lighttpd_gnutls(self, default_mode):
        """lighttpd with mod_gnutls (no OpenSSL): every handshake counted from what the server
        sends, labelled as the client negotiated, and requests per connection exact (it closes
        after 2 requests)."""
        if "lighttpd" not in default_mode.servers:
            pytest.skip("lighttpd with mod_gnutls not installed")
        port = default_mode["lighttpd"].port
        base = default_mode.agent.mark()
        labelled_load(port)
        default_mode.agent.wait_value("tlsprof_handshakes_total", 10, base=base, comm="lighttpd", result="ok")
        m = since(default_mode.agent.scrape(), base)
        assert handshakes(m, "lighttpd", result="ok", **TLS13) == 6
        assert handshakes(m, "lighttpd", result="ok", **TLS12) == 4
        client = keepalive_connections(port, 3, 2, end="eof")
        assert client == {"requests": 6, "connections": 3, "failed": 0}, client
        c = settled(default_mode.agent, port, 13)
        assert (c["requests"] - 10, c["conns"]) == (6, 13), c

    def test_haproxy(self, default_mode):
        """HAProxy terminating TLS itself: every handshake counted once."""
        if "haproxy" not in default_mode.servers:
            pytest.skip("haproxy not installed")
        base = default_mode.agent.mark()
        c = https_connections(default_mode["haproxy"].port, 8, version="1.3", concurrency=2)
        assert c["ok"] == 8, c
        default_mode.agent.wait_value("tlsprof_handshakes_total", 8, base=base, comm="haproxy", result="ok")
        m = since(default_mode.agent.scrape(), base)
        assert handshakes(m, "haproxy", result="ok", **OPENSSL_TLS13) == 8
        assert handshakes(m, "haproxy", result="failed") == 0


# ------------------------------------------------------------------ --exact

class TestExact:
    """The --exact session: each test reads what moved since it began."""

    def test_exact_mode(self, exact):
        """The probes count every handshake, with the labels from the wire; a connection its
        handshake call read is TLS (the read side), not a failed handshake."""
        base = exact.agent.mark()
        labelled_load(exact["nginx"].port)
        exact.agent.wait_value("tlsprof_handshakes_total", 10, base=base, comm="nginx", result="ok")
        now = exact.agent.scrape()
        m = since(now, base)
        read_side = hook_info(now)["read_side"]
        assert read_side not in ("none", "not_needed"), read_side
        report_hooks(hooks={"read_side (--exact)": read_side})
        assert value(now, "tlsprof_mode_info", mode="exact") == 1
        assert handshakes(m, "nginx", result="ok", **OPENSSL_TLS13) == 6
        assert handshakes(m, "nginx", result="ok", **TLS12) == 4
        assert handshakes(m, "nginx", result="failed") == 0

    def test_post_quantum_group_beside_x25519(self, exact):
        """Clients offering the library's default groups (X25519MLKEM768 first with OpenSSL
        3.5) and clients offering X25519 alone: each handshake labelled with the group it
        negotiated, each group's handshakes timed, so their CPU per handshake stands side
        by side (tlsprof_handshake_cpu_seconds by group)."""
        base = exact.agent.mark()
        port = exact["nginx"].port
        default = https_connections(port, 4, version="1.3", concurrency=2)
        # forced only where the default differs: OpenSSL 1.1.1's Python cannot name X25519 alone
        x25519 = https_connections(port, 4, version="1.3", concurrency=2, group="X25519" if PQ else None)
        assert default["ok"] == x25519["ok"] == 4, (default, x25519)
        exact.agent.wait_value("tlsprof_handshake_cpu_seconds_count", 8, base=base, comm="nginx")
        m = since(exact.agent.scrape(), base)
        groups = {OPENSSL_TLS13["group"]: 4}
        groups["x25519"] = groups.get("x25519", 0) + 4
        for group, n in groups.items():
            assert handshakes(m, "nginx", result="ok", version="TLSv1.3", group=group) == n, (group, m)
            assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx", group=group) == n, group
            assert value(m, "tlsprof_handshake_cpu_seconds_sum", comm="nginx", group=group) > 0, group

    def test_other_stacks_timed(self, exact):
        """lighttpd on GnuTLS, mbedTLS and wolfSSL: each library's handshake probes (one
        return program per way its return value reads) time every handshake the client made,
        as the server'exact."""
        mods = [m for m in LIGHTTPD_MODULES if f"lighttpd_{m}" in exact.servers]
        if not mods:
            pytest.skip("no lighttpd TLS module installed")
        for mod in mods:
            assert f"via symbols ({mod})" in exact.agent.output(), exact.agent.output()
        base = exact.agent.mark()
        for mod in mods:
            c = https_connections(exact[f"lighttpd_{mod}"].port, 4, version="1.2", concurrency=1)
            assert c["ok"] == 4, c
        n = 4 * len(mods)
        exact.agent.wait_value("tlsprof_handshake_cpu_seconds_count", n, base=base, comm="lighttpd", role="server")
        m = since(exact.agent.scrape(), base)
        assert handshakes(m, "lighttpd", result="ok") == n
        assert value(m, "tlsprof_handshake_duration_seconds_count", comm="lighttpd", role="server") == n
        assert value(m, "tlsprof_handshake_cpu_seconds_sum", comm="lighttpd") > 0

    def test_go_server_timed(self, exact):
        """Go's crypto/tls: the probes on serverHandshake (entry, each return instruction) and
        the read side that follows its goroutine time every handshake the client made,
        labelled as it negotiated (but for a goroutine moved before its first read, below);
        a refused one is failed."""
        assert "via symbols (crypto/tls)" in exact.agent.output(), exact.agent.output()
        port = exact["gotls"].port
        base = exact.agent.mark()
        c = https_connections(port, 6, version="1.3", concurrency=2)
        assert c["ok"] == 6, c
        want = dict(comm="gotls", role="server", version="TLSv1.3", cert="ecdsa_p256")
        # timed first, whatever the labels, then labelled: a failure says which went wrong
        # (a CI run under load once saw 2 of 6 with these labels, and nothing more)
        try:
            exact.agent.wait_value("tlsprof_handshake_cpu_seconds_count", 6, base=base, comm="gotls")
        except AssertionError as e:
            m = since(exact.agent.scrape(), base)
            seen = {n: v for n, v in ((n, value(m, n, comm="gotls")) for n in (
                "tlsprof_handshakes_total", "tlsprof_handshakes_unlabelled_total", "tlsprof_probe_hits_total"))}
            errors = {l["kind"]: v for n, l, v in m if n == "tlsprof_kernel_errors_total" and v}
            raise AssertionError(f"{e}; since the load: {seen}, kernel errors {errors}") from None
        # Labelled as negotiated, every one but those whose goroutine Go moved to another
        # thread between serverHandshake's entry and its first read of the connection (an
        # asynchronous preemption: under emulation, 1 of 6 in about a third of the runs):
        # the probe's figure does not know its connection, so it is timed but labelled other;
        # the wire, which counts the handshakes here, still labels it (docs/how-it-works.md, "Go").
        m = since(exact.agent.scrape(), base)
        labelled = value(m, "tlsprof_handshake_cpu_seconds_count", **want)
        moved = value(m, "tlsprof_handshake_cpu_seconds_count", comm="gotls", version="other")
        labels = [(l, v) for n, l, v in m if n in ("tlsprof_handshakes_total", "tlsprof_handshake_cpu_seconds_count")
                  and l.get("comm") == "gotls" and v]
        assert labelled + moved == 6 and labelled >= 1, f"the Go handshakes' labels: {labels}"
        assert handshakes(m, "gotls", result="ok", version="TLSv1.3") == 6, labels
        assert failing_handshakes(port, 2, "DHE-RSA-AES128-GCM-SHA256") == 2
        exact.agent.wait_value("tlsprof_handshakes_total", 2, base=base, comm="gotls", result="failed")
        now = exact.agent.scrape()
        m = since(now, base)
        # the wire labels every one, a moved goroutine's too; the figures, all but those moved
        assert handshakes(m, "gotls", result="ok", version="TLSv1.3", cert="ecdsa_p256") == 6
        assert value(m, "tlsprof_handshake_duration_seconds_count", **want) == labelled
        assert value(m, "tlsprof_handshake_cpu_seconds_sum", **want) > 0
        assert value(now, "tlsprof_handshake_cpu_method_info", comm="gotls", method="probes") == 1


# ------------------------------------------------------------------ TLS after a preamble

def test_starttls(workdir):
    """An SMTP-like server that starts TLS after a plaintext exchange (tests/servers/
    starttls_server.py), 6 sessions by Python's smtplib: where the send capture walks with
    bpf_loop (5.17+), each handshake counted and labelled, each ClientHello read, the port
    named smtp; where it walks in a bounded loop (5.10), the preamble is not looked past
    (docs/servers.md): none counted, and the ClientHellos (read from packets) all the same."""
    import smtplib
    import sys
    import time

    from harness.certs import make_cert
    from harness.procs import ROOT, free_port, stop_pid, wait_port
    key, crt = make_cert(workdir)
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/servers/starttls_server.py"), str(port), str(crt),
                             str(key), "300"], stdout=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=60)
        with Agent("--pid", str(proc.pid), "--exact", "--sample-hz", "0") as agent:
            agent.wait_attached([proc.pid], timeout=120)
            base = agent.mark()
            ctx = ssl._create_unverified_context()
            for _ in range(6):
                with smtplib.SMTP("127.0.0.1", port, timeout=30) as c:
                    c.ehlo()
                    c.starttls(context=ctx)
                    c.ehlo()
            bounded = hook_info(agent.scrape()).get("capture_loop") == "bounded_loop"
            want = 0 if bounded else 6
            agent.wait_value("tlsprof_client_hellos_total", 6, base=base, timeout=60)
            if want:
                agent.wait_value("tlsprof_handshakes_total", 6, base=base, role="server", result="ok", timeout=60)
            else:
                time.sleep(2)
            m = since(agent.scrape(), base)
    finally:
        stop_pid(proc.pid)
        proc.wait(timeout=10)
    assert value(m, "tlsprof_client_hellos_total") == 6, m
    assert value(m, "tlsprof_handshakes_total", role="server", result="ok") == want, (bounded, m)
    assert value(m, "tlsprof_tls_connections_by_protocol_total", protocol="smtp") == want, (bounded, m)


# ------------------------------------------------------------------ the other hook chains

def test_kernel_estimate(workdir):
    """nginx with --no-handshake-probes: every handshake's CPU is the kernel estimate's
    (windows opened by the read side, closed by the send capture), one per handshake the
    client made, labelled as it negotiated."""
    s = Session(workdir, {"estimate": lambda d: Nginx(d, workers=1)}, "--no-handshake-probes", "--sample-hz", "0")
    try:
        c = https_connections(s["estimate"].port, 6, version="1.3", concurrency=2)
        assert c["ok"] == 6, c
        s.agent.wait_value("tlsprof_handshake_cpu_seconds_count", 6, comm="nginx", **OPENSSL_TLS13)
        m = s.agent.scrape()
        assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx") == 6
        assert value(m, "tlsprof_handshake_cpu_seconds_sum", comm="nginx") > 0
        assert handshakes(m, "nginx", result="ok", **OPENSSL_TLS13) == 6
        assert value(m, "tlsprof_handshake_cpu_method_info", comm="nginx", method="kernel_estimate") == 2
        assert value(m, "tlsprof_attached_probes") == 0
    finally:
        s.stop()


# The first hook of every chain that has another, avoided: the second choices serve.
SECOND_CHOICES = ["tp_btf/tcp_sendmsg_locked", "fentry", "fexit", "bpf_loop", "sk_storage",
                  "tp_btf/inet_sock_set_state", "tp_btf/tcp_receive_reset", "tp_btf/sock_recv_length"]


def test_second_choice_hooks(workdir):
    """--exact with the first hook of every chain avoided (--avoid-hook): connections and
    resets through raw tracepoints, connection state in a hash, and where the kernel has
    kprobes the server's sends through a kprobe walking with a bounded loop and the reads
    through a kretprobe. nginx: every handshake counted by the probes; with the send
    capture, labelled as the client negotiated; requests and who closed exact. Where
    nothing serves a capability (this machine has no kprobes), a warning says so and the
    metric says none."""
    avoid = [a for name in SECOND_CHOICES for a in ("--avoid-hook", name)]
    s = Session(workdir, {"second": lambda d: Nginx(d, workers=1)}, "--exact", "--sample-hz", "0", *avoid)
    try:
        agent, ng = s.agent, s["second"]
        m = agent.scrape()
        hooks, log = hook_info(m), agent.output()[-4000:]
        assert hooks["connections"] == "raw_tp/inet_sock_set_state", (hooks, log)
        assert hooks["resets"] == "raw_tp/tcp_receive_reset+tcp_send_reset", (hooks, log)
        assert hooks["connection_storage"] == "hash_map", (hooks, log)
        kprobes = os.path.exists("/sys/bus/event_source/devices/kprobe/type")
        if kprobes:
            assert (hooks["send_capture"], hooks["capture_loop"]) == ("kprobe/tcp_sendmsg_locked",
                                                                     "bounded_loop"), (hooks, log)
            assert hooks["read_side"] == "kretprobe/sock_recvmsg", (hooks, log)
        else:
            assert (hooks["send_capture"], hooks["read_side"]) == ("none", "none"), (hooks, log)
            for cap in ("send_capture", "read_side"):
                assert f"warning: kernel: no hook for {cap} (" in log, log

        client = keepalive_connections(ng.port, 5, 3, end="close")
        assert client == {"requests": 15, "connections": 5, "failed": 0}, client
        labelled_load(ng.port)
        agent.wait_value("tlsprof_handshakes_total", 15, comm="nginx", result="ok")
        m = agent.scrape()
        assert handshakes(m, "nginx", result="ok") == 15
        assert handshakes(m, "nginx", result="failed") == 0
        if kprobes:
            assert handshakes(m, "nginx", result="ok", **OPENSSL_TLS13) == 6 + 5
            assert handshakes(m, "nginx", result="ok", **TLS12) == 4
        c = settled(agent, ng.port, 15)
        # the 10 one-request connections end in a race of the two closes (Connection: close)
        assert (c["accepted"], c["client"] + c["server"] + c["reset"]) == (15, 15) and c["client"] >= 5, c
        if kprobes:
            assert (c["requests"], c["conns"]) == (25, 15), c
    finally:
        s.stop()
