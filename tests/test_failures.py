"""Every failed handshake says why, and a connection that never offered TLS is no handshake.

Real clients, one kind of connection each (harness/failing.py), against nginx (TLS 1.2 and
1.3, ECDSA P-256, ECDHE-ECDSA AES-GCM suites only) and Postfix's STARTTLS: each kind lands,
exactly, in its own reason of tlsprof_handshake_failures_total, or apart from handshakes in
tlsprof_connections_without_tls_total. The counts are exact: the clients' own counts are
the truth."""
import os
import signal
import time

import pytest

from harness import failing
from harness.agent import Agent
from harness.clients import https_connections
from harness.servers import Nginx

N = 10
GOOD = 5
SUITES = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384"

# (what the clients do, how they do it, where it lands: ("failure", by, reason) or
# ("apart", kind))
ROWS = [
    ("tcp health check", lambda port, opened: failing.tcp_checks(port, N), ("apart", "silent")),
    ("TLS 1.1 only", lambda port, opened: failing.handshakes(port, N, failing.only_version("1.1"), opened),
     ("failure", "server", "protocol_version")),
    ("a cipher the server lacks", lambda port, opened: failing.handshakes(port, N, failing.only_cipher("AES128-SHA"),
                                                                           opened),
     ("failure", "server", "handshake_failure")),
    # TLS 1.3's suites cannot be chosen in Python's ssl: OpenSSL's own client; one the server
    # (OpenSSL's defaults) does not enable
    ("TLS 1.3, a suite the server lacks",
     lambda port, opened: failing.s_client(port, N, "-tls1_3", "-ciphersuites", "TLS_AES_128_CCM_SHA256",
                                           starttls=STARTTLS.get(opened)),
     ("failure", "server", "handshake_failure")),
    ("TLS 1.2 client rejects the certificate",
     lambda port, opened: failing.handshakes(port, N, failing.verifying("1.2"), opened),
     ("failure", "client", "unknown_ca")),
    # OpenSSL's TLS 1.3 client sends its alert before it switches to the handshake keys: in the clear
    ("TLS 1.3 client (OpenSSL) rejects the certificate",
     lambda port, opened: failing.handshakes(port, N, failing.verifying("1.3"), opened),
     ("failure", "client", "unknown_ca")),
    ("TLS 1.3 client (Go) rejects the certificate, its alert encrypted",
     lambda port, opened: failing.go_rejecting(port, N), ("failure", "client", "encrypted_alert")),
    ("plain HTTP", lambda port, opened: failing.plain_http(port, N, opened), ("apart", "http")),
    ("TLS 1.2 ClientHello, then hung up", lambda port, opened: failing.hello_then_hang_up(port, N, "1.2", opened),
     ("failure", "client", "closed")),
    ("TLS 1.3 ClientHello, then hung up", lambda port, opened: failing.hello_then_hang_up(port, N, "1.3", opened),
     ("failure", "client", "closed")),
    ("TLS 1.3 ClientHello, then reset", lambda port, opened: failing.hello_then_reset(port, N, "1.3", opened),
     ("failure", "client", "reset")),
]


def by_name(*names: str) -> list:
    return [row for row in ROWS if row[0] in names]


# s_client's name for the STARTTLS exchange an `opened` makes
STARTTLS = {failing.smtp_starttls: "smtp"}


def failures(agent: Agent, port: int) -> dict:
    """{(by, reason): n} of one port, from tlsprof's /metrics, whatever its processes' names
    (a connection its server never answered is counted under its listener's: Postfix's
    master, not the smtpd it handed the connection to)."""
    out = {}
    for name, labels, value in agent.scrape():
        if name == "tlsprof_handshake_failures_total" and labels.get("port") == str(port) and value:
            key = (labels["by"], labels["reason"])
            out[key] = out.get(key, 0) + int(value)
    return out


def apart(agent: Agent, port: int) -> dict:
    out = {}
    for name, labels, value in agent.scrape():
        if name == "tlsprof_connections_without_tls_total" and labels.get("port") == str(port) and value:
            out[labels["kind"]] = out.get(labels["kind"], 0) + int(value)
    return out


def settled(agent: Agent, read, timeout: float = 10.0):
    """What `read` gives once two readings a scan apart agree (the per-port counts come at
    the agent's scans)."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        agent.settle(2)
        now = read()
        if now == last:
            return now
        last = now
    return last


def each_row_in_its_reason(agent: Agent, comm: str, port: int, rows, opened=failing.plain):
    """Runs each row's clients, then checks that exactly its connections moved exactly its
    reason (or its kind apart), nothing else, and that the failed handshakes (the server's
    processes' and its listener's) are the failures."""
    failed0 = agent.value("tlsprof_handshakes_total", role="server", result="failed")
    for what, clients, where in rows:
        before_f, before_a = failures(agent, port), apart(agent, port)
        made = clients(port, opened)
        assert made == N, f"{what}: the clients made {made} of {N}"
        if where[0] == "failure":
            want_f = {**before_f, where[1:]: before_f.get(where[1:], 0) + N}
            want_a = before_a
        elif where[0] == "neither":
            want_f, want_a = before_f, before_a
        else:
            want_f = before_f
            want_a = {**before_a, where[1]: before_a.get(where[1], 0) + N}
        got = settled(agent, lambda: (failures(agent, port), apart(agent, port)))
        assert got == (want_f, want_a), f"{what}: got {got}, expected {(want_f, want_a)}"
        print(f"{comm:8} {what:55} {made:3} -> {'/'.join(where[1:]) or 'neither'}")
    failed = agent.value("tlsprof_handshakes_total", role="server", result="failed") - failed0
    n_failures = sum(N for _, _, where in rows if where[0] == "failure")
    return n_failures
    assert failed == n_failures, f"{failed} failed handshakes for {n_failures} failing connections"


# --exact: the probes stay attached and the read side is on where a process forks; the wire
# still counts, and says why (the rows whose path differs: no byte, an alert, no ClientHello,
# a server that never answered)
EXACT_ROWS = ("tcp health check", "TLS 1.1 only", "TLS 1.2 client rejects the certificate", "plain HTTP",
              "TLS 1.2 ClientHello, then hung up", "TLS 1.3 ClientHello, then reset")


@pytest.mark.parametrize("mode", ["default", "exact"])
def test_nginx_every_failure_in_its_reason(workdir, mode):
    nginx = Nginx(workdir, workers=1, extra_server=f"ssl_ciphers {SUITES}; ssl_prefer_server_ciphers on;")
    rows = ROWS if mode == "default" else by_name(*EXACT_ROWS)
    try:
        with Agent("--pid", str(nginx.pid), *(["--exact"] if mode == "exact" else [])) as agent:
            agent.wait_attached([nginx.pid, *nginx.workers()])
            assert https_connections(nginx.port, GOOD)["ok"] == GOOD
            agent.wait_value("tlsprof_handshakes_total", GOOD, comm="nginx", result="ok")
            each_row_in_its_reason(agent, "nginx", nginx.port, rows)
            ok = agent.value("tlsprof_handshakes_total", comm="nginx", result="ok")
            offers = {(labels["reason"], labels["lacks"]): int(v) for name, labels, v in agent.scrape()
                      if name == "tlsprof_client_failures_total" and labels["sni"] == "localhost"}
    finally:
        nginx.stop()
    assert ok == GOOD, f"{ok} ok handshakes for {GOOD}"
    # what the ClientHellos lacked of what the server negotiated (its good handshakes: TLS
    # 1.3): a TLS 1.1 offer the version, AES128-SHA alone (TLS 1.2) and TLS_AES_128_CCM_SHA256
    # alone (TLS 1.3) the suite; a rejected certificate lies elsewhere
    n = {r: sum(N for what, _, where in rows if where[1:] == ("server", r) or where[1:] == ("client", r))
         for r in ("protocol_version", "handshake_failure", "unknown_ca")}
    assert (offers.get(("protocol_version", "version"), 0), offers.get(("handshake_failure", "cipher"), 0),
            offers.get(("unknown_ca", "none"), 0)) == (n["protocol_version"], n["handshake_failure"],
                                                       n["unknown_ca"]), offers


def test_postfix_starttls_every_failure_in_its_reason(workdir):
    """The same clients after SMTP's STARTTLS, against Postfix (an smtpd per connection, forked
    by a master that maps no TLS library, traced from its fork): a TCP check there is a
    plaintext session (the server greeted first), neither a handshake nor apart."""
    import shutil
    from harness.services import Postfix
    if not shutil.which("postfix"):
        pytest.skip("postfix not installed")
    srv = Postfix(workdir)
    # Debian's Postfix allows TLS 1.0 and 1.1 (its own cipher lists lower OpenSSL's security
    # level): refused here, as most operators do, for the protocol_version row
    srv.postconf("smtpd_tls_protocols=>=TLSv1.2", "smtpd_tls_mandatory_protocols=>=TLSv1.2")
    os.kill(srv.pid, signal.SIGHUP)  # the master reads its configuration again
    time.sleep(1)
    rows = [("tcp health check", ROWS[0][1], ("neither",)),
            *by_name("TLS 1.1 only", "a cipher the server lacks", "TLS 1.3, a suite the server lacks",
                     "TLS 1.2 client rejects the certificate",
                     "TLS 1.3 client (OpenSSL) rejects the certificate", "TLS 1.2 ClientHello, then hung up",
                     "TLS 1.3 ClientHello, then hung up", "TLS 1.3 ClientHello, then reset")]
    try:
        with Agent("--pid", str(srv.pid)) as agent:
            agent.wait_attached([srv.pid])
            each_row_in_its_reason(agent, "smtpd", srv.port, rows, opened=failing.smtp_starttls)
            ok = agent.value("tlsprof_handshakes_total", comm="smtpd", result="ok")
    finally:
        srv.stop()
    assert ok == 0, f"{ok} ok handshakes: none was made"


def test_a_quiet_server_behind_health_checks_fails_no_handshake(workdir):
    """A load balancer's TCP check every 100 ms and one real client a second, for 8 s: no
    failed handshake (the shipped failure-ratio alert would page on a healthy server
    otherwise), every check counted apart as silent, every client's handshake ok."""
    import threading
    seconds, checks_per_second = 8, 10
    nginx = Nginx(workdir, workers=1)
    try:
        with Agent("--pid", str(nginx.pid)) as agent:
            agent.wait_attached([nginx.pid, *nginx.workers()])
            checks = []
            t = threading.Thread(target=lambda: checks.append(
                failing.tcp_checks(nginx.port, seconds * checks_per_second, gap=1 / checks_per_second)))
            t.start()
            ok = 0
            for _ in range(seconds):
                ok += https_connections(nginx.port, 1)["ok"]
                time.sleep(1)
            t.join(timeout=60)
            assert checks == [seconds * checks_per_second] and ok == seconds, (checks, ok)
            agent.wait_value("tlsprof_handshakes_total", ok, comm="nginx", result="ok")
            silent = settled(agent, lambda: apart(agent, nginx.port))
            failed = agent.value("tlsprof_handshakes_total", comm="nginx", result="failed")
            reasons = failures(agent, nginx.port)
    finally:
        nginx.stop()
    assert (failed, reasons) == (0, {}), (failed, reasons)
    assert silent == {"silent": seconds * checks_per_second}, silent
