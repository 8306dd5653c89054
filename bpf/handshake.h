/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Handshake probes (handshake.bpf.h): types shared with the agent
 * (the agent's Rust types are generated from it: agent/src/bpf/abi.rs).
 * Fixed-width types and explicit padding only.
 */
#ifndef TLSPROF_HANDSHAKE_H
#define TLSPROF_HANDSHAKE_H

/* Who drives the handshake. */
enum hs_role {
	HS_ROLE_UNKNOWN = 0,
	HS_ROLE_SERVER = 1,
	HS_ROLE_CLIENT = 2,
};

enum hs_result {
	HS_RESULT_OK = 0,
	HS_RESULT_FAILED = 1,
};

/* Value of hs_detached (key: tgid), written by the agent: when the process's handshake
 * probes were last all gone (bpf_ktime_get_ns), with this bit set while their removal is
 * under way (the return probes go first: a handshake may end unseen, and its object then be
 * freed under a probe still attached). */
#define HS_DETACHING 0x8000000000000000ULL

/* Value of hs_hits (key: tgid): uprobe hits of a traced process, for the overhead budget. */
struct hs_hits {
	__u64 entries; /* entry probes (uprobe) */
	__u64 returns; /* return probes (uretprobe) */
	__u64 prog_ns; /* the probe programs' own run time (bpf_ktime_get_ns), beyond the traps */
};

/* One finished handshake, sent to user space through the hs_events ring buffer. */
struct hs_event {
	__u64 duration_ns; /* first handshake call entered -> last handshake call returned */
	__u64 cpu_ns;      /* on-CPU time of the calling threads inside the handshake calls */
	__u32 tgid;        /* process (thread group) id, init pid namespace */
	__u32 calls;       /* handshake function calls that made up this handshake */
	__u8 role;         /* HS_ROLE_* */
	__u8 result;       /* HS_RESULT_* */
	__u8 estimate;     /* a part of the kernel-only estimate (estimate.bpf.h), not a probed call */
	__u8 pad[5];
	__u64 conn_id;    /* the connection it ran on (conn_life.id), 0 if unknown */
	__u64 conn_start; /* when that connection was accepted (conn_life.start_ns) */
	__u64 end_ns;     /* the last call returned (bpf_ktime_get_ns) */
};

/* Per-thread state while a thread is inside a handshake call (key: thread id). */
struct hs_thread {
	__u64 ssl;      /* SSL * of the outermost call */
	__u64 enter_ns; /* outermost call entered */
	__u64 oncpu_ns; /* last time the thread went on CPU, 0 while switched out */
	__u64 cpu_ns;   /* on-CPU time accumulated before the last switch-out */
	__u32 tgid;
	__u32 depth; /* nesting: SSL_accept -> SSL_do_handshake -> ossl_statem_accept */
	__u8 role;
	__u8 io;  /* the call read or wrote a watched connection's socket itself */
	__u8 est; /* not a library call: the kernel estimate's window (estimate.bpf.h) */
	__u8 go;  /* a Go goroutine's part of its handshake (gotls.bpf.h) */
	__u8 pad[4];
	__u64 conn_id; /* that connection (conn_life.id), and when it was accepted */
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
	__u8 done; /* the handshake finished; later calls (post-handshake) are not counted */
	__u8 pad[2];
	__u64 conn_id; /* the connection it runs on (conn_life.id), 0 until known */
	__u64 conn_start;
};

#endif
