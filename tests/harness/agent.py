"""The real agent: `tlsprof run` started as a process and scraped over HTTP like Prometheus
does, and one-shot runs of the binary."""
from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from .metrics import parse_metrics, since, value
from .procs import ROOT, free_port, stop_pid, wait_for

TLSPROF = Path(os.environ.get("TLSPROF_BIN", ROOT / "target" / "release" / "tlsprof"))
UNIT = ROOT / "deploy" / "systemd" / "tlsprof.service"


def unit_caps() -> list[str]:
    """The capabilities the systemd unit grants, as names without CAP_ (lower case)."""
    text = UNIT.read_text()
    ambient = re.search(r"^AmbientCapabilities=(.*)$", text, re.M).group(1).split()
    bounding = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M).group(1).split()
    assert ambient == bounding, "the unit's ambient and bounding sets differ"
    return [c.removeprefix("CAP_").lower() for c in ambient]


def as_user_with(caps: list[str]) -> tuple:
    """An Agent prefix: user nobody with exactly `caps` (ambient, as systemd's
    AmbientCapabilities gives them)."""
    spec = ",".join(f"+{c}" for c in caps)
    return ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            f"--inh-caps=-all,{spec}", f"--ambient-caps=-all,{spec}")


class Agent:
    """A running `tlsprof run`, scraped over HTTP like Prometheus does. It says which
    processes it has attached to (and watches the ports of) in its --ready-file."""

    def __init__(self, *args: str, port: int | None = None, prefix: tuple = (), scan_interval: float = 0.5,
                 ssl_context=None, auth: tuple[str, str] | None = None):
        """ssl_context and auth: how to scrape an agent run with --web.config.file (https with
        that context; basic auth with that user and password)."""
        self.port = port or free_port()
        self.ssl_context, self.auth = ssl_context, auth
        self.log_path = Path(tempfile.mkstemp(prefix="tlsprof-agent-", suffix=".log")[1])
        self.log = open(self.log_path, "w+")
        # a directory any user may write in: the agent may run as an unprivileged user (prefix)
        self.dir = Path(tempfile.mkdtemp(prefix="tlsprof-agent-"))
        self.dir.chmod(0o777)
        self.ready_path = self.dir / "ready"
        self.proc = subprocess.Popen(
            [*prefix, str(TLSPROF), "run", "--listen", f"127.0.0.1:{self.port}", "--scan-interval", str(scan_interval),
             "--ready-file", str(self.ready_path), "-v", *args],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        try:
            wait_for(self._up, 20, f"tlsprof to serve /metrics (log: {self.output()})")
        except BaseException:
            # an agent that exits at start (or never serves) leaves no process, log or directory
            if self.proc.poll() is None:
                self.stop()
            else:
                self.log.close()
                self.log_path.unlink(missing_ok=True)
                shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def _up(self):
        if self.proc.poll() is not None:
            raise AssertionError(f"tlsprof exited with {self.proc.returncode}: {self.output()}")
        try:
            self.scrape_text()
            return True
        except OSError:
            return False

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}/metrics"

    def scrape_text(self, timeout: float = 5) -> str:
        req = urllib.request.Request(self.url)
        if self.auth:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=timeout, context=self.ssl_context) as r:
            return r.read().decode()

    def rss(self) -> int:
        """The agent's resident memory in bytes, from /proc."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def scrape(self):
        return parse_metrics(self.scrape_text())

    def value(self, name: str, **labels) -> float:
        return value(self.scrape(), name, **labels)

    def ready(self) -> dict[int, str]:
        """The processes the agent has attached to, with their names, as its ready file says
        (empty before its first scan)."""
        try:
            lines = self.ready_path.read_text().splitlines()
        except FileNotFoundError:
            return {}
        return {int(pid): name for pid, name in (line.split(" ", 1) for line in lines)}

    def attached(self, pid: int) -> bool:
        return pid in self.ready()

    def wait_attached(self, pids, timeout: float = 15.0):
        pids = list(pids)
        wait_for(lambda: all(self.attached(p) for p in pids), timeout,
                 f"tlsprof to attach to {pids} (log: {self.output()[-2000:]})")

    def scans(self) -> float:
        """How many scans of /proc the agent has completed (tlsprof_scan_duration_seconds)."""
        return self.value("tlsprof_scan_duration_seconds_count", scan="processes")

    def settle(self, scans: int = 2):
        """Waits until the agent has completed `scans` more scans: each scan comes after a
        read of every event the kernel had queued, and refreshes what is counted per scan
        (listening ports, TIME_WAIT sockets, exchanges, expired handshakes)."""
        target = self.scans() + scans
        wait_for(lambda: self.scans() >= target, 10, f"{scans} more scans of the agent")

    def mark(self) -> list:
        """The metrics now, for since(): what a test sharing this agent did from here on."""
        return self.scrape()

    def wait_value(self, name: str, expected: float, timeout: float = 10.0, base: list | None = None, **labels):
        """Waits until the metric (its increase since `base`, a mark(), when given) reaches
        `expected`, then checks after further scans that it stays there: returns its value then."""
        def now():
            m = self.scrape()
            return value(since(m, base) if base is not None else m, name, **labels)
        wait_for(lambda: now() >= expected, timeout, lambda: f"{name}{labels} to reach {expected} (now {now()})")
        self.settle()
        return now()

    def stop(self) -> str:
        stop_pid(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=10)
        out = self.output()
        self.log.close()
        self.log_path.unlink(missing_ok=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        # pytest shows a test's captured output only when it fails: the agent's log with it
        print(f"tlsprof's log, its end:\n{out[-6000:]}")
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            self.stop()


def run_tlsprof(*args: str, timeout: float = 30, prefix=()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, str(TLSPROF), *args], capture_output=True, text=True, timeout=timeout)
