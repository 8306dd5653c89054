"""The Prometheus text exposition, parsed as a scraper would, and what the agent says about
a listening port."""
from __future__ import annotations

import re

from .procs import wait_for

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> list[tuple[str, dict, float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"unparsable metrics line: {line!r}"
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def value(samples, name: str, **labels) -> float:
    """Sum of every sample of `name` whose labels include `labels`."""
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items()))


def since(now, base) -> list[tuple[str, dict, float]]:
    """What moved between two scrapes of one agent: every sample of `now` less its value in
    `base` (0 where it had none), so that tests sharing an agent read their own counts with
    value() as from an agent of their own."""
    before = {(n, tuple(sorted(l.items()))): v for n, l, v in base}
    return [(n, l, v - before.get((n, tuple(sorted(l.items()))), 0.0)) for n, l, v in now]


def hook_info(samples) -> dict:
    """capability -> the kernel hook serving it (tlsprof_kernel_hook_info)."""
    return {l["capability"]: l["hook"] for n, l, v in samples if n == "tlsprof_kernel_hook_info" and v == 1}


def churn(agent, port: int) -> dict:
    """What tlsprof says about one port."""
    s = agent.scrape()
    p = str(port)

    def v(name, **labels):
        return value(s, name, port=p, **labels)

    return {
        "accepted": v("tlsprof_tcp_connections_accepted_total"),
        "server": v("tlsprof_tcp_connections_total", closed_by="server"),
        "client": v("tlsprof_tcp_connections_total", closed_by="client"),
        "reset": v("tlsprof_tcp_connections_total", closed_by="reset"),
        # ended without the kernel reporting the close, found by the agent (conns/unseen.rs)
        "unknown": v("tlsprof_tcp_connections_total", closed_by="unknown"),
        "time_wait": v("tlsprof_tcp_time_wait_total"),
        "time_wait_sockets": v("tlsprof_tcp_time_wait_sockets"),
        "requests": v("tlsprof_requests_per_connection_sum"),
        "conns": v("tlsprof_requests_per_connection_count"),
        "duration_count": v("tlsprof_tcp_connection_duration_seconds_count"),
        "comms": {l["comm"] for n, l, val in s if l.get("port") == p and "comm" in l and val > 0},
        "buckets": {float(l["le"]): val for n, l, val in s
                    if n == "tlsprof_requests_per_connection_bucket" and l.get("port") == p},
    }


def wait_watched(agent, port: int):
    """Waits until the agent watches the port (its TIME_WAIT gauge exists)."""
    wait_for(lambda: any(n == "tlsprof_tcp_time_wait_sockets" and l.get("port") == str(port)
                         for n, l, v in agent.scrape()), 10, f"tlsprof to watch port {port}")


def settled(agent, port: int, conns: int, base: dict | None = None) -> dict:
    """Waits until every connection of the port has ended in tlsprof's view (`conns` more
    than in `base`, an earlier churn() of the same agent, when given), then for further
    scans: the gauge and the accepted count are refreshed per scan. Returns churn(), less
    `base`."""
    def moved():
        c = churn(agent, port)
        return {k: (v - base[k] if base and isinstance(v, (int, float)) else v) for k, v in c.items()}

    def done():
        c = moved()
        return c if c["server"] + c["client"] + c["reset"] >= conns and c["accepted"] >= conns else None
    wait_for(done, 20, lambda: f"{conns} ended connections on port {port} (now {moved()})")
    agent.settle()
    return moved()
