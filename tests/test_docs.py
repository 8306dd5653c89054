"""The documentation against the binary and the bench outputs: docs/cli.md lists every option
`tlsprof --help` and each command's `--help` print, and no option the binary does not have;
every bench output the docs cite is committed, and holds the figures the docs take from it.
Fast: no server, no privileges (the binary only prints its help)."""
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


@pytest.mark.parametrize("command", ["", "run", "top", "report", "compare", "flamegraph"])
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
    assert set(commands()) == {"run", "top", "report", "compare", "flamegraph"}


DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The figures the front page and the manual state, each with the committed bench output it
# comes from: rerunning a bench and committing its output fails this test until the docs
# say the new figure.
FIGURES = [
    ("369 382 411", "results-bpf-runs.txt"),  # req_recv ns per request, a name judged all along (issue 64, f920dea)
    ("1.72% (1.65-1.72)", "results-attributed.txt"),  # new connections, default, issue 63's change (A/B with f3aaacf)
    ("1.67% (1.66-1.72)", "results-attributed.txt"),  # new connections, default, f3aaacf, the same A/B
    ("0.73% (0.69-0.79)", "results-attributed.txt"),  # keep-alive 4 KiB, default, issue 63's change
    ("0.69% (0.55-0.77)", "results-attributed.txt"),  # keep-alive 4 KiB, default, f3aaacf, the same A/B
    ("11647 12415 12373 12172", "results-bpf-runs.txt"),  # BPF ns per new connection, issue 63's change, 4 runs
    ("0.73% (0.68-0.81)", "results-attributed.txt"),  # keep-alive 4 KiB, default, 2a9ce18, beside the floor arms (twenty-second session)
    ("0.26% (0.25-0.31)", "results-attributed.txt"),  # keep-alive 4 KiB, floor-empty (an empty program on the send hook)
    ("0.46% (0.43-0.47)", "results-attributed.txt"),  # keep-alive 4 KiB, floor-count (a counter per socket)
    ("1.43% (1.38-1.47)", "results-attributed.txt"),  # new connections, default, 2a9ce18, the same session
    ("0.09% (0.09-0.11)", "results-attributed.txt"),  # new connections, floor-empty
    ("0.55% (0.52-0.56)", "results-attributed.txt"),  # new connections, floor-count
    ("3.58% (3.19-3.59)", "results-attributed.txt"),  # --exact, fc46897 (the hit's clock read reused), twenty-first session
    ("clk 1,665, 718 / 1,603, 747 / 1,572, 779", "results-bpf-runs.txt"),  # hs_exit, hs_enter_server ns per connection, fc46897, three runs
    ("17055", "results-bpf-runs.txt"),  # BPF ns per new connection, --exact, hs_threads entries kept (3d42d02, twenty-first session)
    ("3.55% (3.41-3.67)", "results-attributed.txt"),  # --exact, new connections, 3d42d02 (A/B)
    ("3.76% (3.59-3.81)", "results-attributed.txt"),  # --exact, new connections, 94df19e (534d787's kernel side), the same A/B
    ("1.43% (1.38-1.50)", "results-attributed.txt"),  # default mode, new connections, 3d42d02, the same session
    ("0.71% (0.68-0.76)", "results-attributed.txt"),  # default mode, keep-alive 4 KiB, the same session
    ("19186", "results-bpf-runs.txt"),  # BPF ns per new connection, --exact, its read side switched off (nineteenth session)
    ("1.46% (1.46-1.52)", "results-attributed.txt"),  # default mode, new connections (nineteenth session)
    ("3.78% (3.65-3.92)", "results-attributed.txt"),  # --exact, new connections, the same session
    ("0.67% (0.56-0.86)", "results-attributed.txt"),  # default mode, keep-alive 4 KiB, the same session
    ("17116", "results-bpf-runs.txt"),  # BPF ns per new connection, --exact, hs_threads entries kept (d283981, reverted)
    ("3.53% (3.39-3.55)", "results-attributed.txt"),  # --exact A/B, the entries kept (reverted)
    ("3.80% (3.80-3.83)", "results-attributed.txt"),  # --exact A/B, 534d787 (twentieth session)
    ("1.41% (1.40-1.43)", "results-attributed.txt"),  # default mode, new connections (twentieth session)
    ("3.58% (3.44-3.62)", "results-attributed.txt"),  # --exact, new connections, d283981 (reverted)
    ("0.70% (0.62-0.70)", "results-attributed.txt"),  # default mode, keep-alive 4 KiB, the same session
    ("1.54%", "results-attributed.txt"),  # default mode, new connections, 50 ms drains, the capture running (eighteenth session)
    ("1.57%", "results-attributed.txt"),  # the same session, the agent of 47993d7
    ("0.64%", "results-attributed.txt"),  # default mode, keep-alive 4 KiB, the same session
    ("0.67%", "results-attributed.txt"),  # the same session, the agent of 47993d7
    ("0.96% of a core", "results-overhead.txt"),  # the agent at 2,000 handshakes/s, 50 ms drains
    ("11960", "results-bpf-runs.txt"),  # BPF ns per new connection, 50 ms drains
    ("1.41%", "results-attributed.txt"),  # default mode, new connections, the window (seventeenth session)
    ("1.62%", "results-attributed.txt"),  # the same session, the agent of 8739d94
    ("0.65%", "results-attributed.txt"),  # default mode, keep-alive 4 KiB, the same session
    ("0.83%", "results-attributed.txt"),  # the same session, the agent of 8739d94
    ("1.30%", "results-attributed.txt"),  # default mode, new connections (issue 47's session)
    ("1.33%", "results-attributed.txt"),  # the same session, the agent of f7e6968
    ("2.79%", "results-attributed.txt"),  # --exact, new connections (issue 47's session)
    ("0.57%", "results-attributed.txt"),  # default mode, keep-alive 4 KiB (issue 47's session)
    ("0.88%", "results-attributed.txt"),  # the same session, the agent of f7e6968
    ("2.11%", "results-attributed.txt"),  # default mode (with the ClientHello capture), new connections
    ("2.17%", "results-attributed.txt"),  # the same session, --no-client-hellos
    ("3.26%", "results-attributed.txt"),  # default mode, the capture from the server's reads
    ("1.85%", "results-attributed.txt"),  # the same before the capture
    ("4.32%", "results-attributed.txt"),  # --exact, new connections
    ("0.67%", "results-attributed.txt"),  # default mode (with the ClientHello capture), keep-alive
    ("0.61%", "results-attributed.txt"),  # the same session, --no-client-hellos
    ("2.82%", "results-attributed.txt"),  # nginx and ab in one cgroup, new connections
    ("1.12%", "results-attributed.txt"),  # default mode, the capture from the server's reads
    ("0.45%", "results-attributed.txt"),  # the same before the capture
    ("1.15%", "results-attributed.txt"),  # --exact, keep-alive
    ("33.4 s", "results-detach.txt"),  # exit with a uprobe per process and probe, 64 workers
    ("exited in 0.5 s", "results-detach.txt"),  # the same with shared uprobes
    ("1.86% of a core", "results-scale.txt"),  # the agent at 2,000 handshakes/s, 103 processes
    ("46.4 MiB", "results-scale.txt"),
    ("44.0 MiB", "results-soak.txt"),
    ("38.2 MiB", "results-soak.txt"),  # the same, nineteenth session (50 ms drains)  # the agent's peak RSS in the 10-minute soak
    ("median |error| 0.7%, largest 1.8%", "results-sampled-error.txt"),
    ("0.940", "results-accuracy.txt"),  # kernel estimate / probes, lowest
    ("1.046", "results-accuracy.txt"),  # and highest
]


def test_every_bench_output_the_docs_cite_is_committed():
    for doc in DOCS:
        for name in set(re.findall(r"results-[\w-]+\.txt", doc.read_text())):
            assert (ROOT / "bench" / name).exists(), f"{doc.relative_to(ROOT)} cites bench/{name}, which is not there"


def test_the_docs_figures_are_in_their_bench_outputs():
    for figure, results in FIGURES:
        assert figure in (ROOT / "bench" / results).read_text(), f"bench/{results} no longer says {figure!r}"


def test_the_front_page_and_the_manual_state_the_same_overhead():
    """The overhead per mode is stated on the front page and in how-it-works.md, with the
    figures of bench/results-attributed.txt (FIGURES)."""
    for doc in ("README.md", "docs/how-it-works.md"):
        text = (ROOT / doc).read_text()
        for figure in ("1.43%", "0.71%", "3.55%"):
            assert figure in text, f"{doc} does not state {figure}"
