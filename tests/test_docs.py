"""The documentation against the binary: docs/cli.md lists every option `tlsprof --help` and
each command's `--help` print, and no option the binary does not have. Fast: no server, no
privileges (the binary only prints its help)."""
import re

import pytest

from harness.agent import run_tlsprof
from harness.procs import ROOT

CLI_DOC = ROOT / "docs" / "cli.md"
# an option as clap prints it: "  -v, --verbose", "      --pid <PID>"
HELP_OPTION = re.compile(r"^\s{2,}(?:(-[A-Za-z]), )?(--[A-Za-z][\w.-]*)", re.M)
# an option as docs/cli.md lists it: the first cell of a table row, "| `-v, --verbose` |"
DOC_OPTION = re.compile(r"^\| `(?:(-[A-Za-z]), )?(--[A-Za-z][\w.-]*)[ `]", re.M)


def commands() -> list[str]:
    """The commands `tlsprof --help` lists (without clap's own `help`)."""
    r = run_tlsprof("--help")
    assert r.returncode == 0, r
    block = r.stdout.split("Commands:", 1)[1].split("Options:", 1)[0]
    names = [m.group(1) for m in re.finditer(r"^\s{2}([a-z][\w-]*)\s", block, re.M)]
    assert names, r.stdout
    return [n for n in names if n != "help"]


def help_options(*command: str) -> set[str]:
    r = run_tlsprof(*command, "--help")
    assert r.returncode == 0, r
    opts = {f"{s}, {l}" if s else l for s, l in HELP_OPTION.findall(r.stdout)}
    assert opts, r.stdout
    return opts


def doc_sections() -> dict[str, str]:
    """docs/cli.md's sections by their heading: "## `tlsprof run`" -> "run", "## `tlsprof`" -> ""."""
    text = CLI_DOC.read_text()
    parts = re.split(r"^## `tlsprof ?([a-z-]*)`\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1].split("\n## ", 1)[0] for i in range(1, len(parts), 2)}


def doc_options(section: str) -> set[str]:
    return {f"{s}, {l}" if s else l for s, l in DOC_OPTION.findall(section)}


def test_cli_doc_has_a_section_per_command():
    sections = doc_sections()
    assert set(sections) == {"", *commands()}, \
        f"docs/cli.md's command sections {sorted(sections)} against the binary's {commands()}"


@pytest.mark.parametrize("command", ["", "run", "top", "report", "flamegraph"])
def test_cli_doc_lists_exactly_the_options_of(command):
    args = [command] if command else []
    printed = help_options(*args)
    documented = doc_options(doc_sections().get(command, ""))
    name = f"tlsprof {command}".strip()
    assert not printed - documented, f"docs/cli.md, {name}: options the binary has but the page lacks: " \
                                     f"{sorted(printed - documented)}"
    assert not documented - printed, f"docs/cli.md, {name}: options the page lists but the binary lacks: " \
                                     f"{sorted(documented - printed)}"


def test_every_command_is_checked():
    """The parametrised list above covers every command the binary has."""
    assert set(commands()) == {"run", "top", "report", "flamegraph"}
