// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * tlsprof's kernel side: the one object the agent loads. Each feature is a header of its
 * own that holds its maps and programs (the types it shares with the agent are in
 * bpf/<feature>.h). One feature calls another through bpf/iface.h's declarations; a feature
 * that reads another's maps comes after it. bpf/README.md maps each file to its user side.
 */
/* the kernel's types for the target: arm64's registers and pt_regs differ from x86-64's */
#if defined(__TARGET_ARCH_arm64)
#include "vmlinux-arm64.h"
#else
#include "vmlinux.h"
#endif
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "common.bpf.h"      /* failure counters, ring-buffer and map helpers, per-CPU state */
#include "core_fixes.bpf.h"  /* kernel-version shims: structures that changed across kernels */
#include "iface.h"           /* what one feature asks of another */
#include "handshake.bpf.h"   /* handshake probes: state, and what they do */
#include "hs_calls.bpf.h"    /* ... the probes on handshake calls: entries and returns */
#include "hs_objects.bpf.h"  /* ... and on connection objects: role, reset, free */
#include "proc.bpf.h"        /* the traced set; forks and exits */
#include "estimate.bpf.h"    /* handshake CPU from the kernel alone, where no probe times it */
#include "gotls.bpf.h"       /* Go crypto/tls: a handshake followed across its goroutine's threads */
#include "sched.bpf.h"       /* on-CPU time per traced process; the handshake clock */
#include "conn.bpf.h"        /* connection lifecycle, who closed, TIME_WAIT */
#include "conn_resets.bpf.h" /* ... and the resets each connection received or sent */
#include "requests.bpf.h"    /* requests per connection */
#include "wire.bpf.h"        /* the server's handshake output: what was negotiated */
#include "wire_walk.bpf.h"   /* ... a send walked record by record */
#include "wire_send.bpf.h"   /* ... and the send programs that capture it */
#include "hello.bpf.h"       /* the client's ClientHello: what it offered */
#include "hello_read.bpf.h"  /* ... read from the server's reads */
#include "quic.bpf.h"        /* QUIC handshakes: the Initial packets of traced UDP ports */
#include "hello_skb.bpf.h"   /* ... read from its packets, where the agent can attach there */
#include "sampler.bpf.h"     /* CPU samples of traced processes */
#include "calib.bpf.h"       /* no-op probes that measure what a probe hit costs */
