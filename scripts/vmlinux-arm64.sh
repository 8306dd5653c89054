#!/usr/bin/env bash
# Regenerates bpf/vmlinux-arm64.h, the kernel types the arm64 build of the kernel side
# compiles against (bpf/vmlinux.h is x86-64's: struct pt_regs and the perf-event registers
# differ). The types come from the BTF of Debian's arm64 kernel (trixie's by default; a
# header older than Linux 6.4 lacks fields wire.bpf.h tests for, such as iov_iter.__iov),
# downloaded like scripts/kernels.sh does, without installing anything.
# Debian's arm64 vmlinuz is a raw Image, not an ELF file: its .BTF section is found by the
# BTF header's magic and sizes. Needs apt-get, dpkg, bpftool, python3; no root.
set -euo pipefail

SUITE=${TLSPROF_ARM64_SUITE:-trixie}
OUT=${1:-$(dirname "$0")/../bpf/vmlinux-arm64.h}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
echo "deb [arch=arm64] http://deb.debian.org/debian $SUITE main" > "$work/sources.list"
opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$work/lists" -o "Dir::State::Status=/dev/null"
      -o "Dir::Cache=$work/cache" -o APT::Architecture=arm64 -o APT::Architectures=arm64
      -o APT::Sandbox::User="$(id -un)")
apt-get "${opts[@]}" update -qq
pkg=$(apt-cache "${opts[@]}" depends linux-image-arm64 | awk '/Depends: linux-image-/ {print $2; exit}')
[ -n "$pkg" ] || { echo "vmlinux-arm64: no linux-image-arm64 in $SUITE" >&2; exit 1; }
(cd "$work" && apt-get "${opts[@]}" download -qq "$pkg")
dpkg -x "$work"/*.deb "$work/root"
img=$(ls "$work"/root/boot/vmlinuz-* | head -n 1)

# The largest well-formed BTF blob in the image: magic 0xeB9F, version 1, a 24-byte header
# whose string section follows the type section and ends inside the file.
python3 - "$img" "$work/vmlinux.btf" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
best, i = None, 0
while (i := data.find(b"\x9f\xeb\x01\x00", i)) >= 0:
    hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<5I", data, i + 4)
    size = hdr_len + str_off + str_len
    if hdr_len == 24 and type_off == 0 and str_off == type_len and i + size <= len(data):
        if not best or size > best[1]:
            best = (i, size)
    i += 1
if not best:
    sys.exit("vmlinux-arm64: no BTF in " + sys.argv[1])
open(sys.argv[2], "wb").write(data[best[0]:best[0] + best[1]])
EOF

{
  echo "/* Generated for arm64 from Debian's ${pkg#linux-image-} ($SUITE) by scripts/vmlinux-arm64.sh:"
  echo "   bpftool btf dump file <the .BTF of its vmlinuz> format c */"
  bpftool btf dump file "$work/vmlinux.btf" format c
} > "$OUT"
echo "vmlinux-arm64: $OUT from $pkg"
