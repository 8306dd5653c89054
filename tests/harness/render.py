"""The dashboards drawn as their users see them: tests/render's page (Grafana's own panel
components, bundled by esbuild) served here with the dashboards' JSON, its queries proxied to
a real Prometheus, and drawn by headless Chromium. The page writes what it drew per panel
into <pre id="report"> (JSON), which `--dump-dom` gives back; `--screenshot` the picture."""
from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import zlib
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


# ------------------------------------------------- a page of tlsprof's own in Chromium

def headless(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """Chromium, headless, with a profile of its own, on `args`."""
    profile = tempfile.mkdtemp(prefix="tlsprof-chromium-")
    try:
        return subprocess.run(
            [chromium() or "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", *args],
            capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def page_dom(page: Path) -> str:
    """The page's DOM once Chromium has loaded it."""
    dom = headless("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    return dom.stdout


def check_colours(page: Path, expect_colours: dict[str, int], size: tuple[int, int] = (1000, 2600)):
    """A screenshot of the page holds at least so many pixels of each colour."""
    shot = page.with_suffix(".png")
    r = headless(f"--screenshot={shot}", f"--window-size={size[0]},{size[1]}", "--hide-scrollbars", page.as_uri())
    assert shot.exists(), r.stderr[-2000:]
    w, h, bpp, rows = png_pixels(shot)
    assert (w, h) == size
    for colour, at_least in expect_colours.items():
        rgb = bytes.fromhex(colour[1:])
        n = sum(1 for row in rows for x in range(0, len(row), bpp) if row[x:x + 3] == rgb)
        assert n >= at_least, f"{colour}: {n} pixels in the screenshot, expected at least {at_least}"


def png_pixels(path: Path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes): (w, h, rows)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w, h, bpp = 8, b"", 0, 0, 3
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 4 if ctype == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


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
