"""A thread's entry in the kernel's table of threads inside handshake calls (hs_threads,
bpf/handshake.bpf.h) stays between its calls, so that a call costs no insert and no delete,
and goes when the thread exits. The kernel's own maps (bpftool) are the truth: after nginx's
handshakes, its workers' entries are there, none inside a call, the kernel's counts of entries
and of open calls agree with them; a reload's old workers take theirs with them. The counts
and CPU times stay exact throughout."""
import json
import subprocess
from pathlib import Path

from harness.agent import Agent
from harness.clients import curl_connections
from harness.metrics import value
from harness.procs import wait_for
from harness.servers import Nginx

N = 20
ROOT = Path(__file__).resolve().parent.parent


def agent_map(agent_pid: int, name: str) -> int:
    """The id of the agent's map `name` (its descriptors' fdinfo: another tlsprof on the host
    may hold a map of the same name)."""
    held = set()
    for fd in Path(f"/proc/{agent_pid}/fdinfo").iterdir():
        try:
            info = fd.read_text()
        except FileNotFoundError:
            continue  # a descriptor the agent closed meanwhile (a socket, a /proc file)
        for line in info.splitlines():
            if line.startswith("map_id:"):
                held.add(int(line.split()[1]))
    maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                                     check=True).stdout)
    ids = [m["id"] for m in maps if m.get("name") == name and m["id"] in held]
    assert len(ids) == 1, (name, ids)
    return ids[0]


def dump(map_id: int) -> list:
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def hs_threads(agent_pid: int) -> dict[int, dict]:
    """hs_threads as the kernel holds it: tid -> entry."""
    return {e["formatted"]["key"]: e["formatted"]["value"] for e in dump(agent_map(agent_pid, "hs_threads"))}


def bss_offsets() -> dict[str, tuple[int, int]]:
    """Each .bss global's offset and size, from the symbols of the object this build made
    (the kernel's copy of .bss has no BTF to name them)."""
    objs = sorted(ROOT.glob("target/release/build/tlsprof-*/out/tlsprof.bpf.o"), key=lambda p: p.stat().st_mtime)
    assert objs, "the build's BPF object"
    syms = subprocess.run(["readelf", "-sW", str(objs[-1])], capture_output=True, text=True, check=True).stdout
    out = {}
    for line in syms.splitlines():
        f = line.split()
        if len(f) == 8 and f[3] == "OBJECT" and f[7] in ("hs_active", "hs_entries"):
            out[f[7]] = (int(f[1], 16), int(f[2]))
    assert set(out) == {"hs_active", "hs_entries"}, out
    return out


def globals_(agent_pid: int) -> dict[str, int]:
    """hs_active and hs_entries as the kernel holds them, in the agent's .bss map."""
    raw = bytes(int(b, 16) for b in dump(agent_map(agent_pid, ".bss"))[0]["value"])
    return {name: int.from_bytes(raw[off:off + size], "little") for name, (off, size) in bss_offsets().items()}


def test_thread_entries_kept_between_calls_and_gone_at_exit(workdir):
    nginx = Nginx(workdir, workers=2)
    try:
        with Agent("--comm", "nginx", "--exact", "--sample-hz", "0") as agent:
            old = set(nginx.workers())
            agent.wait_attached([nginx.pid, *old])
            c = curl_connections(nginx.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshake_cpu_seconds_count", N, comm="nginx", role="server")

            entries = hs_threads(agent.proc.pid)
            # the workers that served the handshakes (each a single thread: tid = pid), and
            # nothing else: no other thread of the machine has an entry
            assert entries and set(entries) <= old, (entries.keys(), old)
            assert all(e["depth"] == 0 for e in entries.values()), entries
            g = globals_(agent.proc.pid)
            assert g["hs_active"] == 0, g
            assert g["hs_entries"] == len(entries), (g, entries.keys())

            nginx.reload()
            new = set(nginx.workers())
            wait_for(lambda: not set(hs_threads(agent.proc.pid)) & old, 10,
                     f"the old workers' entries gone with them ({hs_threads(agent.proc.pid).keys()}, {old})")
            agent.wait_attached([nginx.pid, *new])
            c = curl_connections(nginx.port, N, "X25519")
            assert c == {"connects": N, "failed": 0}, c
            agent.wait_value("tlsprof_handshake_cpu_seconds_count", 2 * N, comm="nginx", role="server")
            entries = hs_threads(agent.proc.pid)
            assert entries and set(entries) <= new, (entries.keys(), new)
            assert all(e["depth"] == 0 for e in entries.values()), entries
            g = globals_(agent.proc.pid)
            assert (g["hs_active"], g["hs_entries"]) == (0, len(entries)), (g, entries.keys())
            m = agent.scrape()
            assert value(m, "tlsprof_handshakes_total", comm="nginx", role="server", result="ok") == 2 * N
            assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx", role="server") == 2 * N
    finally:
        nginx.stop()
