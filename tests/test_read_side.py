"""The read side (agent/src/bpf/readside.rs, bpf/requests.bpf.h) is attached only while
something needs it: in the default mode on nginx (probed OpenSSL, sends captured) no program
of tlsprof's runs at socket reads once nginx's probes are trusted (until its first handshakes
show that they time them, the kernel estimates beside them: agent/src/agent/sightings.rs); a server whose handshakes the kernel estimates (lighttpd
on NSS, nothing to probe) attaches it when it appears, its handshakes are estimated with it,
and it is detached again once that server is gone. The kernel's own list of BPF links
(bpftool) is the truth; the counts stay exact whether it is attached or not."""
import json
import subprocess
import time
from pathlib import Path

import pytest

from harness.agent import Agent
from harness.clients import curl_connections
from harness.metrics import value
from harness.procs import have, wait_for
from harness.servers import Lighttpd, Nginx

N = 20
# readside.rs LINGER, and a scan (the test's agent scans every 0.5 s) on top
LINGER_S = 10
# the read side's programs, whichever hook serves it (agent/src/bpf/hooks.rs READ_SIDE)
READ_PROGRAMS = {"req_recv", "req_recv_fexit", "req_recv_entry", "req_recv_return"}


def read_side_links() -> int:
    """Links of the kernel whose program is one of the read side's."""
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    ids = {p["id"] for p in progs if p.get("name") in READ_PROGRAMS}
    links = json.loads(subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True,
                                      check=True).stdout)
    return sum(1 for link in links if link.get("prog_id") in ids)


def test_read_side_attached_only_while_needed(workdir):
    if not have("lighttpd") or not Path("/usr/lib/lighttpd/mod_nss.so").exists():
        pytest.skip("lighttpd-mod-nss not installed")
    nginx = Nginx(workdir)
    lighttpd = None
    try:
        with Agent("--comm", "nginx", "--comm", "lighttpd", "--sample-hz", "0") as agent:
            agent.wait_attached([nginx.pid, *nginx.workers()])
            c = curl_connections(nginx.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshakes_total", N, comm="nginx", role="server", result="ok")
            agent.wait_value("tlsprof_tcp_connections_accepted_total", N, comm="nginx")
            m = agent.scrape()
            assert value(m, "tlsprof_handshakes_total", comm="nginx", role="server") == N
            assert value(m, "tlsprof_tcp_connections_accepted_total", comm="nginx") == N
            # its probes timed its first handshakes: trusted, the estimate's reads are not needed
            wait_for(lambda: read_side_links() == 0, LINGER_S + 15,
                     f"the read side detached once nginx's probes were trusted ({agent.output()[-1500:]})")
            assert agent.value("tlsprof_handshake_cpu_method_info", comm="nginx", method="probes") == \
                1 + len(nginx.workers())
            assert agent.value("tlsprof_handshake_cpu_method_info", comm="nginx", method="kernel_estimate") == 0

            # a server without probes: the kernel estimate needs the reads
            lighttpd = Lighttpd(workdir, module="nss")
            agent.wait_attached([lighttpd.pid])
            wait_for(lambda: read_side_links() > 0, 10, "the read side attached for lighttpd (NSS)")
            c = curl_connections(lighttpd.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshake_cpu_seconds_count", N, comm="lighttpd", role="server")
            m = agent.scrape()
            assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="lighttpd") == N
            assert value(m, "tlsprof_handshake_cpu_method_info", comm="lighttpd", method="kernel_estimate") == 1

            gone = time.monotonic()  # before the stop: the agent may see the exit before stop() returns
            lighttpd.stop()
            lighttpd = None
            wait_for(lambda: read_side_links() == 0, LINGER_S + 15, "the read side detached after lighttpd left")
            # not before the linger: a forking server's children do not flip it each time
            assert time.monotonic() - gone >= LINGER_S - 1
            # and nginx is still counted exactly without it
            c = curl_connections(nginx.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshakes_total", 2 * N, comm="nginx", role="server", result="ok")
            assert agent.value("tlsprof_handshakes_total", comm="nginx", role="server") == 2 * N
    finally:
        if lighttpd:
            lighttpd.stop()
        nginx.stop()


def read_switch() -> dict:
    """The read side's switches in the kernel (req_ctl, bpf/requests.h), as bpftool prints
    them from the map's BTF."""
    out = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "name", "req_ctl"], capture_output=True, text=True,
                                    check=True).stdout)
    assert len(out) == 1, out
    entry = out[0].get("formatted", out[0])
    return entry["value"]


def test_exact_reads_switched_on_at_fork(workdir):
    """--exact with a selector: the read side (the kernel estimate of a process that lives
    for one connection) stays attached but switched off while no traced process forks, and
    the kernel switches it on at a fork, before the child runs (a reload's new workers
    here). Every handshake is counted and timed either way."""
    nginx = Nginx(workdir)
    try:
        with Agent("--comm", "nginx", "--exact", "--sample-hz", "0") as agent:
            agent.wait_attached([nginx.pid, *nginx.workers()])
            c = curl_connections(nginx.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshake_cpu_seconds_count", N, comm="nginx", role="server")
            assert read_switch()["reads_at_fork"] == 1
            # estimated beside its probes until they are trusted (sightings.rs), then off
            wait_for(lambda: read_switch()["reads"] == 0, 15,
                     f"the reads switched off once nginx's probes were trusted ({agent.output()[-1500:]})")
            assert read_side_links() > 0, "attached, for the kernel to switch on"

            nginx.reload()
            assert read_switch()["reads"] == 1, "switched on at the new workers' fork"
            agent.wait_attached([nginx.pid, *nginx.workers()])
            c = curl_connections(nginx.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshake_cpu_seconds_count", 2 * N, comm="nginx", role="server")
            time.sleep(1)  # one more would show
            m = agent.scrape()
            assert value(m, "tlsprof_handshakes_total", comm="nginx", role="server", result="ok") == 2 * N
            assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx", role="server") == 2 * N
    finally:
        nginx.stop()
