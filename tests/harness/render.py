"""The dashboards drawn as their users see them: tests/render's page (Grafana's own panel
components, bundled by esbuild) served here with the dashboards' JSON, its queries proxied to
a real Prometheus, and drawn by headless Chromium. The page writes what it drew per panel
into <pre id="report"> (JSON), which `--dump-dom` gives back; `--screenshot` the picture."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .procs import ROOT

PAGE = ROOT / "tests" / "render"
DASHBOARDS = ROOT / "dashboards"
# Chromium's window, and the dashboard's width: Grafana's grid is 24 columns of WIDTH / 24.
WIDTH = 1600
CHROMIUM_TIMEOUT = 120


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Renderer:
    """Serves the page on a loopback port; `draw` has Chromium draw one dashboard."""

    def __init__(self, prometheus_port: int):
        prom = f"http://127.0.0.1:{prometheus_port}"

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: bytes, ctype: str):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                if path.startswith("/api/v1/"):
                    try:
                        with urllib.request.urlopen(prom + self.path, timeout=30) as r:
                            return self._send(r.status, r.read(), "application/json")
                    except urllib.error.HTTPError as e:
                        return self._send(e.code, e.read(), "application/json")
                files = {"/": PAGE / "index.html", "/bundle.js": PAGE / "dist" / "bundle.js",
                         "/bundle.css": PAGE / "dist" / "bundle.css"}
                f = files.get(path)
                m = re.fullmatch(r"/dashboards/([\w.-]+\.json)", path)
                if m:
                    f = DASHBOARDS / m.group(1)
                if f is None or not f.is_file():
                    return self._send(404, b"not found", "text/plain")
                ctype = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
                         ".json": "application/json"}.get(f.suffix, "application/octet-stream")
                self._send(200, f.read_bytes(), ctype)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, dashboard: str, start: float, end: float, **variables) -> str:
        q = {"dashboard": dashboard, "from": f"{start:.0f}", "to": f"{end:.0f}", "width": WIDTH, **variables}
        return f"http://127.0.0.1:{self.port}/?" + urllib.parse.urlencode(q)

    def _chromium(self, url: str, profile: Path, *how: str, height: int = 4400) -> subprocess.CompletedProcess:
        return subprocess.run(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}",
             "--run-all-compositor-stages-before-draw", "--virtual-time-budget=30000", *how, url],
            capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT)

    def draw(self, dashboard: str, start: float, end: float, png: Path, profile: Path, **variables) -> dict:
        """What the page drew of `dashboard` over [start, end] (its report), and its picture in `png`."""
        url = self.url(dashboard, start, end, **variables)
        r = self._chromium(url, profile, "--dump-dom")
        m = re.search(r'<pre id="report">(.*?)</pre>', r.stdout, re.S)
        assert m and m.group(1), f"the page wrote no report: {r.stderr[-2000:]}"
        drawn = json.loads(html.unescape(m.group(1)))
        height = drawn.get("height", 4400)
        self._chromium(url, profile, f"--screenshot={png}", height=height)
        assert png.exists(), f"no screenshot of {dashboard}"
        return drawn

    def close(self):
        self.server.shutdown()
