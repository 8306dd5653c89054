"""The kernel side's boundaries (bpf/README.md, bpf/iface.h): a feature's header uses another
feature's functions only through their declarations in bpf/iface.h, and none of its maps,
globals or macros; what every feature shares is in common.bpf.h and core_fixes.bpf.h, and
the types that cross to the agent in the shared headers (*.h). Read from the sources, as
the compiler sees them less their comments."""
import re
from pathlib import Path

BPF = Path(__file__).resolve().parent.parent / "bpf"
SHARED = {"common.bpf.h", "core_fixes.bpf.h"}
# A feature in several files: its files are one feature (bpf/iface.h says which).
FEATURE = {"hs_calls.bpf.h": "handshake.bpf.h", "hs_objects.bpf.h": "handshake.bpf.h",
           "conn_resets.bpf.h": "conn.bpf.h",
           "gotls.bpf.h": "handshake.bpf.h", "hello_skb.bpf.h": "hello.bpf.h",
           "hello_read.bpf.h": "hello.bpf.h", "wire_walk.bpf.h": "wire.bpf.h", "wire_send.bpf.h": "wire.bpf.h"}


def code(path: Path) -> str:
    text = re.sub(r"/\*.*?\*/", " ", path.read_text(), flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def defined(text: str) -> set[str]:
    """What a header defines at its top level: functions, programs, maps, globals, macros."""
    return (set(re.findall(r"^static\s+(?:__always_inline\s+|inline\s+)*[\w\s*]*?\b(\w+)\s*\([^;{]*\)\s*\{",
                           text, re.M | re.S))
            | set(re.findall(r"^int\s+BPF_\w+\((\w+)", text, re.M))
            | set(re.findall(r"^\}\s*(\w+)\s+SEC\(\"\.maps\"\)", text, re.M))
            | set(re.findall(r"^(?:const\s+volatile\s+|volatile\s+)?(?:struct\s+\w+|unsigned\s+\w+|__[us]\d+|int|bool"
                             r"|long)\s+(\w+)\s*(?:=[^;]*)?;", text, re.M))
            | set(re.findall(r"^#define\s+(\w+)", text, re.M)))


def features() -> dict[str, str]:
    """Each feature's code, its files joined."""
    out: dict[str, str] = {}
    for p in sorted(BPF.glob("*.bpf.h")):
        if p.name not in SHARED:
            name = FEATURE.get(p.name, p.name)
            out[name] = out.get(name, "") + code(p)
    return out


def test_features_meet_only_through_iface():
    iface = set(re.findall(r"\b(\w+)\s*\(", code(BPF / "iface.h")))
    feats = features()
    defs = {name: defined(text) for name, text in feats.items()}
    # the parse finds what it must, or the check would pass on nothing
    assert {"hs_threads", "hs_active", "hs_open"} <= defs["handshake.bpf.h"], defs["handshake.bpf.h"]
    assert {"conn_ports", "conn_new_id", "conn_accepted"} <= defs["conn.bpf.h"]
    assert {"wire_events", "WIRE_RINGBUF_BYTES"} <= defs["wire.bpf.h"]
    assert "proc_find" in defs["proc.bpf.h"]
    crossings = []
    for name, text in feats.items():
        used = set(re.findall(r"\b\w+\b", text))
        for other, d in defs.items():
            if other != name and (bad := sorted((used & d) - iface)):
                crossings.append(f"{name} uses {other}'s {', '.join(bad)}")
    assert crossings == [], "declare what one feature asks of another in bpf/iface.h:\n" + "\n".join(crossings)


def test_every_iface_declaration_has_its_definition():
    """Each declaration in iface.h is defined by exactly one feature."""
    declared = re.findall(r"^static\s+__always_inline\s+[\w\s*]*?\b(\w+)\s*\([^;{]*\);", code(BPF / "iface.h"),
                          re.M | re.S)
    assert len(declared) > 30, declared
    defs = {name: defined(text) for name, text in features().items()}
    owners = {n: [f for f, d in defs.items() if n in d] for n in declared}
    assert {n: o for n, o in owners.items() if len(o) != 1} == {}
