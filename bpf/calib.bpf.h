/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Calibration (user side: agent/src/bpf/calib.rs, agent/src/agent/duty.rs): the agent
 * measures what one probe hit costs on this host, attaching these to functions of its own
 * (uprobe and uretprobe) while it calls them. They do the kind of work a handshake probe
 * does on a call (handshake.bpf.h): the entry a counter, a lookup and an insert with the
 * time; the return a lookup, the time and a delete, so that a hit's measured cost is the
 * trap and a program, not the trap alone (once the trap is cheap, on an instruction the
 * kernel emulates, the program is half of it).
 */
#ifndef TLSPROF_CALIB_BPF_H
#define TLSPROF_CALIB_BPF_H

struct calib_call {
	__u64 t;
	__u64 n;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct calib_call);
} calib_calls SEC(".maps");

SEC("uprobe")
int calib_entry(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct calib_call *c = bpf_map_lookup_elem(&calib_calls, &tid);
	struct calib_call nc = { .t = bpf_ktime_get_ns(), .n = 1 };

	if (c)
		nc.n += c->n;
	bpf_map_update_elem(&calib_calls, &tid, &nc, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int calib_return(struct pt_regs *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct calib_call *c = bpf_map_lookup_elem(&calib_calls, &tid);

	if (c)
		c->t = bpf_ktime_get_ns() - c->t;
	bpf_map_delete_elem(&calib_calls, &tid);
	return 0;
}

#endif
