"""`tlsprof report` run as a user runs it: over servers while a load runs inside its window
(test_report.py's rules, test_services.py's protocols)."""
import atexit
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from .agent import TLSPROF
from .procs import cpu_ns, steal_seconds, stop_pid

# The longest a window may last: each ends once its load has and the agent has counted the
# last connections (`--until-eof`: the test closes the report's standard input).
MAX_WINDOW = 120.0


class Report:
    """A `tlsprof report` over a server (or several: a list of pids) while `load()` runs
    inside its window, which ends when the load has (the report's standard input closed),
    once tlsprof has counted the last connections."""

    def __init__(self, pid: int | list[int], load, extra=()):
        pids = pid if isinstance(pid, list) else [pid]
        out = Path(tempfile.mkdtemp(prefix="tlsprof-report-"))
        out.chmod(0o755)
        atexit.register(shutil.rmtree, out, True)  # kept while the test run lasts: a failure's files
        self.md, self.html, self.json_path = out / "report.md", out / "report.html", out / "report.json"
        p = subprocess.Popen(
            [str(TLSPROF), "report", *(a for p in pids for a in ("--pid", str(p))), "--seconds", str(MAX_WINDOW),
             "--until-eof", "-o", str(self.md), "--html", str(self.html), "--json", str(self.json_path), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = ""
        while "observing" not in seen:
            line = p.stderr.readline()
            if not line:
                p.wait(timeout=30)
                raise AssertionError(f"report did not start ({p.returncode}): {seen}")
            seen += line
        t0 = time.monotonic()
        try:
            self.client = load()
        except BaseException:
            stop_pid(p.pid)
            raise
        self.load_seconds = time.monotonic() - t0
        try:
            _, err = p.communicate(timeout=60)  # closes its standard input
        except subprocess.TimeoutExpired:
            stop_pid(p.pid)
            raise
        assert p.returncode == 0, err
        self.stderr = err
        self.data = json.loads(self.json_path.read_text())
        self.text = self.md.read_text()
        self.seconds = self.data["window_seconds"]
        # the window covers the load, and ends within the settle time after it (5 s at most)
        assert self.load_seconds <= self.seconds <= self.load_seconds + 6, (self.seconds, self.load_seconds)
        assert "standard input closed" in err, err

    def findings(self, rule: str) -> list[dict]:
        return [f for f in self.data["findings"] if f["rule"] == rule]

    def one(self, rule: str) -> dict:
        found = self.findings(rule)
        assert len(found) == 1, (rule, self.text)
        assert found[0]["title"] in self.text
        return found[0]

    def proc(self, comm: str = "nginx") -> dict:
        return next(p for p in self.data["processes"] if p["comm"] == comm)

    def count(self, keep, comm: str = "nginx") -> float:
        return sum(c["handshakes"] for c in self.proc(comm)["configs"] if keep(c))

    def mean_cpu(self, keep, comm: str = "nginx") -> float:
        cs = [c for c in self.proc(comm)["configs"] if keep(c)]
        return sum(c["cpu_seconds"] for c in cs) / sum(c["timed"] for c in cs)

    def table(self, header: str) -> list[list[str]]:
        """The rows of the Markdown table whose header row starts with `header`."""
        lines = self.text.splitlines()
        at = next(i for i, l in enumerate(lines) if l.startswith(header))
        rows = []
        for l in lines[at + 2:]:
            if not l.startswith("|"):
                break
            rows.append([c.strip() for c in l.strip("|").split("|")])
        return rows


def timed_report(srv, load, extra=()) -> Report:
    """A report over a running server (its .pid and .workers()) while `load(server)` runs;
    .truth_cpu: the server's own on-CPU seconds (schedstat, master and workers) from before
    the report started to after it ended; .steal: the hypervisor's steal time on the whole
    machine over the same span (/proc/stat), which schedstat leaves out and a handshake's
    CPU, clocked in the kernel, counts."""
    pids = [srv.pid, *srv.workers()]
    start, steal0 = sum(cpu_ns(p) for p in pids), steal_seconds()
    r = Report(srv.pid, lambda: load(srv), extra=extra)
    r.truth_cpu = (sum(cpu_ns(p) for p in pids) - start) / 1e9
    r.steal = steal_seconds() - steal0
    return r
