import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness.agent import TLSPROF  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "kernel_scenario: run by the kernel matrix inside each guest kernel "
                                       "(tests/test_kernels.py)")
    if os.geteuid() != 0:
        pytest.exit("tlsprof's integration tests need root (they load eBPF programs)", returncode=2)
    if not TLSPROF.exists():
        pytest.exit(f"{TLSPROF} is missing: build it first (make build)", returncode=2)


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
def gotls_bin(tmp_path_factory):
    """The Go crypto/tls test server: built here, or the one TLSPROF_GOTLS names (the kernel
    matrix builds it on the host: compiling under software emulation takes minutes)."""
    from harness.servers import build_gotls
    if given := os.environ.get("TLSPROF_GOTLS"):
        return Path(given)
    built = build_gotls(tmp_path_factory.mktemp("gotls"))
    if built is None:
        pytest.skip("go is not installed")
    return built
