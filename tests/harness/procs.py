"""Processes and ports: waiting for things, stopping what a test started (by its pid), and
the kernel's own accounting of a process."""
from __future__ import annotations

import os
import random
import shutil
import signal
import sys
import socket
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# Every wait is stretched by this factor where things run slowly: tests/test_kernels.py sets
# it inside its QEMU guests, which emulate the CPU in software.
SLOW = float(os.environ.get("TLSPROF_SLOW", "1"))


# Servers' ports: under the kernel's ephemeral range (32768 on), where clients' own ports
# come from, and under the 20000 on that clients given ports of their own use. A port the
# kernel picked (bind to port 0) could be one a client used a moment ago: its TIME_WAIT
# socket, on that local port, would then count as the server's (ss by local port; a CI run
# saw one).
SERVER_PORTS = range(12000, 20000)


def free_port() -> int:
    """A port no socket of any address or state holds (a bind of the wildcard address,
    without SO_REUSEADDR, fails against any of them, TIME_WAIT ones too)."""
    for _ in range(200):
        port = random.choice(SERVER_PORTS)
        try:
            with socket.socket(socket.AF_INET6) as s6, socket.socket() as s4:
                s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                s4.bind(("0.0.0.0", port))
                s6.bind(("::", port))
        except OSError:
            continue
        return port
    raise AssertionError(f"no free port in {SERVER_PORTS}")


def wait_for(pred, timeout: float, what, interval: float = 0.1):
    """Polls pred() until it returns a truthy value; fails naming what was awaited (`what`, or
    what it returns when called at the timeout: a message with the value then)."""
    timeout *= SLOW
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what} (last: {last!r})")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(port: int, timeout: float = 10.0):
    wait_for(lambda: port_open(port), timeout, f"port {port} to accept connections")


def gone(pid: int) -> bool:
    """Whether the process has exited: no longer there, or a zombie. A daemon's zombie waits
    for whoever adopted it (this machine's init reaps seconds later), but has stopped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def stop_pid(pid: int, sig=signal.SIGTERM, timeout: float = 10.0):
    """Stops a process we started, by its pid, and waits for it to go."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        if gone(pid):
            return
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)


def stop_all(stops):
    """Calls each of `stops` (the ways to stop what a run started), whatever failed before:
    a failure is printed and the rest are still stopped."""
    for stop in stops:
        try:
            stop()
        except Exception as e:  # noqa: BLE001 - report and go on stopping the rest
            print(f"stopping: {e!r}", file=sys.stderr)


def proc_children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d))
    return out


def cpu_ns(pid: int) -> int:
    """On-CPU time of all threads of a process (nanoseconds), from the kernel's own accounting."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except OSError:
            pass
    return total


def have(cmd: str) -> bool:
    return shutil.which(cmd) is not None


def steal_seconds() -> float:
    """Time the hypervisor took from this machine's vCPUs, all CPUs (/proc/stat)."""
    fields = open("/proc/stat").readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")
