/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Every kernel-side failure path has a counter in the `stats` array (common.bpf.h); the
 * agent exports them as tlsprof_kernel_errors_total{kind}; the array's last counters count
 * normal events, exported apart (below) (the indices reach the agent through its generated
 * agent/src/bpf/abi.rs; agent/src/bpf/stats.rs names the kinds). Every map the kernel
 * side inserts into has one for "full" (docs/metrics.md, "Bounds"); the maps only the agent
 * fills (traced, conn_ports, hs_detached) are counted by it, in tlsprof_table_full_total.
 */
#ifndef TLSPROF_STATS_H
#define TLSPROF_STATS_H

#define STAT_HS_EVENTS_LOST 0       /* hs_events full: a finished handshake was not reported */
#define STAT_HS_THREAD_MAP_FULL 1   /* a handshake call could not be tracked (too many threads) */
#define STAT_HS_SSL_MAP_FULL 2      /* a handshake could not be tracked (too many SSL objects) */
#define STAT_CONN_EVENTS_LOST 3     /* conn_events full: a closed connection was not reported */
#define STAT_CONN_STORAGE_FULL 4    /* a connection could not be tracked (no memory for its state) */
#define STAT_SAMPLES_LOST 5         /* cpu_samples full: a CPU sample was dropped */
#define STAT_WIRE_EVENTS_LOST 6     /* wire_events full: handshake bytes were dropped */
#define STAT_HS_HITS_FULL 7         /* hs_hits full: a process's probe hits were not counted */
#define STAT_HS_LAST_FULL 8         /* hs_last: a memory-BIO handshake call could not be linked */
#define STAT_PROC_EVENTS_FULL 9     /* proc_events full: a fork or exit was not reported */
#define STAT_REQ_RECV_CALLS_FULL 10 /* req_recv_calls: a read's arguments could not be kept */
#define STAT_GO_MAP_FULL 11         /* go_goroutines/go_socks: a Go handshake could not be followed */
#define STAT_HELLO_CALLS_FULL 12 /* hello_calls: a read's arguments could not be kept (kretprobe ClientHello capture) */
#define STAT_CONN_STATE_MISSED 13 /* a connection's state change reached neither program on the hook */
#define STAT_FAILURES 14          /* the failure counters are those below */

/*
 * Counts of normal events, after the failure counters in the same array and exported apart
 * from them: a return probe that fired without its entry, whose call began before the
 * probes were attached (at start, or each time the overhead budget attaches them again):
 * tlsprof_unmatched_returns_total.
 */
#define STAT_HS_UNMATCHED_RETURN 14
#define STAT_MAX 15

#endif
