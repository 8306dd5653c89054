/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The traced processes (types: proc.h; user side: agent/src/bpf/proc.rs,
 * agent/src/agent/targets.rs): the one set every feature asks, filled by the agent; the
 * forks of traced processes and the exits of threads and processes.
 */
#ifndef TLSPROF_PROC_BPF_H
#define TLSPROF_PROC_BPF_H

#include "proc.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROC_TRACED_ENTRIES);
	__type(key, __u32);
	__type(value, struct proc_traced);
} traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} proc_events SEC(".maps");

/* A traced process's entry, NULL when it is not traced. */
static __always_inline struct proc_traced *proc_of(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced, &tgid);
}

static __always_inline void proc_notify(__u32 kind, __u32 pid, __u32 parent)
{
	struct proc_notice *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(STAT_PROC_EVENTS_FULL); /* the agent's periodic /proc scan catches up */
		return;
	}
	e->kind = kind;
	e->pid = pid;
	e->parent = parent;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);

	if (ptgid == ctgid)
		return 0; /* a new thread, not a new process */
	struct proc_traced *p = proc_of(ptgid);
	if (p && !p->exited)
		proc_notify(PROC_EV_FORK, ctgid, ptgid);
	return 0;
}

/* Every thread's exit: its handshake state goes; a traced process's exit is reported once
 * (its entry stays, marked, until the agent has read its last CPU time). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *task)
{
	__u32 pid = BPF_CORE_READ(task, pid);
	__u32 tgid = BPF_CORE_READ(task, tgid);

	hs_thread_exited(pid);
	if (pid != tgid)
		return 0; /* a thread, not the process */
	struct proc_traced *p = proc_of(tgid);
	if (p && !p->exited) {
		p->exited = 1;
		proc_notify(PROC_EV_EXIT, tgid, 0);
	}
	return 0;
}

#endif
