// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The least a kernel-side request count can cost (bench/attributed.py --modes floor-empty,
 * floor-count): not tlsprof, two programs on the hook tlsprof counts requests at
 * (tcp_sendmsg_locked, as the typed tracepoint this kernel has), loaded one at a time by
 * floor.c. floor_empty returns at once: the kernel's cost of running a program there at
 * all. floor_count keeps one counter per socket (socket storage, made at the socket's first
 * send): the least any exact per-connection count of the server's sends does.
 * The floor_hook_* programs (--modes floor-hooks, loaded together) return at once on each
 * kernel hook tlsprof's default mode runs a program at on a new connection: what running
 * programs on that path costs at all, before any of them does anything. (Not in it: the
 * handshake uprobes, whose traps the overhead budget limits, the CPU sampler's perf event,
 * and a packet program on the server's cgroup, where the ClientHello capture reads packets
 * instead of reads.)
 */
#if defined(__TARGET_ARCH_arm64)
#include "vmlinux-arm64.h"
#else
#include "vmlinux.h"
#endif
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} floor_sends SEC(".maps");

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(floor_empty, struct sock *sk)
{
	return 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(floor_count, struct sock *sk)
{
	__u64 *n = bpf_sk_storage_get(&floor_sends, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (n)
		*n += 1;
	return 0;
}

/* The connection path's hooks, each returning at once. */
#define FLOOR_HOOK(name, hook)                                                                                         \
	SEC("tp_btf/" hook)                                                                                            \
	int floor_hook_##name(void *ctx)                                                                               \
	{                                                                                                              \
		return 0;                                                                                              \
	}

FLOOR_HOOK(send, "tcp_sendmsg_locked")
FLOOR_HOOK(recv, "sock_recv_length")
FLOOR_HOOK(state, "inet_sock_set_state")
FLOOR_HOOK(switch, "sched_switch")
FLOOR_HOOK(fork, "sched_process_fork")
FLOOR_HOOK(exec, "sched_process_exec")
FLOOR_HOOK(exit, "sched_process_exit")
FLOOR_HOOK(rcv_reset, "tcp_receive_reset")
FLOOR_HOOK(send_reset, "tcp_send_reset")
