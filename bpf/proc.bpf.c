// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fork and exit of traced processes only: proc_traced is filled by the agent. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "proc.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} proc_traced SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} proc_events SEC(".maps");

static __always_inline void send(__u32 kind, __u32 pid, __u32 parent)
{
	struct proc_notice *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e)
		return; /* the agent's periodic /proc scan catches up */
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
	if (bpf_map_lookup_elem(&proc_traced, &ptgid))
		send(PROC_EV_FORK, ctgid, ptgid);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *task)
{
	__u32 pid = BPF_CORE_READ(task, pid);
	__u32 tgid = BPF_CORE_READ(task, tgid);

	if (pid != tgid)
		return 0; /* a thread, not the process */
	if (bpf_map_lookup_elem(&proc_traced, &tgid)) {
		bpf_map_delete_elem(&proc_traced, &tgid);
		send(PROC_EV_EXIT, tgid, 0);
	}
	return 0;
}
