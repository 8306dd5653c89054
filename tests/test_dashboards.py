"""The Grafana dashboards and the Prometheus rules, against a real Prometheus scraping the
real agent while real load runs against nginx.

Day 1 ("yesterday"): nginx with an ECDSA P-256 certificate and X25519, session tickets and
cache on, keep-alive limited to 5 requests per connection, a few failing clients. Every
dashboard query and every rule returns data; the handshake-cost alert stays silent. The
samples Prometheus stored are then written, one day earlier, into the storage of a second
Prometheus (promtool tsdb create-blocks-from openmetrics): real measurements, time-shifted.

Day 2 ("today"): the same host and process name with an RSA-4096 certificate and no
resumption. The alerts comparing with yesterday (offset 1d) have data, and the handshake
cost, cost regression and resumption alerts fire.
"""
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness import failing, quic, services
from harness.agent import Agent
from harness.clients import failing_handshakes, https_connections, keepalive_connections, resuming_connections
from harness.metrics import parse_metrics
from harness.procs import ROOT, free_port, wait_for
from harness.servers import Nginx
from harness.prometheus import Prometheus
from harness.render import PAGE as RENDER_PAGE, Renderer, chromium

DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RULES = ROOT / "deploy" / "prometheus" / "tlsprof-rules.yml"
RATE_INTERVAL = "10s"  # what Grafana's $__rate_interval is with a 1 s scrape interval and short ranges
UNITS = {"s", "percentunit", "ops", "reqps", "short", "bytes"}


# ------------------------------------------------------------------ what the files hold

def panels(dash: dict):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", [])


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard uid, panel title, expression) for every panel target."""
    out = []
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        for p in panels(d):
            for t in p.get("targets", []):
                out.append((d["uid"], p["title"], t["expr"]))
    return out


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def substitute(expr: str, instance: str, comm: str, port: int) -> str:
    return (expr.replace("$__rate_interval", RATE_INTERVAL).replace("$instance", instance)
            .replace("$comm", comm).replace("$port", str(port)))


def as_bool(expr: str) -> str:
    """An alert expression whose comparisons return 0/1 for every series instead of filtering
    them: it returns data whenever what the alert measures exists."""
    return re.sub(r"(>=|<=|==|!=|>|<)\s+(?!bool)", r"\1 bool ", expr)


# ------------------------------------------------------------------ static checks

def test_dashboards_are_what_build_py_writes():
    r = subprocess.run(["python3", str(ROOT / "dashboards" / "build.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_dashboard_structure():
    assert [p.name for p in DASHBOARDS] == ["tlsprof-overview.json", "tlsprof-process.json"]
    uids = set()
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        assert d["schemaVersion"] == 42 and d["uid"] not in uids
        uids.add(d["uid"])
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        assert {"instance", "comm", "port"} <= set(variables)
        ids = set()
        for p in panels(d):
            assert p["id"] not in ids
            ids.add(p["id"])
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            # a unit on every value: the panel's, or (tables, whose label columns take none) each
            # value column's own
            fc = p["fieldConfig"]
            units = [fc["defaults"]["unit"]] if "unit" in fc["defaults"] else []
            units += [q["value"] for o in fc["overrides"] for q in o["properties"] if q["id"] == "unit"]
            assert units or p["type"] == "table", p["title"]
            assert all(u in UNITS for u in units), p["title"]
            for t in p["targets"]:
                # Every rate() and increase() over Grafana's $__rate_interval.
                windows = re.findall(r"(?:rate|increase)\([^\[]*\[([^\]]*)\]", t["expr"])
                assert all(w == "$__rate_interval" for w in windows), (p["title"], t["expr"])
                assert "[" not in t["expr"] or windows, t["expr"]
    assert uids == {"tlsprof-overview", "tlsprof-process"}


def test_dashboard_queries_parse():
    """promtool parses every query (as a recording rule of a scratch rule file)."""
    exprs = [substitute(e, "127.0.0.1:9435", "nginx", 443) for _, _, e in dashboard_queries()]
    scratch = {"groups": [{"name": "parse", "rules": [{"record": f"q:{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = Path("/tmp") / f"tlsprof-dash-queries-{free_port()}.yml"
    path.write_text(yaml.safe_dump(scratch))
    try:
        r = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        path.unlink()


def test_rules_check_and_unit_tests():
    r = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(["promtool", "test", "rules", "tests/tlsprof-rules.test.yml"], capture_output=True,
                       text=True, cwd=RULES.parent)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = subprocess.run(["promtool", "check", "config", str(RULES.parent / "prometheus.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_runbook_section():
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.*)$", runbook, re.M)}
    alerts = [r for r in rules() if "alert" in r]
    assert len(alerts) >= 8
    for a in alerts:
        ann = a["annotations"]
        assert ann["summary"] and ann["description"], a["alert"]
        # up == 0 and an info metric == 1 have no number to give
        if a["alert"] not in ("TlsprofDown", "TlsprofKernelCapabilityMissing"):
            assert "{{ $value" in ann["description"], f"{a['alert']}: the description should give the number"
        assert ann["runbook"] == f"docs/runbook.md#{a['alert'].lower()}"
        assert a["alert"].lower() in anchors, f"docs/runbook.md has no section {a['alert']}"


# ------------------------------------------------------------------ a real Prometheus

def short_for(workdir: Path) -> Path:
    """The shipped rules with every `for:` shortened to 2 s; nothing else changed."""
    doc = yaml.safe_load(RULES.read_text())
    for g in doc["groups"]:
        for r in g["rules"]:
            if "for" in r:
                r["for"] = "2s"
    path = workdir / "rules-short-for.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def firing(prom: Prometheus, alert: str, instance: str) -> list[dict]:
    return prom.query(f'ALERTS{{alertname="{alert}", alertstate="firing", instance="{instance}"}}')


def check_names_and_labels(scrape_text: str):
    """Every tlsprof metric a dashboard or rule names is exported, and every label it matches
    or groups by is one that metric carries (or instance, job, le)."""
    samples = parse_metrics(scrape_text)
    labels: dict[str, set] = {}
    for name, ls, _ in samples:
        labels.setdefault(name, set()).update(ls)
    recorded = {r["record"] for r in rules() if "record" in r}
    exprs = [e for _, _, e in dashboard_queries()] + [r["expr"] for r in rules()]
    for expr in exprs:
        used = set()
        for name, matchers in re.findall(r"\b(tlsprof[_:][A-Za-z0-9_:]*)(\{[^}]*\})?", expr):
            if ":" in name:
                assert name in recorded, f"{name} is not a recording rule ({expr})"
                continue
            assert name in labels, f"{name} is not exported by the agent ({expr})"
            used |= labels[name]
            for label in re.findall(r"(\w+)\s*=~?", matchers):
                assert label in labels[name] | {"instance", "job"}, f"{name} has no label {label} ({expr})"
        for group in re.findall(r"\b(?:by|on|ignoring)\s*\(([^)]*)\)", expr):
            for label in filter(None, (g.strip() for g in group.split(","))):
                assert label in used | {"instance", "job", "le", "comm", "port"}, f"no label {label} in {expr}"


def load_day1(port: int, seconds: float) -> dict:
    """Full, resumed and failed handshakes, keep-alive connections that nginx closes after its
    5th request: bounded in count and time."""
    totals = {"full": 0, "resumed": 0, "failed": 0, "requests": 0}
    deadline = time.monotonic() + seconds
    for _ in range(600):
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)  # spread over the whole time: an iteration may take 10 ms on a fast host
        c = https_connections(port, 6)
        totals["full"] += c["ok"]
        r = resuming_connections(port, 10)
        totals["full"] += r["full"]
        totals["resumed"] += r["resumed"]
        k = keepalive_connections(port, 2, 5, end="eof")
        totals["requests"] += k["requests"]
        totals["failed"] += failing_handshakes(port, 1, "AES128-SHA")
        totals["failed"] += failing.plain_http(port, 1)
    return totals


def export_shifted(prom: Prometheus, instance: str, since: float, shift: float, path: Path) -> int:
    """Every tlsprof sample (raw and recorded) Prometheus holds for `instance`, written as
    OpenMetrics with timestamps moved by `shift` seconds."""
    window = int(time.time() - since) + 5
    res = prom.query(f'{{__name__=~"tlsprof_.+|tlsprof:.+", instance="{instance}"}}[{window}s]')
    lines = 0
    with open(path, "w") as f:
        for series in sorted(res, key=lambda s: s["metric"]["__name__"]):
            m = dict(series["metric"])
            name = m.pop("__name__")
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(m.items()))
            for ts, v in series["values"]:
                f.write(f"{name}{{{labels}}} {v} {float(ts) + shift:.3f}\n")
                lines += 1
        f.write("# EOF\n")
    return lines


@pytest.mark.quiet
@pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus not installed")
def drawn_as_users_see_them(prom, t0: float, t1: float, instance: str, tmp_path: Path) -> dict:
    """Each dashboard drawn by Grafana's own panel components (tests/render) in headless
    Chromium, from the Prometheus the real agent filled: every panel drawn without an error,
    with data (a series with points, a table with rows), as many charts as the dashboard has
    time series and stat panels. The pictures go to test-output/dashboards/ for a person to
    look at. Every port and process name (Grafana's "All"), the per-process view for nginx.
    What each drew, by dashboard uid."""
    assert chromium(), "chromium is missing (scripts/deps.sh test installs it)"
    build = subprocess.run(["bash", str(RENDER_PAGE / "build.sh")], capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, f"tests/render/build.sh (scripts/deps.sh test runs npm ci): {build.stderr}"
    out = ROOT / "test-output" / "dashboards"
    out.mkdir(parents=True, exist_ok=True)
    r = Renderer(prom.port)
    every = {}
    try:
        for path in DASHBOARDS:
            dash = json.loads(path.read_text())
            png = out / f"{path.stem}.png"
            comm = "nginx" if dash["uid"] == "tlsprof-process" else ".+"
            drawn = r.draw(path.name, t0, t1, png, tmp_path / f"chromium-{path.stem}", instance=instance, comm=comm,
                           port=".+")
            every[dash["uid"]] = drawn
            assert "error" not in drawn, drawn
            shown = [p for p in panels(dash) if p["type"] != "row"]
            assert [p["title"] for p in drawn["panels"]] == [p["title"] for p in shown]
            bad = [p for p in drawn["panels"] if p["error"] or not p["frames"]
                   or (p["type"] == "table" and not p["rows"])
                   or (p["type"] != "table" and not any(s["points"] for s in p["series"]))
                   or any(s["infinite"] for s in p["series"])]
            assert bad == [], f"{path.name}: panels drawn without data or with an error: {bad}"
            charts = sum(1 for p in shown if p["type"] in ("timeseries", "stat"))
            assert drawn["charts"] == charts, (path.name, drawn["charts"], charts)
            print(f"drew {path.name}: {len(shown)} panels, {charts} charts: {png}")
    finally:
        r.close()
    return every


def test_dashboards_and_alerts_against_prometheus(tmp_path):
    workdir = tmp_path
    rule_file = short_for(workdir)
    agent_port = free_port()
    instance = f"127.0.0.1:{agent_port}"

    # ---- day 1: cheap handshakes
    # beside nginx a STARTTLS server (Postfix: an smtpd forked by its master), whose port the
    # overview names `smtp`
    postfix = services.Postfix(workdir) if services.available()["postfix"] is None else None
    # and an HTTP/3 server (Caddy: QUIC), whose handshakes the transport panels show as quic
    h3 = quic.CaddyH3(workdir, "dashboards").start() if not any(map(quic.available().get, ("caddy", "h3_get"))) \
        else None
    try:
        nginx = Nginx(workdir, workers=1, cert="ecdsa_p256", resumption=True, extra_server="keepalive_requests 5;")
    except BaseException:
        for s in (postfix, h3):
            if s:
                s.stop()
        raise
    mail_pid = ("--pid", str(postfix.pid)) if postfix else ()
    h3_pid = ("--pid", str(h3.pid)) if h3 else ()
    agent = Agent("--pid", str(nginx.pid), *mail_pid, *h3_pid, port=agent_port, scan_interval=0.5)
    prom1 = prom2 = None
    try:
        agent.wait_attached(nginx.workers())
        prom1 = Prometheus(workdir, "day1", instance, rule_file)
        wait_for(lambda: prom1.query(f'up{{instance="{instance}"}} == 1'), 20, "the first scrape")
        t0 = time.time()
        day1 = load_day1(nginx.port, 12)
        if postfix:
            mail = services.smtp_starttls_connections(postfix.port, 10)
            assert mail["ok"] == 10, mail
        if h3:
            got = quic.h3_get(h3.port, 20, h3.marker)
            assert got["ok"] == 20, got
        time.sleep(4)  # the last scrapes and rule evaluations
        t1 = time.time()
        assert day1["resumed"] > day1["full"] / 2 and day1["failed"] > 0 and day1["requests"] > 0, day1

        check_names_and_labels(agent.scrape_text())

        empty = []
        for uid, title, expr in dashboard_queries():
            q = substitute(expr, instance, "nginx", nginx.port)
            if prom1.finite_points(q, t0, t1) == 0:
                empty.append(f"{uid} / {title}: {q}")
        assert empty == [], "dashboard queries without data:\n" + "\n".join(empty)

        drawn = drawn_as_users_see_them(prom1, t0, t1, instance, tmp_path)
        if postfix:
            protocols = next(p for p in drawn["tlsprof-overview"]["panels"]
                             if p["title"] == "TLS connections/s by application protocol")
            assert any(s["name"] == f"port {postfix.port} smtp" for s in protocols["series"]), protocols
        if h3:
            for uid in ("tlsprof-overview",):
                transports = next(p for p in drawn[uid]["panels"] if p["title"] == "Handshakes/s by transport")
                assert {s["name"] for s in transports["series"]} >= {"tcp", "quic"}, transports
        # Why handshakes failed: the clients offering only a suite nginx lacks get its
        # handshake_failure alert; the plain-HTTP requests are no handshake but connections
        # without TLS on nginx's port.
        for uid in ("tlsprof-overview", "tlsprof-process"):
            reasons = next(p for p in drawn[uid]["panels"] if p["title"] == "Failed handshakes by reason")
            assert "handshake_failure (server)" in {s["name"] for s in reasons["series"]}, reasons
            untls = next(p for p in drawn[uid]["panels"] if p["title"] == "Connections without TLS by port")
            assert f"port {nginx.port} http" in {s["name"] for s in untls["series"]}, untls

        # Template variables: label_values(metric{…}, label) finds this run's values.
        for path in DASHBOARDS:
            for v in json.loads(path.read_text())["templating"]["list"]:
                if v["type"] != "query":
                    continue
                metric, label = re.fullmatch(r"label_values\((.*), (\w+)\)", v["query"]["query"]).groups()
                series = prom1.api("series", **{"match[]": substitute(metric, instance, "nginx", nginx.port),
                                                "start": t0, "end": t1})
                values = {s.get(label) for s in series}
                want = {"instance": instance, "comm": "nginx", "port": str(nginx.port)}[label]
                assert want in values, (v["name"], values)

        health = prom1.api("rules")["groups"]
        bad = [(r["name"], r.get("lastError")) for g in health for r in g["rules"] if r["health"] != "ok"]
        assert bad == [], bad
        no_data = []
        for r in rules():
            expr = r["record"] if "record" in r else as_bool(r["expr"])
            if "offset 1d" in expr:
                continue  # no yesterday yet: day 2
            if 'hook="none"' in expr:
                continue  # only where a kernel lacks a capability: promtool's unit test has it
            if "up{" in expr:
                expr = expr.replace('up{job="tlsprof"}', f'up{{job="tlsprof", instance="{instance}"}}')
            elif "record" in r:
                expr = f'{expr}{{instance="{instance}"}}'
            if prom1.finite_points(expr, t0, t1) == 0:
                no_data.append(r.get("record") or r.get("alert"))
        assert no_data == [], f"rules without data: {no_data}"

        mean1 = float(prom1.query(f'tlsprof:handshake_cpu_seconds:mean5m{{instance="{instance}"}}')[0]["value"][1])
        print(f"day 1: {day1}, CPU per full handshake {mean1 * 1e3:.2f} ms")
        ever = prom1.api("query_range", query=f'ALERTS{{alertname="TLSHandshakeCPUHigh", instance="{instance}"}}',
                         start=t0, end=t1, step=1)["result"]
        assert ever == [], f"the handshake-cost alert went off for ECDSA P-256 + X25519 ({mean1 * 1e3:.2f} ms)"

        # ---- yesterday's samples into a second Prometheus
        om = workdir / "day1.om"
        n = export_shifted(prom1, instance, t0 - 60, -86400, om)
        assert n > 100
        prom1.stop()
        prom1 = None
        r = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om),
                            str(workdir / "day2-data")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr

        # ---- day 2: the same server name, now with an RSA-4096 certificate, no resumption
        agent.stop()
        nginx.stop()
        nginx = Nginx(workdir, workers=1, cert="rsa4096", resumption=False)
        agent = Agent("--pid", str(nginx.pid), port=agent_port, scan_interval=0.5)
        agent.wait_attached(nginx.workers())
        prom2 = Prometheus(workdir, "day2", instance, rule_file)
        yesterday = prom2.query(f'tlsprof:handshake_cpu_seconds:mean5m{{instance="{instance}"}} offset 1d')
        assert yesterday, "the backfilled day 1 is not visible a day ago"
        t2 = time.time()
        full = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and full < 1000:  # about 50 handshakes/s
            full += https_connections(nginx.port, 5)["ok"]
            time.sleep(0.1)
        time.sleep(4)
        t3 = time.time()

        for r in rules():
            if "alert" in r and "offset 1d" in r["expr"]:
                if prom2.finite_points(as_bool(r["expr"]), t2, t3) == 0:
                    parts = {e: prom2.finite_points(e, t2, t3) for e in re.findall(r"tlsprof:[\w:]+(?: offset 1d)?",
                                                                                      r["expr"])}
                    pytest.fail(f"{r['alert']}: no data; points of its parts: {parts}")
        expected = ["TLSHandshakeCPUHigh", "TLSHandshakeCPURegression", "TLSResumptionRatioDropped"]
        wait_for(lambda: all(firing(prom2, a, instance) for a in expected), 30,
                 f"{expected} to fire: {prom2.query('ALERTS')}")
        mean2 = float(prom2.query(f'tlsprof:handshake_cpu_seconds:mean5m{{instance="{instance}"}}')[0]["value"][1])
        print(f"day 2: {full} full handshakes, CPU per full handshake {mean2 * 1e3:.2f} ms "
              f"(yesterday {float(yesterday[0]['value'][1]) * 1e3:.2f} ms)")
        assert mean2 > 0.003 > mean1
        desc = prom2.api("alerts")["alerts"]
        reg = next(a for a in desc if a["labels"]["alertname"] == "TLSHandshakeCPURegression")
        assert "at the same time yesterday" in reg["annotations"]["description"]
        assert re.search(r"against \d+(\.\d+)?(us|ms)", reg["annotations"]["description"]), reg["annotations"]
    finally:
        for p in (prom1, prom2):
            if p:
                p.stop()
        if agent.proc.poll() is None:
            agent.stop()
        nginx.stop()
        for s in (postfix, h3):
            if s:
                s.stop()


@pytest.mark.quiet
@pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus not installed")
@pytest.mark.skipif(not Path("/usr/lib/lighttpd/mod_nss.so").exists(), reason="lighttpd-mod-nss not installed")
def test_handshake_cost_alert_for_a_server_without_probes(tmp_path):
    """lighttpd on NSS (no entry point to probe: the kernel estimate) with an RSA-4096
    certificate: the shipped handshake-cost alert fires for it from the estimate, as it does
    for a probed server, and the recording rules carry its figure."""
    from harness.servers import Lighttpd
    rule_file = short_for(tmp_path)
    agent_port = free_port()
    instance = f"127.0.0.1:{agent_port}"
    srv = Lighttpd(tmp_path, module="nss", cert="rsa4096")
    agent = Agent("--pid", str(srv.pid), port=agent_port, scan_interval=0.5)
    prom = None
    try:
        agent.wait_attached([srv.pid])
        prom = Prometheus(tmp_path, "nss", instance, rule_file)
        wait_for(lambda: prom.query(f'up{{instance="{instance}"}} == 1'), 20, "the first scrape")
        full = 0
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and full < 400:
            full += https_connections(srv.port, 4, concurrency=2)["ok"]
            time.sleep(0.1)
        assert full > 30, full
        m = agent.scrape_text()
        assert 'tlsprof_handshake_cpu_method_info{comm="lighttpd",method="kernel_estimate",reason="no_entry_point"} 1' in m, m
        wait_for(lambda: firing(prom, "TLSHandshakeCPUHigh", instance), 30,
                 f"TLSHandshakeCPUHigh to fire: {prom.query('ALERTS')}")
        alert = firing(prom, "TLSHandshakeCPUHigh", instance)[0]["metric"]
        assert alert["comm"] == "lighttpd", alert
        mean = float(prom.query(f'tlsprof:handshake_cpu_seconds:mean5m{{instance="{instance}", comm="lighttpd"}}')
                     [0]["value"][1])
        print(f"lighttpd + NSS, RSA-4096: {full} handshakes, the estimate {mean * 1e3:.2f} ms each")
        assert mean > 0.003
    finally:
        if prom:
            prom.stop()
        agent.stop()
        srv.stop()
