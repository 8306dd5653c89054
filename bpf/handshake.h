/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Types shared by handshake.bpf.c and the agent (agent/src/probes/handshake.rs
 * mirrors them; a test checks sizes and offsets against bpf/layout.c).
 * Fixed-width types and explicit padding only.
 */
#ifndef TLSPROF_HANDSHAKE_H
#define TLSPROF_HANDSHAKE_H

/* Who drives the handshake. */
#define HS_ROLE_UNKNOWN 0
#define HS_ROLE_SERVER 1
#define HS_ROLE_CLIENT 2

#define HS_RESULT_OK 0
#define HS_RESULT_FAILED 1

/* hs_port_stats.flags */
#define HS_PORT_LISTEN 1 /* a traced process listens here (set by the agent) */
#define HS_PORT_TLS 2    /* a handshake call read from a connection accepted here (set by the kernel) */

/* Indexes into the hs_stats array: every kernel-side failure path has one. */
#define HS_STAT_EVENTS_LOST 0     /* ring buffer full: a finished handshake was not reported */
#define HS_STAT_THREAD_MAP_FULL 1 /* a handshake call could not be tracked (too many threads) */
#define HS_STAT_SSL_MAP_FULL 2    /* a handshake could not be tracked (too many SSL objects) */
#define HS_STAT_UNMATCHED_RETURN 3 /* a return probe fired without its entry (attached mid-call) */
#define HS_STAT_CONN_EVENTS_LOST 4 /* conn_events full: a closed connection was not reported */
#define HS_STAT_CONN_STORAGE_FULL 5 /* a connection could not be tracked (no memory for its state) */
#define HS_STAT_SAMPLES_LOST 6 /* cpu_samples full: a CPU sample was dropped */
#define HS_STAT_WIRE_EVENTS_LOST 7 /* wire_events full: handshake bytes were dropped */
#define HS_STAT_MAX 8

/* Value of hs_ctl[0], set by the agent. */
struct hs_ctl {
	__u32 wire_counts; /* tcp_sendmsg_locked is attached: requests and the end of TLS 1.3
			    * handshakes are seen from the server's sends, not from its reads */
	__u32 pad;
};

/* Value of hs_hits (key: tgid): uprobe hits of a traced process, for the overhead budget. */
struct hs_hits {
	__u64 entries; /* entry probes (uprobe) */
	__u64 returns; /* return probes (uretprobe) */
};

/* One finished handshake, sent to user space through the hs_events ring buffer. */
struct hs_event {
	__u64 duration_ns; /* first handshake call entered -> last handshake call returned */
	__u64 cpu_ns;      /* on-CPU time of the calling threads inside the handshake calls */
	__u32 tgid;        /* process (thread group) id, init pid namespace */
	__u32 calls;       /* handshake function calls that made up this handshake */
	__u8 role;         /* HS_ROLE_* */
	__u8 result;       /* HS_RESULT_* */
	__u8 pad[6];
	__u64 conn_sk;     /* the connection it ran on (wire_event.sk, conn_start), 0 if unknown */
	__u64 conn_start;
};

/* A listening port of a traced process (key of hs_ports). */
struct hs_port {
	__u32 netns;
	__u16 port; /* host byte order */
	__u16 pad;
};

/* Value of hs_ports. */
struct hs_port_stats {
	__u32 flags;     /* HS_PORT_* */
	__u32 pad;
	__u64 accepted;  /* connections accepted here since the agent added the port */
};

/* Per-thread state while a thread is inside a handshake call (key: thread id). */
struct hs_thread {
	__u64 ssl;       /* SSL * of the outermost call */
	__u64 enter_ns;  /* outermost call entered */
	__u64 oncpu_ns;  /* last time the thread went on CPU, 0 while switched out */
	__u64 cpu_ns;    /* on-CPU time accumulated before the last switch-out */
	__u32 tgid;
	__u32 depth;     /* nesting: SSL_accept -> SSL_do_handshake -> ossl_statem_accept */
	__u8 role;
	__u8 io;         /* the call read or wrote a watched connection's socket itself */
	__u8 pad[6];
	__u64 conn_sk;   /* that connection (conn_state.start_ns identifies it with sk) */
	__u64 conn_start;
};

/* Key of the per-connection handshake state. */
struct hs_key {
	__u64 ssl;
	__u32 tgid;
	__u32 pad;
};

/* Per-connection handshake state, summed over all calls (key: hs_key). */
struct hs_state {
	__u64 first_ns; /* first handshake call entered, 0 before any call */
	__u64 last_ns;  /* last handshake call returned */
	__u64 cpu_ns;
	__u32 calls;
	__u8 role;
	__u8 done;      /* the handshake finished; later calls (post-handshake) are not counted */
	__u8 pad[2];
	__u64 conn_sk;  /* the connection it runs on, 0 until known */
	__u64 conn_start;
};

#endif
