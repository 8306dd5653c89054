import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from lib import TLSPROF  # noqa: E402


def pytest_configure(config):
    if os.geteuid() != 0:
        pytest.exit("tlsprof's integration tests need root (they load eBPF programs)", returncode=2)
    if not TLSPROF.exists():
        pytest.exit(f"{TLSPROF} is missing: build it first (make build)", returncode=2)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("tlsprof")
