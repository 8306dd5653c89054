"""Cost per request per process: each traced process's CPU per application data exchange
and its TLS part, to compare two set-ups as the Domino article did by watching host CPU
graphs: Apache httpd doing its own TLS, against nginx as a TLS offloader in front of the
same Apache serving plain HTTP.

Checked through `tlsprof report` against the clients' own request counts and the
servers' own CPU accounting (/proc/PID/task/*/schedstat of every process of each server)."""
import shutil

import pytest

from harness.clients import keepalive_connections
from harness.figures import figure
from harness.procs import cpu_ns, proc_children
from harness.servers import Apache, Nginx
from test_report import Report

# CPU figures: after the kernel matrix's guests, on an otherwise idle machine
pytestmark = pytest.mark.quiet

CONNS, PER_CONN = 20, 100


def server_cpu(pids: list[int]) -> float:
    """CPU seconds of the processes and their children, from the kernel's accounting."""
    every = set(pids)
    for p in pids:
        every.update(proc_children(p))
    return sum(cpu_ns(p) for p in every) / 1e9


def measured(pids: list[int], port: int) -> tuple[Report, dict, float]:
    """A report over the processes while a keep-alive client sends CONNS x PER_CONN requests
    through `port`; with the client's counts and the servers' CPU over the load."""
    cpu = {}

    def load():
        before = server_cpu(pids)
        c = keepalive_connections(port, CONNS, PER_CONN, end="close")
        cpu["used"] = server_cpu(pids) - before
        return c

    # the TLS part is the sampled split of ~0.3 s of CPU: sampled at 999 Hz, not 49
    r = Report(pids, load, extra=["--sample-hz", "999"])
    assert r.client == {"requests": CONNS * PER_CONN, "connections": CONNS, "failed": 0}, r.client
    return r, r.client, cpu["used"]


def cost_row(r: Report, comm: str) -> list[str]:
    return next(row for row in r.table("| Process | Exchanges/s |") if row[0] == comm)


def test_offloader_against_direct_tls(workdir):
    if not shutil.which("apache2"):
        pytest.skip("apache2 not installed")
    n = CONNS * PER_CONN

    # Apache serving TLS itself
    direct = Apache(workdir / "direct", keepalive=True)
    try:
        r1, _, used1 = measured([direct.pid], direct.port)
    finally:
        direct.stop()
    a1 = r1.proc("apache2")
    assert a1["exchanges"] == n, (a1["exchanges"], a1["ports"])
    # the process's CPU per exchange is its own accounting over the requests: the window
    # holds the load and a few idle seconds
    cost1 = a1["cpu_per_exchange_seconds"]
    # CPU per exchange is the process's own accounting over the window, the truth schedstat
    # over the load: they differ by what the window's idle seconds hold (CI runs here:
    # 1.000-1.001); 25% fails an exchange count or a window that lost part of the load
    figure("cost_per_exchange_over_schedstat[apache]", cost1 * n / used1)
    assert abs(cost1 * n - used1) <= 0.25 * used1 + 0.02, (cost1 * n, used1)
    assert 0 < a1["tls_cpu_per_exchange_seconds"] < cost1, (a1["tls_cpu_per_exchange_seconds"], a1["cpu_seconds"])

    # nginx terminating TLS, Apache behind it on plain HTTP (one backend connection per request)
    backend = Apache(workdir / "backend", keepalive=True, tls=False)
    front = Nginx(workdir / "front", location=f"proxy_pass http://127.0.0.1:{backend.port};")
    try:
        r2, _, used2 = measured([front.pid, backend.pid], front.port)
    finally:
        front.stop()
        backend.stop()
    ng, a2 = r2.proc("nginx"), r2.proc("apache2")
    assert ng["exchanges"] == n and a2["exchanges"] == n, (ng, a2)
    both = ng["cpu_per_exchange_seconds"] + a2["cpu_per_exchange_seconds"]
    figure("cost_per_exchange_over_schedstat[offload]", both * n / used2)
    assert abs(both * n - used2) <= 0.25 * used2 + 0.02, (both * n, used2)
    # TLS is the offloader's: the backend does none
    assert ng["tls_cpu_per_exchange_seconds"] > 0, ng
    assert a2["tls_cpu_per_exchange_seconds"] <= 0.05 * a2["cpu_per_exchange_seconds"], a2

    # the report's table: each process, and their sum, as the JSON says
    for comm, p in (("nginx", ng), ("apache2", a2)):
        row = cost_row(r2, comm)
        assert row[2] == f"{p['cpu_per_exchange_seconds'] * 1e3:.3f} ms", (row, p)
        assert row[3] == f"{p['tls_cpu_per_exchange_seconds'] * 1e3:.3f} ms", (row, p)
    total = cost_row(r2, "sum (a request through each)")
    assert total[2] == f"{both * 1e3:.3f} ms", (total, r2.text)
    row = cost_row(r1, "apache2")
    assert row[2] == f"{cost1 * 1e3:.3f} ms", (row, r1.text)
    print(f"apache doing TLS: {cost1 * 1e6:.0f} us per request (TLS {a1['tls_cpu_per_exchange_seconds'] * 1e6:.0f}); "
          f"nginx offloader {ng['cpu_per_exchange_seconds'] * 1e6:.0f} us (TLS "
          f"{ng['tls_cpu_per_exchange_seconds'] * 1e6:.0f}) + apache {a2['cpu_per_exchange_seconds'] * 1e6:.0f} us "
          f"= {both * 1e6:.0f} us")
