"""A real Prometheus server on loopback, scraping the agent and answering queries."""
from __future__ import annotations

import json
import math
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from .procs import free_port, stop_pid, wait_for


class Prometheus:
    def __init__(self, workdir: Path, name: str, target: str, rule_file: Path | None = None, scrape: dict | None = None):
        """Scrapes `target` every second as job tlsprof, with `scrape`'s settings added to the
        scrape config (scheme, tls_config, basic_auth…) and `rule_file`'s rules."""
        self.port = free_port()
        self.data = workdir / f"{name}-data"
        self.data.mkdir(exist_ok=True)
        cfg = workdir / f"{name}.yml"
        cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rule_file)] if rule_file else [],
            "scrape_configs": [{"job_name": "tlsprof", "static_configs": [{"targets": [target]}], **(scrape or {})}],
        }))
        self.log = workdir / f"{name}.log"
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={self.data}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        wait_for(self._ready, 60, f"prometheus to start ({self.log})")

    def _ready(self):
        assert self.proc.poll() is None, self.log.read_text()[-2000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"{path} {params}: {e.read().decode()}")
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float | None = None):
        return self.api("query", query=expr, **({"time": at} if at else {}))["result"]

    def finite_points(self, expr: str, start: float, end: float) -> int:
        res = self.api("query_range", query=expr, start=start, end=end, step=1)["result"]
        return sum(1 for s in res for _, v in s["values"] if math.isfinite(float(v)))

    def stop(self):
        stop_pid(self.proc.pid, signal.SIGTERM, timeout=30)
