"""Other work on the host, as production hosts have: processes that copy 64 MiB buffers
without a pause (a memory-bound load that takes CPU time and memory bandwidth from the
servers under test). Each is bounded in time; stopped by its pid."""
import subprocess
import sys

from .procs import stop_pid

COPY = "import time\nb=bytearray(64<<20)\nt=time.time()\nwhile time.time()-t<{seconds}:\n    c=bytes(b)\n"


class Copiers:
    """`n` memory-copying processes from now until stop() (or `seconds` at most)."""

    def __init__(self, n: int, seconds: float = 1800.0):
        self.procs = [subprocess.Popen([sys.executable, "-c", COPY.format(seconds=seconds)]) for _ in range(n)]

    def stop(self):
        for p in self.procs:
            stop_pid(p.pid)
            p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.stop()
