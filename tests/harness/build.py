"""Test programs built once per content: the Go crypto/tls server and the C test servers
are built into a cache keyed by their source, the command that builds them and the
toolchain's version, and every later test (or run, or guest) takes the cached binary."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .procs import ROOT

# Not under /var/cache: the kernel matrix's guests see this machine's root filesystem with a
# tmpfs of their own on /var/cache, and find the binaries built here.
CACHE = Path(os.environ.get("TLSPROF_BUILD_CACHE", "/var/lib/tlsprof-testdeps/build"))


def _version(argv: list[str]) -> str:
    r = subprocess.run(argv, capture_output=True, text=True)
    return r.stdout + r.stderr


def cached(name: str, sources: list[Path], build, toolchain: list[str], extra: str = "") -> Path:
    """The binary `name` built by build(out_dir) -> None from `sources`, or the one built
    before from the same sources, build and toolchain (its `--version`-like output: argv)."""
    h = hashlib.sha256()
    for s in sources:
        h.update(s.name.encode() + b"\0" + s.read_bytes() + b"\0")
    h.update(_version(toolchain).encode() + extra.encode())
    key = h.hexdigest()[:24]
    out = CACHE / f"{name}-{key}" / name
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=CACHE))
    try:
        build(tmp)
        assert (tmp / name).exists(), f"building {name} made no {tmp / name}"
        tmp.chmod(0o755)
        try:
            os.rename(tmp, out.parent)  # atomic: a concurrent build of the same key loses the race
        except OSError:
            if not out.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def go() -> str | None:
    return shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)


def gotls(*flags: str, goarch: str | None = None) -> Path | None:
    """tests/servers/gotls built with these `go build` flags (such as a stripped build's
    `-ldflags=-s -w`), for GOARCH goarch if given (arm64: for the arm64 guest); None without
    a Go toolchain. TLSPROF_GOTLS names one built already: a guest booted over a Debian root
    has no Go, and takes the host's (harness.guest)."""
    if not flags and not goarch and os.environ.get("TLSPROF_GOTLS"):
        return Path(os.environ["TLSPROF_GOTLS"])
    tool = go()
    if not tool:
        return None
    src = ROOT / "tests/servers/gotls/main.go"

    def build(d: Path):
        (d / "main.go").write_text(src.read_text())
        (d / "go.mod").write_text("module gotls\n\ngo 1.21\n")
        env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0",
               **({"GOARCH": goarch} if goarch else {})}
        env.setdefault("HOME", "/root")
        r = subprocess.run([tool, "build", *flags, "-o", str(d / "gotls"), "."], cwd=d, capture_output=True,
                           text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
        (d / "main.go").unlink()
        (d / "go.mod").unlink()

    return cached("gotls", [src], build, [tool, "version"], extra=" ".join(flags) + (f" GOARCH={goarch}" if goarch else ""))


def c_program(name: str, source: Path, *flags: str, strip: bool = False) -> Path:
    """A C test program: `gcc -O2 FLAGS -o NAME SOURCE LIBS...` (flags after the source are
    the libraries), optionally stripped. Keyed also by the OpenSSL development package it
    links against, whose static libraries a -static build embeds."""
    def build(d: Path):
        r = subprocess.run(["gcc", "-O2", "-o", str(d / name), str(source), *flags], capture_output=True, text=True,
                           timeout=300)
        if r.returncode != 0:
            raise BuildError(r.stderr[-600:])
        if strip:
            subprocess.run(["strip", "--strip-all", str(d / name)], check=True)

    ssl_dev = _version(["dpkg-query", "-W", "-f", "${Version}", "libssl-dev"])
    return cached(name, [source], build, ["gcc", "--version"], extra=" ".join(flags) + f" strip={strip} {ssl_dev}")


class BuildError(Exception):
    """The compiler refused: its message."""
