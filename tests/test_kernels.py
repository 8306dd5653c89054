"""The kernel matrix: Debian's packaged kernels of Debian 11, 12 and 13 (5.10, 6.1, 6.12),
fetched from Debian's registry (scripts/kernels.sh) and booted in QEMU with virtme-ng over
this machine's root filesystem, each running tests/test_kernel_scenarios.py inside. Each
kernel × scenario is a test here, failing with the guest's own output; and the README's
kernel table must say what each guest reported of its hooks."""
import ast
import os
import re

import pytest

from harness.guest import HOSTS, MATRIX, SCENARIO_FILE, GuestRun, matrix_run, run_on_host
from harness.procs import ROOT
from harness.metrics import hook_info

KERNELS = MATRIX


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


def guest(suite: str) -> GuestRun:
    """The suite's guest, started with the session (conftest.py) and waited for here."""
    try:
        return matrix_run(suite)
    except (FileNotFoundError, AssertionError) as e:
        raise AssertionError(f"{suite}: {e}") from None


@pytest.mark.parametrize("kernel,suite,scenario",
                         [(k, s, sc) for k, s, _ in KERNELS for sc in scenarios()],
                         ids=[f"{k}-{sc.removeprefix('test_')}" for k, _, _ in KERNELS for sc in scenarios()])
def test_scenario_on_kernel(kernel, suite, scenario):
    run = guest(suite)
    assert run.release, f"the {kernel} guest did not run its scenarios:\n{run.output()}"
    outcome, message = run.outcomes.get(scenario, ("missing", "not run"))
    assert outcome == "passed", f"{scenario} on {run.release}: {outcome}\n{message}\n{run.output()}"


def readme_kernel_table() -> dict[str, dict[str, str]]:
    """README's kernel table: column -> capability -> hook."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Kernels"):].splitlines()
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


@pytest.mark.parametrize("kernel,suite,column", KERNELS, ids=[k for k, _, _ in KERNELS])
def test_readme_says_what_each_kernel_gives(kernel, suite, column):
    """Every hook the README's kernel table names for a kernel is the one its guest reported."""
    run = guest(suite)
    assert run.hooks, f"the {kernel} guest reported no hooks:\n{run.output()}"
    table = readme_kernel_table()[column]
    seen = {**run.hooks["hooks"], "mode": run.hooks["mode"]}
    assert table == seen, f"README says {table}, the {run.hooks['release']} guest {seen}"


def test_readme_says_what_this_machine_gives():
    """The README's column for this machine's kernel, against a run here."""
    from harness.agent import Agent
    with Agent("--comm", "no-such-process") as agent:
        m = agent.scrape()
    with Agent("--comm", "no-such-process", "--exact") as agent:
        exact = hook_info(agent.scrape())
    seen = hook_info(m)
    seen["read_side (--exact)"] = exact["read_side"]
    seen["mode"] = next(l["mode"] for n, l, v in m if n == "tlsprof_mode_info")
    release = os.uname().release
    column = next((c for c in readme_kernel_table() if c.startswith(re.sub(r"^(\d+\.\d+).*", r"\1", release) + " ")),
                  None)
    if column is None:
        pytest.skip(f"the README has no column for this machine's kernel {release}")
    assert readme_kernel_table()[column] == seen, (column, seen)


# Whole hosts (harness.guest.Host: each suite's kernel over its own Debian root, made by
# scripts/roots.sh), run only when TLSPROF_HOSTS names them ("all", or e.g.
# "bullseye-amd64 trixie-amd64"): not yet part of the default run.
_HOST_RUNS: dict[str, GuestRun] = {}
_WANTED = os.environ.get("TLSPROF_HOSTS", "")
_HOSTS = [h for h in HOSTS if _WANTED == "all" or h.name in _WANTED.split()]


def host_run(host) -> GuestRun:
    if host.name not in _HOST_RUNS:
        try:
            _HOST_RUNS[host.name] = run_on_host(host)
        except (FileNotFoundError, AssertionError) as e:
            raise AssertionError(f"{host.name}: {e}") from None
    return _HOST_RUNS[host.name]


@pytest.mark.skipif(not _HOSTS, reason="TLSPROF_HOSTS names no host (scripts/roots.sh makes them)")
@pytest.mark.parametrize("host,scenario", [(h, sc) for h in _HOSTS for sc in scenarios()],
                         ids=[f"{h.name}-{sc.removeprefix('test_')}" for h in _HOSTS for sc in scenarios()] or None)
def test_scenario_on_host(host, scenario):
    run = host_run(host)
    assert run.release, f"the {host.name} guest did not run its scenarios:\n{run.output()}"
    outcome, message = run.outcomes.get(scenario, ("missing", "not run"))
    assert outcome == "passed", f"{scenario} on {host.name} ({run.release}): {outcome}\n{message}\n{run.output()}"
