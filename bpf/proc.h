/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The traced processes and their lifecycle (proc.bpf.h), shared with the agent
 * (agent/src/bpf/proc.rs). The agent fills the `traced` set; every feature asks it
 * whether a process is traced. A fork of a traced process (nginx's master starting new
 * workers on reload) is reported at once, so the agent attaches to the child without
 * waiting for its next /proc scan; an exit lets it forget the process.
 */
#ifndef TLSPROF_PROC_H
#define TLSPROF_PROC_H

/* Room in `traced` and in the other per-process maps (hs_hits, hs_detached). The agent
 * traces at most half as many processes (agent/src/agent/targets.rs): the rest is for the
 * entries of processes that exited and are not swept yet. */
#define PROC_TRACED_ENTRIES 8192

#define PROC_EV_FORK 1
#define PROC_EV_EXIT 2

/* Value of traced (key: tgid). */
struct proc_traced {
	__u64 oncpu_ns; /* exact on-CPU time (sched.bpf.h), summed at every switch-out and at
			 * each sample while it runs; 0 when CPU attribution is off */
	__u32 exited;   /* the process exited (the agent removes the entry after its last read) */
	__u32 estimate; /* no handshake probes: its handshakes' CPU is estimated from the kernel
			 * alone (estimate.bpf.h) */
};

struct proc_notice {
	__u32 kind;   /* PROC_EV_* */
	__u32 pid;    /* the new child (fork) or the exiting process (exit) */
	__u32 parent; /* the traced parent (fork), 0 otherwise */
	__u32 pad;
};

#endif
