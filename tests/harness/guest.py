"""The host matrix: whole Debian hosts, each release's packaged kernel (scripts/kernels.sh)
booted in QEMU with virtme-ng over that release's own root filesystem (scripts/roots.sh),
with tlsprof installed there from the .deb (`make dist`'s), running the kernel scenarios
(tests/test_kernel_scenarios.py) against that release's own servers and Python. Nested KVM
does not work on these machines, so the guests run under software emulation (TCG) unless
KVM is seen to work."""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from .procs import ROOT
from .servers import TESTDEPS

VNG = TESTDEPS / "vng" / "bin" / "vng"
KERNELS = TESTDEPS / "kernels"
# Waits inside a guest are stretched this much (harness.procs.SLOW): its CPU is emulated, and
# it runs at the lowest priority beside the host's tests (start_matrix).
GUEST_SLOW = 10
SCENARIO_FILE = "tests/test_kernel_scenarios.py"
ROOTS = TESTDEPS / "roots"
# Where a Host guest sees the project's tree (read-only) and its run's directory (read-write):
# mount points scripts/roots.sh makes in each root.
GUEST_TREE, GUEST_RUN = Path("/tlsprof"), Path("/tlsprof-run")
MUSL = {"amd64": "x86_64-unknown-linux-musl", "arm64": "aarch64-unknown-linux-musl"}


@dataclass(frozen=True)
class Host:
    """A whole Debian host: a suite's kernel booted over that suite's own root filesystem
    (scripts/roots.sh: debootstrap, its own nginx, apache2, haproxy, lighttpd, OpenSSL,
    GnuTLS, glibc and Python with pytest), of this machine's architecture or another
    (arm64: qemu-system-aarch64 under TCG). The root is never written, so that every boot
    starts from the same state: without --rw, virtme-ng exports it read-only and lays a
    writable overlay (its upper layer in the guest's memory) on /etc, /lib, /usr, /var, /tmp,
    /home, /opt and /srv (and here /root), gone at power-off; the run's own files go to
    GUEST_RUN, a directory of this machine. tlsprof is installed there from the release's
    .deb of the host's architecture (its static musl binary: glibc-linked, it needs
    GLIBC_2.34, which Debian 11 lacks)."""
    suite: str
    arch: str = "amd64"
    column: str = ""  # its column of docs/hosts.md's kernel table, where it has one
    # scenarios not run there, and why: (scenario, reason) pairs (each a skipped test)
    gaps: tuple[tuple[str, str], ...] = ()

    def gap(self, scenario: str) -> str | None:
        return dict(self.gaps).get(scenario)

    @property
    def name(self) -> str:
        return f"{self.suite}-{self.arch}"

    @property
    def root(self) -> Path:
        return ROOTS / self.name

    @property
    def native(self) -> bool:
        return self.arch == {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)

    def kernel(self) -> tuple[Path, str]:
        """The vmlinuz and release of the suite's kernel for this architecture, its modules in the root."""
        d = KERNELS / (self.suite if self.arch == "amd64" else self.name)
        return _kernel_in(d, self.name, self.root / "lib/modules", "scripts/roots.sh")

    def package(self) -> Path:
        """The .deb the guest installs: TLSPROF_DEB_<ARCH>, else the one scripts/dist.sh
        left in dist/ (make test builds them: make host-package)."""
        if f"TLSPROF_DEB_{self.arch.upper()}" in os.environ:
            return Path(os.environ[f"TLSPROF_DEB_{self.arch.upper()}"])
        debs = sorted((ROOT / "dist").glob(f"tlsprof_*_{self.arch}.deb"))
        if not debs:
            raise FileNotFoundError(f"no tlsprof .deb for {self.arch} in {ROOT / 'dist'}: "
                                    f"TLSPROF_DIST_TARGETS={MUSL[self.arch]} bash scripts/dist.sh")
        return debs[-1]

    def vng_flags(self, rw: Path) -> list[str]:
        flags = ["--root", str(self.root), "--overlay-rwdir=/root", f"--rodir={GUEST_TREE}={ROOT}",
                 f"--rwdir={GUEST_RUN}={rw}"]
        if not self.native:
            # qemu-system-aarch64 -M virt -cpu cortex-a57 under multi-threaded TCG; virtme-ng
            # boots it through an initramfs made with the root's own busybox-static (its Rust
            # init is for this machine's architecture: the guest runs its shell init)
            flags += ["--arch", self.arch]
        return flags


# The hosts, with docs/hosts.md's kernel table column of those of this machine's architecture.
HOSTS = [Host("bullseye", column="5.10 (Debian 11)",
              gaps=(("test_lighttpd_gnutls", "Debian 11 packages no lighttpd-mod-gnutls"),)),
         Host("bookworm", column="6.1 (Debian 12)"),
         Host("trixie", column="6.12 (Debian 13)"),
         Host("bookworm", "arm64", gaps=(
             ("test_go_server_timed", "arm64: Go handshakes timed but mostly labelled other (not yet understood)"),
             ("test_kernel_estimate", "arm64: the kernel estimate times no handshake (not yet understood)")))]
# In every run, all of them.
MATRIX = HOSTS


@dataclass
class GuestRun:
    """What a guest said: its console, pytest's output, each test's outcome and message, and
    what tlsprof reported of the guest kernel's hooks."""
    release: str
    console: str
    pytest_log: str
    # what `tlsprof --version` said in the guest, once installed from the .deb
    version: str = ""
    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    hooks: dict | None = None
    # seconds: each scenario's, and the guest's from boot to power-off
    times: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0

    def output(self, tail: int = 6000) -> str:
        return f"--- pytest in the guest ---\n{self.pytest_log[-tail:]}\n--- console ---\n{self.console[-tail:]}"


def _kernel_in(d: Path, name: str, modules: Path, maker: str) -> tuple[Path, str]:
    """The vmlinuz and release kept in d, once its modules are in `modules` (`maker` puts them there)."""
    img, version = d / "vmlinuz", d / "version"
    if not img.exists() or not version.exists():
        raise FileNotFoundError(f"{name}'s kernel is not in {d}: run scripts/kernels.sh (scripts/deps.sh does)")
    release = version.read_text().strip()
    if not (modules / release).is_dir():
        raise FileNotFoundError(f"{modules / release} is missing: run {maker}")
    return img, release


def _boot(img: Path, rw: Path, script: Path, kvm: bool, timeout: float, host: Host | None = None) -> str:
    """Boots img with script as the guest's command; over this machine's root, or over
    host's own root (its flags: Host.vng_flags). Another architecture's host is always
    emulated, by multi-threaded TCG (virtme-ng asks no KVM for it)."""
    cmd = [str(VNG), "--run", str(img)]
    if not kvm and (host is None or host.native):
        # One host thread runs both vCPUs: under multi-threaded TCG a vCPU can still run an
        # int3 the kernel has already patched away when a static key flips (a tracepoint or perf
        # event attached), and the 6.12 guest died with "Fatal exception in interrupt" in
        # __schedule. The guest keeps two CPUs; only QEMU's emulation is serialised.
        cmd += ["--disable-kvm", "--qemu-opts=-accel tcg,thread=single"]
    cmd += ["--cpus", "2", "--memory", "3G", *(host.vng_flags(rw) if host else ["--rwdir", str(rw)]),
            "--verbose", "--exec", str(script)]
    env = {**os.environ, "PATH": f"{VNG.parent}:{os.environ.get('PATH', '')}"}
    # at the lowest priority: a guest runs on the CPU time the host's tests leave idle; in a
    # session of its own, so that a guest that outlives its time (a KVM probe that hangs) is
    # stopped whole, QEMU with it, not left running after the tests
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, errors="replace",
                          preexec_fn=lambda: os.nice(19), start_new_session=True) as p:
        try:
            out, err = p.communicate(timeout=timeout)
            return out + err
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return (out or "") + (err or "") + f"\n[timed out after {timeout:.0f} s]"


# (suite, run) of every guest that ran, for the session's summary (conftest.py)
FINISHED: list[tuple[str, GuestRun]] = []

_KVM: bool | None = None
_KVM_LOCK = threading.Lock()


def kvm_works(img: Path) -> bool:
    """Whether this machine's KVM boots a guest (nested KVM fails here: QEMU stops with
    "failed to set MSR 0x10a"); asked once, with a guest that only says it ran."""
    with _KVM_LOCK:
        return _kvm_works(img)


def _kvm_works(img: Path) -> bool:
    global _KVM
    if _KVM is None:
        _KVM = False
        if os.path.exists("/dev/kvm"):
            with tempfile.TemporaryDirectory() as d:
                rw = Path(d)
                script = rw / "ok.sh"
                script.write_text(f"#!/bin/sh\necho ok > {rw}/ok\n")
                script.chmod(0o755)
                _boot(img, rw, script, kvm=True, timeout=90)
                _KVM = (rw / "ok").exists()
    return _KVM


_RUNS: dict[str, Future] = {}


def start_matrix(hosts: list[Host] = MATRIX):
    """Boots every host of the matrix at once, in the background, each running the
    scenarios: the session starts them as soon as it has collected a test that needs them
    (conftest.py), so that they run while the host's own tests do. Idempotent."""
    from .build import gotls
    for host in hosts:
        if host.name in _RUNS:
            continue
        # built here: compiling under software emulation takes minutes; the guests find it cached
        gotls() if host.native else gotls(goarch=host.arch)
        f: Future = Future()
        _RUNS[host.name] = f

        def run(f=f, host=host):
            try:
                f.set_result(run_on_host(host))
            except BaseException as e:  # noqa: BLE001 - handed to the test that waits for it
                f.set_exception(e)
        threading.Thread(target=run, name=f"guest-{host.name}", daemon=True).start()


def matrix_run(host: Host) -> GuestRun:
    """The host's guest run, waited for (started now if start_matrix was not called)."""
    start_matrix([host])
    return _RUNS[host.name].result()


def run_on_host(host: Host, tests: str = SCENARIO_FILE, timeout: float = 2400,
                env: dict[str, str] | None = None) -> GuestRun:
    """Boots host (its kernel over its own root) and runs `pytest -m kernel_scenario TESTS`
    inside with the root's Python and pytest, the project's tree at GUEST_TREE."""
    if not VNG.exists():
        raise FileNotFoundError(f"{VNG} is missing: scripts/deps.sh installs virtme-ng")
    img, release = host.kernel()
    deb = host.package()
    rw = Path(tempfile.mkdtemp(prefix=f"tlsprof-host-{host.name}-"))
    rw.chmod(0o755)
    try:
        from .build import gotls
        exports = dict(env or {})
        shutil.copy2(deb, rw / "tlsprof.deb")
        go_server = gotls() if host.native else gotls(goarch=host.arch)
        if go_server:
            shutil.copy2(go_server, rw / "gotls")
            exports["TLSPROF_GOTLS"] = str(GUEST_RUN / "gotls")
        _scenario_script(rw, GUEST_RUN, f"""\
mkdir -p /var/log/nginx  # nginx opens its compiled-in error log before reading its -c file
# installed as an operator would (the root is read-only: dpkg writes to the guest's overlays)
dpkg -i {GUEST_RUN}/tlsprof.deb > {GUEST_RUN}/dpkg.log 2>&1 || cat {GUEST_RUN}/dpkg.log
/usr/bin/tlsprof --version > {GUEST_RUN}/version 2>&1
export TLSPROF_SCENARIOS=1 TLSPROF_SLOW={GUEST_SLOW * (1 if host.native else 3)}
export TLSPROF_BIN=/usr/bin/tlsprof TLSPROF_HOOKS_OUT={GUEST_RUN}/hooks.json
export PATH=/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1
# A TIME_WAIT lasts its 60 s here: on a guest starved of CPU (four share two cores), a
# client's FIN resent before the server's ACK reached it makes the client's kernel answer
# the second ACK with a reset, which ends the server's TIME_WAIT at once under Linux's
# default (RFC 1337's hazard): ss would list fewer sockets than entered TIME_WAIT.
sysctl -qw net.ipv4.tcp_rfc1337=1
""", exports, GUEST_TREE, "python3",
                         tests + (f" -k {shlex.quote(' and '.join(f'not {n}' for n, _ in host.gaps))}"
                                  if host.gaps else ""))
        t0 = time.monotonic()
        console = _boot(img, rw, GUEST_RUN / "run.sh", kvm=kvm_works(img) if host.native else False,
                        timeout=timeout, host=host)
        return _collect(rw, console, time.monotonic() - t0, host.name, release)
    finally:
        shutil.rmtree(rw, ignore_errors=True)


def _scenario_script(rw: Path, seen_as: Path, prelude: str, env: dict[str, str], tree: Path, python: str,
                     tests: str) -> Path:
    """Writes rw/run.sh, the guest's command: `prelude` and `env` exported, then
    `pytest -m kernel_scenario TESTS` in `tree` with `python`, its results left in rw
    (which the guest sees as `seen_as`) for _collect."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script = rw / "run.sh"
    script.write_text(f"""#!/bin/bash
{prelude}{exports}cd {tree}
uname -r > {seen_as}/release
{python} -m pytest -p no:cacheprovider -m kernel_scenario {tests} --junitxml={seen_as}/junit.xml \\
  -o junit_family=xunit1 > {seen_as}/pytest.log 2>&1
echo $? > {seen_as}/rc
""")
    script.chmod(0o755)
    return script


def _collect(rw: Path, console: str, wall: float, name: str, release: str) -> GuestRun:
    """What a guest left in its run directory: release, pytest's log, junit and hooks; a
    guest that booted another kernel than `release` is an error."""
    read = lambda n: (rw / n).read_text(errors="replace") if (rw / n).exists() else ""  # noqa: E731
    run = GuestRun(release=read("release").strip(), console=console, pytest_log=read("pytest.log"), wall=wall,
                   version=read("version").strip())
    FINISHED.append((name, run))
    if (rw / "junit.xml").exists():
        for case in ET.parse(rw / "junit.xml").getroot().iter("testcase"):
            n = case.get("name", "")
            bad = next((c for c in case if c.tag in ("failure", "error", "skipped")), None)
            outcome = "passed" if bad is None else {"failure": "failed"}.get(bad.tag, bad.tag)
            run.outcomes[n] = (outcome, "" if bad is None else (bad.get("message", "") + "\n" + (bad.text or "")))
            run.times[n] = float(case.get("time", 0))
    if (rw / "hooks.json").exists():
        import json
        run.hooks = json.loads((rw / "hooks.json").read_text())
    if run.release and run.release != release:
        raise AssertionError(f"the guest ran {run.release}, not {release}")
    return run
