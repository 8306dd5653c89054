/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The traced processes (types: proc.h; user side: agent/src/bpf/proc.rs,
 * agent/src/agent/targets/): the one set every feature asks, filled by the agent and, for
 * processes started per connection, here (the children of traced processes at fork, the
 * programs `--comm` names at exec); the exits of threads and processes.
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

/* The names `--comm` selects (the agent fills it before it attaches). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROC_COMMS);
	__type(key, struct proc_comm);
	__type(value, __u8);
} proc_comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} proc_events SEC(".maps");

/* A traced process's entry, NULL when it is not traced. */
static __always_inline struct proc_traced *proc_of(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced, &tgid);
}

static __always_inline void proc_notify(__u32 kind, __u32 pid, __u32 parent, __u32 seq)
{
	struct proc_notice *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(STAT_PROC_EVENTS_FULL); /* the agent's periodic /proc scan catches up */
		return;
	}
	e->kind = kind;
	e->pid = pid;
	e->parent = parent;
	e->seq = seq;
	/* the current task: the parent at fork (the child has its name), the process at exec
	 * (its new name) and at exit */
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

/* A process started per connection is traced from now, before the agent examines it: its
 * CPU, its connections, its handshakes estimated in the kernel (it has no probes yet; the
 * agent attaches them and turns the estimate off, or forgets the process if it is not
 * selected after all). A full map leaves it to the agent, which counts it. */
static __always_inline void proc_trace_now(__u32 tgid)
{
	struct proc_traced v = { .estimate = 1 };
	bpf_map_update_elem(&traced, &tgid, &v, BPF_NOEXIST);
}

/* Set by the agent at load: no --pid or --comm, every process whose accepted connections
 * carry TLS is traced (proc_found). */
const volatile __u32 proc_find = 0;

/* No selector: processes are found by their connections' TLS. */
static __always_inline bool proc_finding(void)
{
	return proc_find != 0;
}

/* A socket started listening on `port` (conn.bpf.h), in the process that called listen(): a
 * traced one's ports are read again at once, so that its next connections are followed from
 * their accept. Whether the process is traced. */
static __always_inline bool proc_listened(__u16 port)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct proc_traced *p = proc_of(tgid);
	if (!p || p->exited)
		return false;
	proc_notify(PROC_EV_LISTEN, tgid, port, 0);
	return true;
}

/* A process not traced sent TLS on a connection it accepted on `port` (wire.bpf.h): without
 * a selector it is traced from here, the agent told. */
static __always_inline void proc_found(__u32 tgid, __u16 port)
{
	if (!proc_find || proc_of(tgid))
		return;
	proc_trace_now(tgid);
	proc_notify(PROC_EV_FOUND, tgid, port, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);

	if (ptgid == ctgid)
		return 0; /* a new thread, not a new process */
	struct proc_traced *p = proc_of(ptgid);
	if (p && !p->exited) {
		proc_trace_now(ctgid);
		proc_notify(PROC_EV_FORK, ctgid, ptgid, req_process_started());
	}
	return 0;
}

/* A process executed a program (its comm is the new program's name by now): a traced one
 * has lost its probes with its old memory (estimated until the agent attaches again); an
 * untraced one whose new name --comm selects is traced from here. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	struct proc_traced *p = proc_of(tgid);
	if (p) {
		if (p->exited)
			return 0;
		p->estimate = 1;
		p->exec_ns = bpf_ktime_get_ns();
	} else {
		struct proc_comm key = {};
		bpf_get_current_comm(key.name, sizeof(key.name));
		if (!bpf_map_lookup_elem(&proc_comms, &key))
			return 0;
		proc_trace_now(tgid);
		p = proc_of(tgid);
		if (p)
			p->exec_ns = bpf_ktime_get_ns();
	}
	proc_notify(PROC_EV_EXEC, tgid, 0, req_process_started());
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
		proc_notify(PROC_EV_EXIT, tgid, 0, 0);
	}
	return 0;
}

#endif
