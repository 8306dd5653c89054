"""The host matrix: each Debian release (11, 12, 13: kernels 5.10, 6.1, 6.12) booted in
QEMU with virtme-ng, its own kernel over its own root filesystem (scripts/kernels.sh,
scripts/roots.sh), tlsprof installed there from the .deb, running
tests/test_kernel_scenarios.py with that release's servers, libraries and Python. Each
host × scenario is a test here, failing with the guest's own output; docs/hosts.md's kernel
table must say what each guest reported of its hooks. The arm64 host (Debian 12's arm64
kernel and root, qemu-system-aarch64 under TCG) runs nginx's scenarios."""
import ast
import os
import re

import pytest

from harness.guest import MATRIX, SCENARIO_FILE, GuestRun, matrix_run
from harness.procs import ROOT
from harness.metrics import hook_info


def scenarios() -> list[str]:
    """The scenario tests of SCENARIO_FILE, in its order: its test functions and its test
    classes' test methods (their names are unique across the file)."""
    tree = ast.parse((ROOT / SCENARIO_FILE).read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            names += [f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test_")]
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            names.append(node.name)
    assert len(names) == len(set(names)), f"scenario names repeat in {SCENARIO_FILE}: {names}"
    return names


def guest(host) -> GuestRun:
    """The host's guest, started with the session (conftest.py) and waited for here."""
    try:
        return matrix_run(host)
    except (FileNotFoundError, AssertionError) as e:
        raise AssertionError(f"{host.name}: {e}") from None


@pytest.mark.parametrize("host,scenario", [(h, sc) for h in MATRIX for sc in scenarios()],
                         ids=[f"{h.name}-{sc.removeprefix('test_')}" for h in MATRIX for sc in scenarios()])
def test_scenario_on_host(host, scenario):
    if host.gap(scenario):
        pytest.skip(f"{host.name}: {host.gap(scenario)}")
    run = guest(host)
    assert run.release, f"the {host.name} guest did not run its scenarios:\n{run.output()}"
    # tlsprof as the .deb installed it: the static build of this tree
    assert "unknown-linux-musl" in run.version, f"{host.name}: tlsprof --version said {run.version!r}"
    outcome, message = run.outcomes.get(scenario, ("missing", "not run"))
    assert outcome == "passed", f"{scenario} on {host.name} ({run.release}): {outcome}\n{message}\n{run.output()}"


HOSTS_DOC = ROOT / "docs" / "hosts.md"
KERNEL_TABLE_SECTION = "## What serves each capability"


def hosts_kernel_table() -> dict[str, dict[str, str]]:
    """docs/hosts.md's kernel table: column -> capability -> hook."""
    text = HOSTS_DOC.read_text()
    section = text[text.index(KERNEL_TABLE_SECTION):].splitlines()
    start = next(i for i, r in enumerate(section) if r.startswith("|"))
    end = next((i for i in range(start, len(section)) if not section[i].startswith("|")), len(section))
    rows = section[start:end]  # the section's first table
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    table: dict[str, dict[str, str]] = {h: {} for h in header[1:]}
    for row in rows[2:]:
        cells = [c.strip().strip("`") for c in row.strip("|").split("|")]
        for h, cell in zip(header[1:], cells[1:]):
            table[h][cells[0]] = cell
    return table


@pytest.mark.parametrize("host", [h for h in MATRIX if h.column], ids=lambda h: h.name)
def test_hosts_doc_says_what_each_kernel_gives(host):
    """Every hook docs/hosts.md's kernel table names for a kernel is the one its guest reported."""
    run = guest(host)
    assert run.hooks, f"the {host.name} guest reported no hooks:\n{run.output()}"
    table = hosts_kernel_table()[host.column]
    seen = {**run.hooks["hooks"], "mode": run.hooks["mode"]}
    assert table == seen, f"docs/hosts.md says {table}, the {run.hooks['release']} guest {seen}"


def test_hosts_doc_says_what_this_machine_gives():
    """docs/hosts.md's column for this machine's kernel, against a run here."""
    from harness.agent import Agent
    with Agent("--comm", "no-such-process") as agent:
        m = agent.scrape()
    with Agent("--comm", "no-such-process", "--exact") as agent:
        exact = hook_info(agent.scrape())
    seen = hook_info(m)
    seen["read_side (--exact)"] = exact["read_side"]
    seen["mode"] = next(l["mode"] for n, l, v in m if n == "tlsprof_mode_info")
    release = os.uname().release
    column = next((c for c in hosts_kernel_table() if c.startswith(re.sub(r"^(\d+\.\d+).*", r"\1", release) + " ")),
                  None)
    if column is None:
        pytest.skip(f"docs/hosts.md has no column for this machine's kernel {release}")
    assert hosts_kernel_table()[column] == seen, (column, seen)
