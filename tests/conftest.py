import os
import sys
from pathlib import Path

import pytest

try:
    from pytest import TestReport
except ImportError:  # pytest < 7: Debian 11's 6.0.2, in the kernel matrix's bullseye guest
    from _pytest.reports import TestReport

sys.path.insert(0, str(Path(__file__).parent))

from harness.agent import TLSPROF  # noqa: E402

# tests/render is the dashboards' drawing page (Node, its node_modules linked in): nothing to collect
collect_ignore = ["render"]


def pytest_configure(config):
    config.addinivalue_line("markers", "kernel_scenario: run by the kernel matrix inside each guest kernel "
                                       "(tests/test_kernels.py), not on the host")
    config.addinivalue_line("markers", "quiet: asserts a CPU figure or a timing: runs after the kernel matrix's "
                                       "guests have finished, on an otherwise idle machine")
    if os.geteuid() != 0:
        pytest.exit("tlsprof's integration tests need root (they load eBPF programs)", returncode=2)
    if not TLSPROF.exists():
        pytest.exit(f"{TLSPROF} is missing: build it first (make build)", returncode=2)


def pytest_collection_modifyitems(config, items):
    """The kernel scenarios run inside the kernel matrix's guests (which set TLSPROF_SCENARIOS),
    not again on the host, whose own tests cover the same ground. The guests run in the
    background from the start (pytest_collection_finish), at the lowest priority: the tests
    that only count go first, then the matrix's, then those marked quiet, which measure CPU
    or time and so run once the guests are done."""
    if not os.environ.get("TLSPROF_SCENARIOS"):
        scenarios = [i for i in items if i.get_closest_marker("kernel_scenario")]
        if scenarios:
            config.hook.pytest_deselected(items=scenarios)
            items[:] = [i for i in items if not i.get_closest_marker("kernel_scenario")]

    def phase(item) -> int:
        if item.get_closest_marker("quiet"):
            return 2
        return 1 if item.module.__name__ == "test_kernels" else 0
    items.sort(key=phase)  # stable: each phase keeps the files' order


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    hosts = {i.callspec.params["host"] for i in session.items
             if i.module.__name__ == "test_kernels" and "scenario_on" in i.name and hasattr(i, "callspec")}
    if hosts:
        from harness.guest import HOSTS, start_matrix
        start_matrix([h for h in HOSTS if h in hosts])


def pytest_terminal_summary(terminalreporter):
    """Each test file's time, and how long each kernel guest ran with its slowest scenarios:
    where the budget (docs/testing.md) goes, in every CI log."""
    per_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            if isinstance(r, TestReport):
                f = r.nodeid.split("::")[0]
                per_file[f] = per_file.get(f, 0.0) + r.duration
    if per_file:
        terminalreporter.write_line("seconds per test file (set-up, call and teardown):")
        for f, t in sorted(per_file.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"  {t:7.1f}  {f}")
        terminalreporter.write_line(f"  {sum(per_file.values()):7.1f}  all files")
    from harness.figures import SEEN
    for line in SEEN:
        terminalreporter.write_line(line)
    from harness.guest import FINISHED
    for suite, run in FINISHED:
        slow = sorted(run.times.items(), key=lambda kv: -kv[1])[:4]
        terminalreporter.write_line(f"guest {suite} ({run.release or 'did not boot'}): {run.wall:.0f} s; slowest: "
                                    + ", ".join(f"{n} {t:.0f} s" for n, t in slow))


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tlsprof")


def _server(factory, *needs):
    import shutil
    for cmd in needs:
        if not shutil.which(cmd):
            pytest.skip(f"{cmd} not installed")
    server = factory()
    yield server
    server.stop()


@pytest.fixture
def nginx(workdir):
    """nginx (Debian's package) with 2 workers, ECDSA P-256, TLS 1.2 and 1.3."""
    from harness.servers import Nginx
    yield from _server(lambda: Nginx(workdir, workers=2), "nginx")


@pytest.fixture
def apache(workdir):
    """Apache httpd, mod_ssl, threaded event MPM."""
    from harness.servers import Apache
    yield from _server(lambda: Apache(workdir), "apache2")


@pytest.fixture
def haproxy(workdir):
    """HAProxy terminating TLS itself."""
    from harness.servers import HAProxy
    yield from _server(lambda: HAProxy(workdir), "haproxy")


@pytest.fixture(scope="session")
def gotls_bin():
    """The Go crypto/tls test server, built once per content (harness.build)."""
    from harness.build import gotls
    built = gotls()
    if built is None:
        pytest.skip("go is not installed")
    return built
