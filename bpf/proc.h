/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Process lifecycle of traced processes, shared by proc.bpf.c and the agent
 * (agent/src/probes/proc.rs). A fork of a traced process (nginx's master starting
 * new workers on reload) is reported at once, so the agent attaches to the child
 * without waiting for its next /proc scan; an exit lets it forget the process.
 */
#ifndef TLSPROF_PROC_H
#define TLSPROF_PROC_H

#define PROC_EV_FORK 1
#define PROC_EV_EXIT 2

struct proc_notice {
	__u32 kind;   /* PROC_EV_* */
	__u32 pid;    /* the new child (fork) or the exiting process (exit) */
	__u32 parent; /* the traced parent (fork), 0 otherwise */
	__u32 pad;
};

#endif
