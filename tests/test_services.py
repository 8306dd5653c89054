"""Servers beyond the web servers, from Debian 12's packages (tests/harness/services.py):
Postfix (SMTP STARTTLS and submissions), Dovecot (IMAP STARTTLS and IMAPS), PostgreSQL 15
(TLS after the SSLRequest), a Java HTTPS server on JSSE, and a TLS service that an
inetd-like parent starts per connection. Each gets exactly N TLS connections from its own
real client, whose count of handshakes made is the truth: tlsprof must count the same
handshakes (result="ok"), time each one (tlsprof_handshake_cpu_seconds_count, --exact) and
read each ClientHello (tlsprof_client_hellos_total), no more, no fewer; each server three
ways: by --pid, by --comm (the process that makes the handshakes), and with no selector at
all (tlsprof finds it by what its connections carry).

Where nothing tells tlsprof a port before its first connection (--comm naming a process a
parent that is not traced starts per connection; no selector and a server without a TLS
library or a master without one), that first connection teaches it the port: it is counted,
but its ClientHello came before it was followed (and, where it was taken on at the server's
answer, its CPU too). Each such port gets one connection first, asserted counted, then the
N counted exactly.

What makes them hard: the TLS handshake starts after a plaintext exchange (STARTTLS,
SSLRequest); the process that makes it is started for the connection (smtpd, imap-login,
a postmaster's backend, the inetd child), sometimes by a parent that maps no TLS library
(Postfix's and Dovecot's masters) or is not traced at all (the inetd parent); or the stack
is not a library at all (JSSE). Each test prints what the client and tlsprof counted."""
import subprocess
import time

import pytest

from harness import services
from harness.agent import TLSPROF, Agent
from harness.clients import https_connections
from harness.metrics import since, value
from harness.procs import stop_pid, wait_for
from harness.report import Report

N = 20
# How long tlsprof's counts may take to reach the client's once it is done. A count comes at
# the agent's next read of the kernel's events (every scan: 0.5 s here); the CPU figure of a
# process whose probes came while the kernel estimated its handshake (a process started per
# connection) comes tracker::WAIT (2 s) after its capture ended, so that the probes' figure
# for it, if any, is the one; under contention the agent reads later. Two more scans are
# waited for after (counted()); an event the kernel did not queue never comes.
SETTLE = 8.0
# A quiet spell between attach and a server's first traffic (test_java_jsse_mapping_openssl).
QUIET = 5.0


def need(name: str):
    why = services.available()[name]
    if why:
        pytest.skip(f"{why} (scripts/deps.sh test installs it)")


class Timed(dict):
    """Seconds each step of a test took, for its summary."""

    def __call__(self, step: str, f):
        t = time.monotonic()
        try:
            return f()
        finally:
            self[step] = round(time.monotonic() - t, 1)


def start_agent(timed: Timed, *args: str) -> Agent:
    """`tlsprof run --exact` (every handshake timed: its CPU count is exact), once its first
    scan is done (the ready file appears then, listing what it attached to)."""
    def start():
        agent = Agent(*args, "--exact")
        try:
            wait_for(lambda: agent.ready_path.exists(), 15, f"tlsprof's first scan (log: {agent.output()[-2000:]})")
        except BaseException:
            agent.stop()
            raise
        return agent
    return timed("agent start", start)


def attached(agent: Agent, pid: int, timeout: float = 3.0) -> bool:
    """Whether the agent lists the process as attached (a master that maps no TLS library
    may never be): waited for a little, not asserted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent.attached(pid):
            return True
        time.sleep(0.1)
    return False


def counted(agent: Agent, base: list, expected: int, want=("ok", "cpu", "hellos")) -> dict:
    """tlsprof's counts of server handshakes since `base` (a mark()), once those named in
    `want` reach `expected` or SETTLE seconds have passed, after two more scans (so that a
    count past `expected` shows too)."""
    def now():
        m = since(agent.scrape(), base)
        return {
            "ok": value(m, "tlsprof_handshakes_total", role="server", result="ok"),
            "failed": value(m, "tlsprof_handshakes_total", role="server", result="failed"),
            "cpu": value(m, "tlsprof_handshake_cpu_seconds_count", role="server"),
            "hellos": value(m, "tlsprof_client_hellos_total"),
        }
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        c = now()
        if all(c[k] >= expected for k in want):
            break
        time.sleep(0.2)
    agent.settle()
    return {k: int(v) for k, v in now().items()}


def run(agent: Agent, timed: Timed, name: str, client) -> dict:
    """One client run against a started agent: the client's counts and tlsprof's."""
    base = agent.mark()
    c = timed(f"{name} client", client)
    got = timed(f"{name} tlsprof", lambda: counted(agent, base, c["ok"]))
    print(f"{name}: client {c}; tlsprof {got} in {timed[f'{name} tlsprof']} s")
    return {"client": c, "tlsprof": got}


def teach(agent: Agent, timed: Timed, name: str, port: int, client):
    """One connection to a port tlsprof cannot know before (see above): counted, and once
    the agent says it watches the port (or found its server there), the next are followed
    from their accept."""
    base = agent.mark()
    c = timed(f"{name} first", client)
    assert c["ok"] == 1, c
    # the first connection's ClientHello came before its port was known: waited for are its
    # count, which comes after the agent learned the port from what the server sent and
    # watched it, and its CPU figure, which may come 2 s later (else it would be counted
    # in the next run's); then two scans
    got = counted(agent, base, 1, want=("ok", "cpu"))
    print(f"{name} first connection: client {c}; tlsprof {got}")
    assert got["ok"] == 1 and got["failed"] == 0, got


def check(name: str, runs: dict, timed: Timed, attach: dict, started: float):
    """The client made exactly N handshakes in all; tlsprof counted, timed and read the
    ClientHellos of exactly as many."""
    client_ok = sum(r["client"]["ok"] for r in runs.values())
    total = {k: sum(r["tlsprof"][k] for r in runs.values()) for k in ("ok", "cpu", "hellos", "failed")}
    summary = (f"{name}: client ok {client_ok}/{N}; tlsprof ok {total['ok']}, with CPU {total['cpu']}, "
               f"ClientHellos {total['hellos']}, failed {total['failed']}; attached {attach}; "
               f"per client {runs}; seconds {dict(timed)}, {time.monotonic() - started:.1f} in all")
    print(summary)
    assert client_ok == N, summary
    assert {k: total[k] for k in ("ok", "cpu", "hellos", "failed")} == {"ok": N, "cpu": N, "hellos": N, "failed": 0}, \
        summary


SELECTORS = ["pid", "comm", "none"]


def selector(how: str, pid: int, comm: str) -> list[str]:
    return {"pid": ["--pid", str(pid)], "comm": ["--comm", comm], "none": []}[how]


@pytest.mark.parametrize("how", SELECTORS)
def test_postfix_starttls_and_submissions(workdir, how):
    """Postfix's master (no TLS library) starts smtpd when connections come and keeps it
    for the next ones: 10 SMTP sessions upgraded by STARTTLS, 10 on the submissions port
    (implicit TLS)."""
    need("postfix")
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: services.Postfix(workdir))
    try:
        with start_agent(timed, *selector(how, srv.pid, "smtpd")) as agent:
            attach = {"master": attached(agent, srv.pid)}
            if how != "pid":
                # smtpd is started for the first connection, by a master tlsprof does not trace
                teach(agent, timed, "starttls", srv.port, lambda: services.smtp_starttls_connections(srv.port, 1))
                teach(agent, timed, "submissions", srv.submissions_port,
                      lambda: services.smtps_connections(srv.submissions_port, 1))
            runs = {
                "starttls": run(agent, timed, "starttls", lambda: services.smtp_starttls_connections(srv.port, N // 2)),
                "submissions": run(agent, timed, "submissions",
                                   lambda: services.smtps_connections(srv.submissions_port, N // 2)),
            }
            attach["smtpd"] = {p: agent.attached(p) for p in srv.smtpds()}
            protocols = {p: agent.value("tlsprof_tls_connections_by_protocol_total", port=str(p), protocol="smtp")
                         for p in (srv.port, srv.submissions_port)}
    finally:
        srv.stop()
    check("postfix", runs, timed, attach, started)
    # STARTTLS's port is named by its preamble; the submissions port has none to name it by
    assert protocols[srv.port] >= N // 2 and protocols[srv.submissions_port] == 0, protocols


@pytest.mark.parametrize("how", SELECTORS)
def test_dovecot_starttls_and_imaps(workdir, how):
    """Dovecot's master (no TLS library) starts an imap-login process per connection: 10
    IMAP sessions upgraded by STARTTLS, 10 on the IMAPS port."""
    need("dovecot")
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: services.Dovecot(workdir))
    try:
        with start_agent(timed, *selector(how, srv.pid, "imap-login")) as agent:
            attach = {"master": attached(agent, srv.pid)}
            if how != "pid":
                teach(agent, timed, "starttls", srv.port, lambda: services.imap_starttls_connections(srv.port, 1))
                teach(agent, timed, "imaps", srv.imaps_port, lambda: services.imaps_connections(srv.imaps_port, 1))
            runs = {
                "starttls": run(agent, timed, "starttls", lambda: services.imap_starttls_connections(srv.port, N // 2)),
                "imaps": run(agent, timed, "imaps", lambda: services.imaps_connections(srv.imaps_port, N // 2)),
            }
            imap = agent.value("tlsprof_tls_connections_by_protocol_total", port=str(srv.port), protocol="imap")
    finally:
        srv.stop()
    check("dovecot", runs, timed, attach, started)
    assert imap >= N // 2, imap


@pytest.mark.parametrize("how", SELECTORS)
def test_postgres_sslrequest(workdir, how):
    """PostgreSQL 15: pgbench over TLS, a new connection per transaction (-C), each a new
    backend forked by the postmaster, which answers the SSLRequest before the handshake."""
    need("postgres")
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: services.Postgres(workdir))
    try:
        with start_agent(timed, *selector(how, srv.pid, "postgres")) as agent:
            attach = {"postmaster": attached(agent, srv.pid)}
            runs = {"pgbench": run(agent, timed, "pgbench", lambda: services.pgbench_connections(srv.port, N))}
            pg = agent.value("tlsprof_tls_connections_by_protocol_total", port=str(srv.port), protocol="postgresql")
    finally:
        srv.stop()
    check("postgres", runs, timed, attach, started)
    assert pg == N, pg


def test_postgres_report_and_top_name_the_protocol(workdir):
    """`tlsprof report` and `tlsprof top`, each attached by itself, name the port's protocol
    from its traffic (the SSLRequest before TLS) and give advice that fits a database:
    pgbench -C opens a connection per transaction, which a connection pool would carry."""
    need("postgres")
    srv = services.Postgres(workdir)
    try:
        r = Report(srv.pid, lambda: services.pgbench_connections(srv.port, 2 * N))
        top = subprocess.Popen([str(TLSPROF), "top", "--once", "--interval", "6", "--comm", "postgres"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert "measuring" in top.stderr.readline()
            c = services.pgbench_connections(srv.port, N)
            out, err = top.communicate(timeout=60)
        finally:
            if top.poll() is None:
                stop_pid(top.pid)
    finally:
        srv.stop()
    assert r.client["ok"] == 2 * N and c["ok"] == N, (r.client, c)
    port = str(srv.port)
    proc = r.proc("postgres")
    assert proc["ports"][port]["protocol"] == "postgresql", proc["ports"]
    assert proc["ports"][port]["protocols"] == {"postgresql": 2 * N}, proc["ports"]
    assert ["postgresql"] == [row[1] for row in r.table("| Port | Protocol") if row[0] == port], r.text
    keepalive = r.one("keepalive")
    # a database has exchanges, not requests; and the fix is a pool, not keep-alive settings
    assert "exchanges" in keepalive["title"] and "PgBouncer" in keepalive["fix"], keepalive
    assert "keepalive_requests" not in keepalive["fix"], keepalive
    assert top.returncode == 0, err
    rows = [line.split() for line in out.splitlines() if line.startswith(port + " ")]
    assert rows and rows[0][1] == "postgresql", out


@pytest.mark.parametrize("how", SELECTORS)
def test_java_jsse(workdir, how):
    """An HTTPS server on the JDK's own TLS stack: the JVM maps no TLS library."""
    need("java")
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: services.JsseServer(workdir))
    try:
        with start_agent(timed, *selector(how, srv.pid, "java")) as agent:
            attach = {"java": attached(agent, srv.pid, timeout=0.5 if how == "none" else 3.0)}
            if how == "none":
                # nothing says it serves TLS before it does
                teach(agent, timed, "https", srv.port, lambda: https_connections(srv.port, 1, concurrency=1))
            runs = {"https": run(agent, timed, "https", lambda: https_connections(srv.port, N, concurrency=2, timeout=60))}
            method = agent.value("tlsprof_handshake_cpu_method_info", method="kernel_estimate", reason="no_tls_library")
            found = agent.output()
    finally:
        srv.stop()
    check("java", runs, timed, attach, started)
    assert method >= 1, found[-2000:]
    if how == "none":
        assert f"found by its connections (TLS on port {srv.port})" in found, found[-2000:]


@pytest.mark.parametrize("how", ["comm", "none"])
def test_java_jsse_mapping_openssl(workdir, how):
    """A server whose probes never see its handshakes: the JVM maps OpenSSL (LD_PRELOAD), so
    its probes are attached, and JSSE terminates every connection's TLS, as an HCL Domino
    task's own stack does while the OpenSSL it maps serves its outbound calls. Every
    handshake still gets a CPU figure (the kernel estimate: from the first, while tlsprof
    judges the probes, and for good once it finds they miss them), and the method says why."""
    need("java")
    lib = services.libssl()
    if lib is None:
        pytest.skip("no libssl.so.3 for the dynamic loader (ldconfig -p)")
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: services.JsseServer(workdir, preload=lib))
    try:
        with start_agent(timed, *selector(how, srv.pid, "java")) as agent:
            attach = {"java": attached(agent, srv.pid)}
            assert attach["java"], agent.output()[-2000:]
            probes = agent.value("tlsprof_attached_probes")
            # the first traffic comes when it comes: here after a quiet spell longer than
            # the 3 s the estimate beside judged probes once lasted (6 of 20 then had a figure)
            time.sleep(QUIET)
            runs = {"https": run(agent, timed, "https", lambda: https_connections(srv.port, N, concurrency=2, timeout=60))}
            method = agent.value("tlsprof_handshake_cpu_method_info", comm="java", method="kernel_estimate",
                                 reason="unseen_by_probes")
            trusted = agent.value("tlsprof_handshake_cpu_method_info", comm="java", method="probes")
            found = agent.output()
    finally:
        srv.stop()
    check("java+libssl", runs, timed, attach, started)
    assert probes > 0, f"the JVM maps {lib}: its probes are attached ({found[-2000:]})"
    assert (method, trusted) == (1, 0), found[-2000:]
    assert "unseen_by_probes: its probes reported none of the 2 server handshakes" in found, found[-2000:]


# Servers whose TLS starts at the first byte, one process each: (server class, the name its
# process runs under, its client).
ONE_PROCESS = {
    # Redis 7: OpenSSL
    "redis": (services.Redis, "redis-server", lambda port: services.redis_connections(port, N)),
    # Caddy 2.6: Go's crypto/tls in one static executable, two handshakes at once
    "caddy": (services.Caddy, "caddy", lambda port: https_connections(port, N, concurrency=2, timeout=60)),
}


@pytest.mark.parametrize("how", ["comm", "none"])
@pytest.mark.parametrize("server", ONE_PROCESS)
def test_one_process_server(workdir, server, how):
    """A TLS server from Debian's packages, TLS from the first byte, one process."""
    need(server)
    start, comm, client = ONE_PROCESS[server]
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: start(workdir))
    try:
        with start_agent(timed, *selector(how, srv.pid, comm)) as agent:
            attach = {comm: attached(agent, srv.pid)}
            runs = {server: run(agent, timed, server, lambda: client(srv.port))}
    finally:
        srv.stop()
    check(server, runs, timed, attach, started)


@pytest.mark.parametrize("how", SELECTORS)
def test_inetd_service_per_connection(workdir, how):
    """A TLS server program exec'd per connection by a parent that maps no TLS library
    (inetd, systemd's Accept=yes): by the parent's pid, by the program's name (--comm: the
    parent is not traced), or found; each process lives only for its connection."""
    need("inetd")
    started, timed = time.monotonic(), Timed()
    srv = timed("server start", lambda: services.Inetd(workdir))
    try:
        with start_agent(timed, *selector(how, srv.pid, services.INETD_CHILD_COMM)) as agent:
            attach = {"parent": attached(agent, srv.pid, timeout=0.5 if how != "pid" else 3.0)}
            if how != "pid":
                teach(agent, timed, "https", srv.port, lambda: https_connections(srv.port, 1, concurrency=1))
            runs = {"https": run(agent, timed, "https", lambda: https_connections(srv.port, N, concurrency=2, timeout=60))}
    finally:
        srv.stop()
    check("inetd", runs, timed, attach, started)
