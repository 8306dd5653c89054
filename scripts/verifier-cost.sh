#!/bin/sh
# What this kernel's verifier spends on each of tlsprof's BPF programs named, loaded alone from
# the object the last `make build` made: "processed N insns" (the verifier stops at a
# million). A change that adds paths before the send capture's walk shows here before the
# host matrix's guests time out on it (docs/testing.md). Root; libbpf-dev.
#   scripts/verifier-cost.sh [PROGRAM ...] [-- NAME=VALUE ...]
# Default: the send programs; conn_hash=1 (the hash-map connection state the kprobe ones need).
set -e
cd "$(dirname "$0")/.."
obj=$(ls -t target/release/build/tlsprof-*/out/tlsprof.bpf.o 2>/dev/null | head -n 1)
[ -n "$obj" ] || { echo "verifier-cost: no BPF object: run make build first" >&2; exit 2; }
bin=${TMPDIR:-/tmp}/tlsprof-verifier-cost
cc -O2 -Wall -o "$bin" scripts/verifier-cost.c -lbpf
progs=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do progs="$progs $1"; shift; done
[ "$1" = "--" ] && shift
[ $# -gt 0 ] || set -- conn_hash=1
[ -n "$progs" ] || progs="wire_send wire_send_bounded wire_send_kprobe wire_send_kprobe_bounded"
rc=0
for p in $progs; do
	"$bin" "$obj" "$p" "$@" || rc=1
done
exit $rc
