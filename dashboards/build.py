#!/usr/bin/env python3
"""Writes tlsprof's Grafana dashboards (classic JSON model) from the panel lists below.

    python3 dashboards/build.py          # (re)write dashboards/*.json
    python3 dashboards/build.py --check  # exit 1 if a committed file differs from what this writes

The JSON files are committed, so that Grafana can provision them as they are; tests check
they are what this script writes, and that every query they hold returns data from a real
Prometheus scraping a real agent (tests/test_dashboards.py).
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 42  # Grafana 12's classic dashboard model
DS = {"type": "prometheus", "uid": "${datasource}"}
RI = "[$__rate_interval]"

# Label matchers shared by the queries. Handshake and CPU metrics are per process name
# (comm); connection metrics also per listening port; TIME_WAIT sockets belong to no process.
S = 'instance=~"$instance", comm=~"$comm"'
SP = 'instance=~"$instance", comm=~"$comm", port=~"$port"'
SI = 'instance=~"$instance"'
STW = 'instance=~"$instance", port=~"$port"'
OK = 'result="ok"'
OK_FULL = 'result="ok", resumed="false"'
OK_RESUMED = 'result="ok", resumed="true"'
FAILED = 'result="failed"'
CAT_HANDSHAKE = 'category="handshake"'
CAT_PROBES = 'category="probes"'
TLS_CATS = 'category=~"handshake|crypto|tls_library"'
OUT_FAIL = 'outcome="fail"'
OFFERED = 'offered=~"psk|ticket"'
FULL = 'result="full"'
OK_SERVER = 'result="ok", role="server"'
OK_SERVER_QUIC = 'result="ok", role="server", transport="quic"'


def rate(metric: str, sel: str, extra: str = "") -> str:
    matchers = sel + (", " + extra if extra else "")
    return f"rate({metric}{{{matchers}}}{RI})"


def mean_by(hist: str, by: str, sel: str, extra: str = "") -> str:
    """Mean of a histogram over the rate interval: sum of the observations / their count
    (none where there was no observation: not an infinity, which no axis can draw)."""
    grouping = f" by ({by})" if by else ""
    return (f"sum{grouping} ({rate(hist + '_sum', sel, extra)})\n  / "
            f"(sum{grouping} ({rate(hist + '_count', sel, extra)}) > 0)")


def quantile(q: float, hist: str, sel: str, extra: str = "", by: str = "") -> str:
    return f"histogram_quantile({q}, sum by (le{', ' + by if by else ''}) ({rate(hist + '_bucket', sel, extra)}))"


def target(expr: str, legend: str = "", instant: bool = False, fmt: str = "time_series") -> dict:
    t = {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "range": not instant,
         "instant": instant, "format": fmt}
    return t


class Layout:
    """Places panels left to right, 24 columns wide, rows of panels of the same height."""

    def __init__(self):
        self.panels = []
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def row(self, title: str):
        self._newline()
        self.panels.append({"type": "row", "title": title, "id": self._id(), "collapsed": False,
                            "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}, "panels": []})
        self.y += 1

    def add(self, panel: dict, w: int, h: int):
        if self.x + w > 24:
            self._newline()
        panel["id"] = self._id()
        panel["gridPos"] = {"h": h, "w": w, "x": self.x, "y": self.y}
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)

    def _newline(self):
        self.y += self.row_h
        self.x = 0
        self.row_h = 0

    def _id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i


def refids(targets):
    for i, t in enumerate(targets):
        t["refId"] = chr(ord("A") + i)
    return targets


def timeseries(title: str, desc: str, unit: str, targets, stack: bool = False, links=None, right=None,
               max_value=None) -> dict:
    """`right`: (refId, unit) of a target drawn against an axis of its own on the right (a
    quantity of another size); `max_value`: the axis' top (1 for shares that add up to 100%)."""
    custom = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 20 if stack else 0,
              "showPoints": "never", "spanNulls": True,
              "stacking": {"mode": "normal" if stack else "none", "group": "A"}}
    defaults = {"unit": unit, "custom": custom, "min": 0}
    if max_value is not None:
        defaults["max"] = max_value
    if links:
        defaults["links"] = links
    overrides = []
    if right:
        ref, right_unit = right
        overrides.append({"matcher": {"id": "byFrameRefID", "options": ref},
                          "properties": [{"id": "custom.axisPlacement", "value": "right"},
                                         {"id": "unit", "value": right_unit}]})
    return {"type": "timeseries", "title": title, "description": desc, "datasource": DS,
            "targets": refids(targets),
            "fieldConfig": {"defaults": defaults, "overrides": overrides},
            "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def stat(title: str, desc: str, unit: str, expr: str, thresholds=None) -> dict:
    steps = [{"color": "green", "value": None}]
    for value, color in thresholds or []:
        steps.append({"color": color, "value": value})
    return {"type": "stat", "title": title, "description": desc, "datasource": DS,
            "targets": refids([target(expr)]),
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
                            "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"}}


def table(title: str, desc: str, expr: str, value=None, exclude=(), gauge: bool = False) -> dict:
    """An instant query as a table: a column per label but those in `exclude`, then its value
    named and united by `value` (header, unit), largest first; `value` None: left out (an
    info metric, whose value is 1). `gauge`: the value (a share) drawn as a bar in its cell.
    The unit is the value column's alone: a label that reads as a number (a port) stays as
    it is."""
    excluded = {"Time": True, "__name__": True, **{k: True for k in exclude}}
    rename, overrides, sort = {}, [], []
    if value is None:
        excluded["Value"] = True
    else:
        header, unit = value
        rename["Value"] = header
        props = [{"id": "unit", "value": unit}]
        if gauge:
            props += [{"id": "custom.cellOptions", "value": {"type": "gauge", "mode": "basic"}},
                      {"id": "min", "value": 0}, {"id": "max", "value": 1}]
        overrides.append({"matcher": {"id": "byName", "options": header}, "properties": props})
        sort = [{"id": "sortBy", "options": {"sort": [{"field": header, "desc": True}]}}]
    return {"type": "table", "title": title, "description": desc, "datasource": DS,
            "targets": refids([target(expr, instant=True, fmt="table")]),
            "fieldConfig": {"defaults": {}, "overrides": overrides},
            "options": {"showHeader": True},
            "transformations": [{"id": "organize", "options": {"excludeByName": excluded, "renameByName": rename}},
                                *sort]}


def merged_table(title: str, desc: str, columns) -> dict:
    """A table of instant queries joined on their labels (Grafana's merge): `columns` are
    (header, unit, expr), one value column each."""
    targets = refids([target(expr, instant=True, fmt="table") for _, _, expr in columns])
    rename = {f"Value #{t['refId']}": header for t, (header, _, _) in zip(targets, columns)}
    overrides = [{"matcher": {"id": "byName", "options": header},
                  "properties": [{"id": "unit", "value": unit}]} for header, unit, _ in columns]
    return {"type": "table", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "fieldConfig": {"defaults": {}, "overrides": overrides},
            "options": {"showHeader": True},
            "transformations": [{"id": "merge", "options": {}},
                                {"id": "organize", "options": {"excludeByName": {"Time": True},
                                                               "renameByName": rename}}]}


def query_var(name: str, label: str, query: str, multi: bool) -> dict:
    return {"type": "query", "name": name, "label": label, "datasource": DS,
            "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "definition": query, "refresh": 2, "sort": 1, "multi": multi, "includeAll": multi,
            "allValue": ".*" if multi else None, "current": {}, "options": [], "hide": 0, "regex": ""}


def templating(multi: bool) -> dict:
    return {"list": [
        {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []},
        query_var("instance", "tlsprof instance", "label_values(tlsprof_agent_cpu_seconds_total, instance)", multi),
        query_var("comm", "Process", 'label_values(tlsprof_attached_processes{instance=~"$instance"}, comm)', multi),
        query_var("port", "Port",
                  'label_values(tlsprof_tcp_connections_accepted_total{instance=~"$instance", comm=~"$comm"}, port)',
                  True),
    ]}


def dashboard(uid: str, title: str, desc: str, panels, multi: bool) -> dict:
    return {
        "uid": uid, "title": title, "description": desc, "tags": ["tlsprof", "tls"],
        "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-30m", "to": "now"}, "refresh": "10s", "timezone": "browser",
        "timepicker": {}, "fiscalYearStartMonth": 0, "liveNow": False,
        "annotations": {"list": [
            {"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
             "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts",
             "type": "dashboard"},
            {"name": "tlsprof alerts", "datasource": DS, "enable": True, "iconColor": "red",
             "expr": 'ALERTS{alertstate="firing", instance=~"$instance", comm=~"$comm"}',
             "titleFormat": "{{alertname}}", "textFormat": "{{comm}} on {{instance}}", "step": "60s"},
        ]},
        "links": [{"type": "dashboards", "tags": ["tlsprof"], "asDropdown": False, "title": "tlsprof",
                   "includeVars": True, "keepTime": True}],
        "templating": templating(multi),
        "panels": panels,
    }


# ------------------------------------------------------------------ the overview

HS = "tlsprof_handshakes_total"
CPU_H = "tlsprof_handshake_cpu_seconds"
# The CPU split, shared by both dashboards: cores by category, shares of the process's CPU,
# cores by crypto primitive.
CPU_CORES = f'sum by (category) ({rate("tlsprof_cpu_seconds_total", S)})'
CPU_SHARE = (f'{CPU_CORES}\n  / ignoring(category) '
             f'group_left sum({rate("tlsprof_process_cpu_seconds_total", S)})')
PRIMITIVES = f'sum by (primitive) ({rate("tlsprof_crypto_cpu_seconds_total", S)})'


def failure_panels(L: Layout, w: int):
    """Why handshakes failed, and the connections to a TLS port that never offered TLS (TCP
    health checks, port scans, plain HTTP), which are not handshakes: beside the failure
    panels, in both dashboards."""
    L.add(timeseries("Failed handshakes by reason", "Failed server handshakes per second by why, and by the side "
                     "that ended them (client or server): the alert it sent in the clear (the server's: protocol_version, "
                     "handshake_failure, unrecognized_name, no_application_protocol...; the client's, which rejected "
                     "the certificate: unknown_ca, certificate_expired, bad_certificate...), encrypted_alert (a TLS "
                     "1.3 client rejected the server's flight), closed, reset (gave up after the ClientHello), "
                     "unfinished (QUIC), library_error, unknown. The alerts TLSClientsRejectCertificate, "
                     "TLSProtocolVersionRefused, TLSNoCommonCipher, TLSUnrecognizedName and "
                     "TLSNoApplicationProtocol watch those the server's operator can fix.", "ops",
                     [target(f'sum by (by, reason) ({rate("tlsprof_handshake_failures_total", SP)})',
                             "{{reason}} ({{by}})")], stack=True), w, 8)
    L.add(timeseries("Connections without TLS by port", "Connections accepted on a TLS port that never offered "
                     "TLS, per second, by what they were: silent (closed before any byte: TCP health checks, port "
                     "scans), http (plain HTTP to the TLS port), http2, ssh, other. Not handshakes: neither the "
                     "handshake rate nor the failed share counts them.", "ops",
                     [target(f'sum by (port, kind) ({rate("tlsprof_connections_without_tls_total", SP)})',
                             "port {{port}} {{kind}}")], stack=True), w, 8)


def transport_panels(L: Layout):
    """Handshakes over QUIC (HTTP/3) beside those over TCP: rate and CPU per handshake by
    transport, and the share of server handshakes over QUIC (0, not no data, without any)."""
    L.add(timeseries("Handshakes/s by transport", "TLS handshakes per second by what carried them: tcp, quic "
                     "(a QUIC connection's handshake: HTTP/3), other (no connection seen).", "ops",
                     [target(f"sum by (transport) ({rate(HS, S)})", "{{transport}}")], stack=True), 8, 8)
    L.add(timeseries("CPU per handshake by transport", "Mean on-CPU time of a successful handshake (full and "
                     "resumed) by transport, over those the probes timed.", "s",
                     [target(mean_by(CPU_H, "transport", S), "{{transport}}")]), 8, 8)
    server = f"sum({rate(HS, S, OK_SERVER)})"
    L.add(stat("Share of handshakes over QUIC (HTTP/3)", "Of the successful server handshakes, the share over "
               "QUIC: the share of clients on HTTP/3. The connection panels (TIME_WAIT, requests per "
               "connection) count TCP connections alone.",
               "percentunit",
               f"(\n  sum({rate(HS, S, OK_SERVER_QUIC)})\n  or 0 * {server}\n)\n  / ({server} > 0)"), 8, 8)


DRILL = [{"title": "Open ${__field.labels.comm} in the per-process view",
          "url": "/d/tlsprof-process/tlsprof-per-process?${datasource:queryparam}"
                 "&var-instance=${__field.labels.instance}&var-comm=${__field.labels.comm}&${__url_time_range}"}]


def overview() -> dict:
    L = Layout()
    L.row("Handshakes")
    L.add(stat("Handshakes/s", "TLS handshakes finished per second, all results.", "ops",
               f"sum({rate(HS, S)})"), 4, 4)
    L.add(stat("Resumed", "Share of successful handshakes that resumed a session (cache or ticket). "
               "Low: enable session tickets or a shared session cache.", "percentunit",
               f'sum({rate(HS, S, OK_RESUMED)})\n  / sum({rate(HS, S, OK)})'),
          4, 4)
    L.add(stat("Failed", "Share of handshakes that failed (that began: connections that never offered TLS, "
               "such as TCP health checks, are not handshakes).", "percentunit",
               f'sum({rate(HS, S, FAILED)}) / sum({rate(HS, S)})', [(0.05, "red")]), 4, 4)
    L.add(stat("CPU per full handshake", "Mean on-CPU time of a full (not resumed) successful handshake.",
               "s", mean_by(CPU_H, "", S, 'resumed="false"'), [(0.003, "red")]), 4, 4)
    L.add(stat("Handshake share of CPU", "Share of the traced processes' CPU time spent in handshakes "
               "(sampled).", "percentunit",
               f'sum({rate("tlsprof_cpu_seconds_total", S, CAT_HANDSHAKE)})\n  / '
               f'sum({rate("tlsprof_process_cpu_seconds_total", S)})', [(0.5, "red")]), 4, 4)
    L.add(stat("TIME_WAIT entries/s", "Server sockets entering TIME_WAIT per second (the server closed first).",
               "ops", f'sum({rate("tlsprof_tcp_time_wait_total", SP)})'), 4, 4)
    L.add(timeseries("Handshakes/s: full, resumed, failed", "Successful full and resumed handshakes, and failed "
                     "ones, per second.", "ops", [
                         target(f'sum({rate(HS, S, OK_FULL)})', "full"),
                         target(f'sum({rate(HS, S, OK_RESUMED)})', "resumed"),
                         target(f'sum({rate(HS, S, FAILED)})', "failed"),
                     ], stack=True), 8, 8)
    failure_panels(L, 8)
    L.add(timeseries("CPU per full handshake: p50, p90, p99", "Quantiles of the on-CPU time of full handshakes "
                     "(histogram buckets 10 µs … 1 s).", "s", [
                         target(quantile(q, CPU_H, S, 'resumed="false"'), f"p{int(q * 100)}")
                         for q in (0.5, 0.9, 0.99)]), 6, 8)
    for label, what in (("group", "key-exchange group (x25519 is the cheapest; secp384r1 costs several times more)"),
                        ("cert", "server certificate key (an ECDSA P-256 signature is far cheaper than RSA)"),
                        ("cipher", "cipher suite")):
        L.add(timeseries(f"CPU per full handshake by {label}", f"Mean on-CPU time of a full handshake by {what}.",
                         "s", [target(mean_by(CPU_H, label, S, 'resumed="false"'), f"{{{{{label}}}}}")]), 6, 8)
    transport_panels(L)

    L.row("CPU")
    L.add(timeseries("Share of process CPU by category", "Where the traced processes' CPU goes (sampled): "
                     "handshake, crypto (record encryption/decryption), tls_library, kernel_net, probes "
                     "(tlsprof's own), other.", "percentunit", [
                         target(CPU_SHARE, "{{category}}")],
                     stack=True, max_value=1), 12, 8)
    L.add(timeseries("CPU by process (1.0 = one core)", "On-CPU time of each traced process name, summed by the "
                     "kernel at every context switch. Click a series for the per-process view.", "percentunit",
                     [target(f'sum by (instance, comm) ({rate("tlsprof_process_cpu_seconds_total", S)})',
                             "{{comm}} on {{instance}}")], links=DRILL), 12, 8)
    L.add(timeseries("Crypto primitives (1.0 = one core)", "On-CPU time in TLS library code by crypto primitive "
                     "(no_symbols: the library has no function names; install its debug symbols).", "percentunit",
                     [target(PRIMITIVES, "{{primitive}}")],
                     stack=True), 12, 8)
    L.add(timeseries("CPU by category (1.0 = one core)", "The same split in cores rather than shares.",
                     "percentunit", [target(CPU_CORES, "{{category}}")], stack=True), 12, 8)
    exchanges = f'(sum by (instance, comm) ({rate("tlsprof_exchanges_total", SP)}) > 0)'
    L.add(timeseries("CPU per exchange by process, and its TLS part", "Each process's CPU time over its "
                     "application data exchanges (client data, then the server's answer: requests where each is "
                     "answered before the next), and of it TLS (handshake, record crypto, TLS library). To "
                     "compare set-ups, add an offloader's and its backend's figures against a server doing its "
                     "own TLS.", "s", [
                         target(f'sum by (instance, comm) ({rate("tlsprof_process_cpu_seconds_total", S)})\n  / '
                                f'{exchanges}', "{{comm}} on {{instance}}: all"),
                         target(f'sum by (instance, comm) ({rate("tlsprof_cpu_seconds_total", S, TLS_CATS)})'
                                f'\n  / {exchanges}', "{{comm}} on {{instance}}: TLS")]), 24, 8)

    L.row("Connections")
    L.add(timeseries("TIME_WAIT entries/s by port", "Server sockets that entered TIME_WAIT per second: the server "
                     "closed first. Keep-alive and a higher per-connection request limit lower it.", "ops",
                     [target(f'sum by (port) ({rate("tlsprof_tcp_time_wait_total", SP)})', "port {{port}}")]), 8, 8)
    L.add(timeseries("Sockets in TIME_WAIT", "TIME_WAIT sockets with the server's local port now (sock_diag).",
                     "short", [target(f"sum by (port) (tlsprof_tcp_time_wait_sockets{{{STW}}})", "port {{port}}")]),
          8, 8)
    L.add(timeseries("Requests per connection (mean)", "Application data exchanges (client data, then the "
                     "server's answer) carried by each connection that ended: requests where each is answered "
                     "before the next. Near 1: every request pays a handshake and a TCP connection. HTTP/2 and "
                     "pipelining put many requests in one exchange: see the protocol and lifetime panels.", "short",
                     [target(mean_by("tlsprof_requests_per_connection", "port", SP), "port {{port}}")]), 8, 8)
    L.add(timeseries("TLS connections/s by application protocol", "TLS handshakes per port by the protocol their "
                     "connections carry: the plaintext preamble's before TLS started (smtp, imap, pop3, ldap, xmpp, "
                     "ftp, nntp: STARTTLS; postgresql: the SSLRequest; mysql; starttls_other), else the one the "
                     "server chose (ALPN) as its ServerHello shows it: h2 (HTTP/2, many requests per exchange), "
                     "http/1.1, none; encrypted: TLS 1.3 keeps the choice hidden; quic: QUIC (HTTP/3) connections on the UDP "
                     "port of that number. On a port that is not HTTP, "
                     "requests per connection are exchanges (a command or query and its answer).", "ops",
                     [target(f'sum by (port, protocol) ({rate("tlsprof_tls_connections_by_protocol_total", SP)})',
                             "port {{port}} {{protocol}}")], stack=True), 12, 8)
    L.add(timeseries("Connection lifetime (mean)", "How long connections that ended lived: reuse whatever the "
                     "protocol's framing. Under 0.5 s with few exchanges each: clients reconnect (the report's "
                     "keep-alive rule).", "s",
                     [target(mean_by("tlsprof_tcp_connection_duration_seconds", "port", SP), "port {{port}}")]), 12, 8)
    L.add(timeseries("Connections/s by who closed", "Connections that ended per second: server (closed first), "
                     "client (closed first), reset.", "ops",
                     [target(f'sum by (closed_by) ({rate("tlsprof_tcp_connections_total", SP)})', "{{closed_by}}")],
                     stack=True), 12, 8)
    L.add(timeseries("TIME_WAIT entries per request", "TIME_WAIT entries divided by requests: 1 when every "
                     "request gets its own server-closed connection, 0.2 with Domino's default of 5 requests "
                     "per connection.", "short",
                     [target(f'sum by (port) ({rate("tlsprof_tcp_time_wait_total", SP)})\n  / (sum by (port) '
                             f'({rate("tlsprof_requests_per_connection_sum", SP)}) > 0)', "port {{port}}")]), 12, 8)

    L.row("Clients")
    hellos = f'sum({rate("tlsprof_client_hellos_total", SP)})'
    L.add(table("Client mix: share of ClientHellos offering each value", "What the clients' ClientHellos "
                "offered lately (the last rate interval of the range), as a share of those read, most offered "
                "first: version (the highest offered), group and key_share (groups offered, and those with a key "
                "share), cipher (suite classes), sigalg, alpn (h2, http/1.1, other, none), resumption (psk, "
                "ticket, none).",
                f'sum by (offer, value) ({rate("tlsprof_client_offers_total", SP)})\n  / '
                f'ignoring(offer, value) group_left {hellos}', value=("Share of ClientHellos", "percentunit"),
                gauge=True), 12, 10)
    outcomes = f'sum by (policy) ({rate("tlsprof_client_policy_outcomes_total", SP)})'
    L.add(timeseries("Clients that would fail, by candidate policy", "Share of the ClientHellos each candidate "
                     "server policy would fail (mozilla_modern, mozilla_intermediate, ecdsa_only, tls13_only, "
                     "no_cbc_3des, no_rsa_kex, x25519_p256_only, pq_hybrid_first): what tightening the server to "
                     "it would cost in clients. 0 when none would.", "percentunit",
                     [target(f'(\n  sum by (policy) ({rate("tlsprof_client_policy_outcomes_total", SP, OUT_FAIL)})'
                             f'\n  or 0 * {outcomes}\n)\n  / {outcomes}', "{{policy}}")]), 12, 8)
    offered = f'sum by (port) ({rate("tlsprof_client_resumptions_total", SP, OFFERED)})'
    L.add(timeseries("Returning clients given a full handshake", "Of the handshakes whose client offered to "
                     "resume a session (a TLS 1.3 PSK or a TLS 1.2 session ticket), the share the server answered "
                     "with a full handshake: session cache too small or too short, ticket keys not shared by "
                     "workers or hosts, or changed by a restart (the report's resumption_refused rule; alert "
                     "TLSResumptionRefused).", "percentunit",
                     [target(f'(\n  sum by (port) ({rate("tlsprof_client_resumptions_total", SP, OFFERED + ", " + FULL)})'
                             f'\n  or 0 * {offered}\n)\n  / {offered}', "port {{port}}")], max_value=1), 12, 8)
    L.add(timeseries("Handshake CPU by site (top 10, 1.0 = one core)", "On-CPU time of the timed handshakes by "
                     "the host name the client asked for (SNI; none without one): which sites cost the "
                     "handshakes.", "percentunit",
                     [target(f'topk(10, sum by (sni) ({rate("tlsprof_site_handshake_cpu_seconds_total", SP)}))',
                             "{{sni}}")]), 12, 8)

    L.row("tlsprof health")
    L.add(timeseries("Events lost/s", "Handshake events the kernel could not report (ring buffer full), and "
                     "every kernel-side failure path by kind. Should stay at 0.", "ops", [
                         target(f'sum({rate("tlsprof_events_lost_total", SI)})', "handshake events lost"),
                         target(f'sum by (kind) ({rate("tlsprof_kernel_errors_total", SI)})', "{{kind}}")]), 8, 8)
    L.add(timeseries("Probe attach failures", "Probes that failed to attach, by program (total since start).",
                     "short", [target(f"sum by (probe) (tlsprof_probe_attach_failures_total{{{SI}}})",
                                      "{{probe}}")]), 8, 8)
    L.add(timeseries("tlsprof overhead (1.0 = one core)", "CPU of the tlsprof agent itself, and time the traced "
                     "processes spent in tlsprof's probes (sampled).", "percentunit", [
                         target(f'sum by (instance) ({rate("tlsprof_agent_cpu_seconds_total", SI)})',
                                "agent {{instance}}"),
                         target(f'sum({rate("tlsprof_cpu_seconds_total", S, CAT_PROBES)})',
                                "probes in traced processes"),
                         target(f'sum by (comm) ({rate("tlsprof_probe_cpu_seconds_total", S)})',
                                "handshake probes of {{comm}} (hits x measured cost)")]), 8, 8)
    L.add(timeseries("Handshake probes: duty cycle", "Share of each 2 s cycle the handshake probes were "
                     "attached under the overhead budget (1 with --exact, or under light load): the sampling "
                     "ratio of handshake CPU and duration, and of client-role handshake counts.", "percentunit",
                     [target(f"max by (comm) (tlsprof_probe_duty_cycle{{{S}}})", "{{comm}}")]), 8, 8)
    L.add(timeseries("tlsprof memory", "Resident memory of the agent.", "bytes",
                     [target(f"tlsprof_agent_resident_memory_bytes{{{SI}}}", "{{instance}}")]), 8, 8)
    L.add(timeseries("Attached processes", "Processes with tlsprof's probes, by name.", "short",
                     [target(f"sum by (comm) (tlsprof_attached_processes{{{S}}})", "{{comm}}")]), 8, 8)
    L.add(timeseries("Handshakes without negotiated labels", "Handshakes counted with version/cipher/group/cert "
                     "other, by why: no_connection (client role, connections older than tlsprof), incomplete.",
                     "ops", [target(f'sum by (reason) ({rate("tlsprof_handshakes_unlabelled_total", S)})',
                                    "{{reason}}")]), 8, 8)
    return dashboard("tlsprof-overview", "tlsprof: TLS cost at a glance",
                     "What TLS costs the traced servers: handshakes, CPU by category, crypto primitives, "
                     "connection churn, and tlsprof's own health.", L.panels, multi=True)


# ------------------------------------------------------------------ per process

def per_process() -> dict:
    L = Layout()
    L.row("Handshakes of $comm")
    L.add(timeseries("Handshakes/s by result and resumption", "TLS handshakes per second, ok or failed. A failed "
                     "one began (a ClientHello came): connections that never offered TLS are not handshakes (see "
                     "Connections without TLS by port).", "ops",
                     [target(f"sum by (result, resumed) ({rate(HS, S)})", "{{result}} resumed={{resumed}}")],
                     stack=True), 8, 8)
    failure_panels(L, 8)
    L.add(timeseries("Handshake CPU: p50, p99, full and resumed", "Quantiles of the on-CPU time of successful "
                     "handshakes.", "s", [
                         target(quantile(q, CPU_H, S, by="resumed"), f"p{int(q * 100)} resumed={{{{resumed}}}}")
                         for q in (0.5, 0.99)]), 8, 8)
    L.add(timeseries("Handshake duration: p50, p99", "Wall-clock time from the first handshake call to the "
                     "one that completed it (includes waiting for the client).", "s", [
                         target(quantile(q, "tlsprof_handshake_duration_seconds", S), f"p{int(q * 100)}")
                         for q in (0.5, 0.99)]), 8, 8)
    L.add(timeseries("CPU in failed handshakes (1.0 = one core)", "", "percentunit",
                     [target(f'sum({rate("tlsprof_failed_handshake_cpu_seconds_total", S)})', "failed")]), 8, 8)
    for label in ("version", "cipher", "group", "cert"):
        L.add(timeseries(f"Handshakes/s by {label}", "", "ops",
                         [target(f"sum by ({label}) ({rate(HS, S)})", f"{{{{{label}}}}}")], stack=True), 6, 8)
    transport_panels(L)
    config = "version, cipher, group, cert, resumed"
    L.add(merged_table("Handshakes by configuration: rate and CPU", "Per negotiated configuration: successful "
                       "handshakes per second (every one, tlsprof_handshakes_total) and the mean on-CPU time of "
                       "one (over those the probes timed: all with --exact, those in the overhead budget's "
                       "windows in the default mode). Compare what a choice costs on this host.", [
                           ("Handshakes/s", "ops", f"sum by ({config}) ({rate(HS, S, OK)})"),
                           ("CPU per handshake", "s", mean_by(CPU_H, config, S))]), 24, 7)

    L.row("CPU of $comm")
    L.add(timeseries("CPU by category (1.0 = one core)", "", "percentunit",
                     [target(CPU_CORES, "{{category}}")], stack=True), 8, 8)
    L.add(timeseries("Share of CPU by category", "Shares of the process's CPU (sampled), stacked: they add up "
                     "to 100%.", "percentunit",
                     [target(CPU_SHARE, "{{category}}")],
                     stack=True, max_value=1), 8, 8)
    L.add(timeseries("Crypto primitives (1.0 = one core)", "", "percentunit",
                     [target(PRIMITIVES, "{{primitive}}")], stack=True), 8, 8)

    L.row("Connections of $comm")
    L.add(timeseries("Connections accepted/s by port", "", "ops",
                     [target(f'sum by (port) ({rate("tlsprof_tcp_connections_accepted_total", SP)})',
                             "port {{port}}")]), 8, 8)
    L.add(timeseries("Connections ended/s by who closed", "", "ops",
                     [target(f'sum by (closed_by) ({rate("tlsprof_tcp_connections_total", SP)})',
                             "{{closed_by}}")], stack=True), 8, 8)
    L.add(table("Protocol of each port", "TLS connections since tlsprof started, by port and by the protocol they "
                "carry: the plaintext preamble's before TLS started (smtp, imap, pop3, ldap, xmpp, ftp, nntp, "
                "postgresql, mysql, starttls_other), else the one the server chose by ALPN (h2, http/1.1, none; "
                "encrypted: TLS 1.3 hides it); quic: QUIC (HTTP/3) connections on the UDP port of that number. Where it "
                "is not HTTP, its requests are exchanges.",
                f'sum by (port, protocol) (tlsprof_tls_connections_by_protocol_total{{{SP}}})',
                value=("TLS connections", "short")), 8, 8)
    L.add(timeseries("TIME_WAIT: entries/s and sockets", "Entries per second (left axis) and the sockets in "
                     "TIME_WAIT now (right axis: about 60 times the entries/s at a steady rate).", "ops", [
        target(f'sum by (port) ({rate("tlsprof_tcp_time_wait_total", SP)})', "entries/s port {{port}}"),
        target(f"sum by (port) (tlsprof_tcp_time_wait_sockets{{{STW}}})", "sockets port {{port}}")],
        right=("B", "short")), 8, 8)
    L.add(timeseries("Requests per connection: mean, p50, p90", "", "short", [
        target(mean_by("tlsprof_requests_per_connection", "", SP), "mean"),
        target(quantile(0.5, "tlsprof_requests_per_connection", SP), "p50"),
        target(quantile(0.9, "tlsprof_requests_per_connection", SP), "p90")]), 8, 8)
    L.add(timeseries("Connection lifetime: p50, p99", "", "s", [
        target(quantile(q, "tlsprof_tcp_connection_duration_seconds", SP), f"p{int(q * 100)}")
        for q in (0.5, 0.99)]), 8, 8)

    L.row("TLS library of $comm")
    L.add(table("TLS libraries", "TLS code the process maps, and where tlsprof's function names come from "
                "(symbols: exported_only, debug_file, full).", f"tlsprof_tls_library_info{{{S}}}",
                exclude=("instance", "job")), 24, 6)
    return dashboard("tlsprof-process", "tlsprof: per process",
                     "One server process: what its handshakes negotiate and cost, where its CPU goes, how its "
                     "connections end.", L.panels, multi=False)


DASHBOARDS = {"tlsprof-overview.json": overview, "tlsprof-process.json": per_process}


def render(build) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for name, build in DASHBOARDS.items():
        path = HERE / name
        text = render(build)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"dashboards: {', '.join(stale)} differ from dashboards/build.py: run it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
