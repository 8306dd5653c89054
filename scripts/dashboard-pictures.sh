#!/bin/bash
# The dashboards' pictures in docs/img/: drawn by tests/test_dashboards.py (Grafana's own panel
# components in headless Chromium, from a real Prometheus that scraped the real agent while
# real load ran against nginx: tests/render), then copied from test-output/dashboards/.
# Needs what `make test-deps` installs and a built tlsprof (`make build`); run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pytest -q -p no:cacheprovider "tests/test_dashboards.py::test_dashboards_and_alerts_against_prometheus"
mkdir -p docs/img
for d in tlsprof-overview tlsprof-process; do
  cp "test-output/dashboards/$d.png" "docs/img/$d.png"
done
echo "dashboard-pictures: docs/img/tlsprof-overview.png, docs/img/tlsprof-process.png"
