/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ClientHello capture from the server's reads (hello.bpf.h is the capture itself): the
 * read's user buffer found from its hook (the sock_recv_length tracepoint, fexit or a
 * kretprobe on sock_recvmsg) and its bytes given to the capture.
 */
#ifndef TLSPROF_HELLO_READ_BPF_H
#define TLSPROF_HELLO_READ_BPF_H

/*
 * A read of `ret` bytes of a connection whose ClientHello is being captured (hello_wanted);
 * buf: the user address the read's bytes went to, 0 if the hook cannot tell.
 */
static __always_inline void hello_read(struct sock *sk, struct conn_state *c, int ret, int flags, __u64 buf)
{
	__u32 pos = (flags & MSG_PEEK) ? BPF_CORE_READ((struct tcp_sock *)sk, copied_seq) : data_read(sk) - (__u32)ret;
	hello_bytes(c, NULL, false, pos, (__u32)ret, buf);
}

/* recvmsg's user msghdr, as far as it is read. */
struct hello_iovec {
	__u64 base;
	__u64 len;
};

/* The first segment of a user iovec array: its address, if the read's `ret` bytes all fit
 * in it; else 0. */
static __always_inline __u64 hello_first_iov(__u64 iov, int ret)
{
	struct hello_iovec v;
	if (!iov || bpf_probe_read_user(&v, sizeof(v), (void *)iov))
		return 0;
	return v.len >= (__u64)ret ? v.base : 0;
}

/* tp_btf: the read's user buffer, from the syscall that made it (its saved registers). */
static __always_inline __u64 hello_syscall_buf(int ret)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & (PF_KTHREAD | PF_IO_WORKER))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	long nr = HELLO_SYSCALL_NR(regs);
	__u64 arg2 = PT_REGS_PARM2_CORE_SYSCALL(regs);
	__u64 arg3 = PT_REGS_PARM3_CORE_SYSCALL(regs);
	switch (nr) {
	case HELLO_NR_READ:
	case HELLO_NR_RECVFROM:
		return arg3 >= (__u64)ret ? arg2 : 0;
	case HELLO_NR_READV:
		return arg3 >= 1 ? hello_first_iov(arg2, ret) : 0;
	case HELLO_NR_RECVMSG: {
		struct user_msghdr m;
		if (bpf_probe_read_user(&m, sizeof(m), (void *)arg2) || m.msg_iovlen < 1)
			return 0;
		return hello_first_iov((__u64)m.msg_iov, ret);
	}
	}
	return 0; /* io_uring, recvmmsg, splice, ...: not followed */
}

/* fexit: the read's bytes end where the msghdr's iterator now stands. */
static __always_inline __u64 hello_iter_buf(const struct msghdr *msg, int ret)
{
	struct msg_bufs b;
	msg_bufs_of(msg, &b);
	__u64 offset = b.offset;
	if (iter_is_ubuf(b.type))
		return offset >= (__u64)ret ? b.ubuf + offset - ret : 0;
	if (!iter_is_iovec(b.type))
		return 0;
	const struct iovec *iov = b.iov;
	struct iovec v;
	if (offset >= (__u64)ret) {
		/* within the segment the iterator stands in */
		if (bpf_probe_read_kernel(&v, sizeof(v), iov))
			return 0;
		return (__u64)v.iov_base + offset - ret;
	}
	if (offset)
		return 0; /* the bytes span segments */
	/* the read filled its segment, and the iterator moved one past it */
	if (bpf_probe_read_kernel(&v, sizeof(v), iov - 1))
		return 0;
	return v.iov_len == (__u64)ret ? (__u64)v.iov_base : 0;
}

/* The gate of hello_wanted through BPF_CORE_READ, for an untyped socket (kprobes), before
 * the read: the state of a connection whose ClientHello may be read now, else NULL. */
static __always_inline struct conn_state *hello_wanted_before(const struct sock *sk)
{
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP || BPF_CORE_READ(sk, sk_type) != SOCK_STREAM)
		return NULL;
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	__u32 unread = BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq);
	__s64 consumed = (__s64)BPF_CORE_READ(tp, bytes_received) - (__s64)unread;
	if (consumed >= HELLO_GATE)
		return NULL;
	struct conn_state *c = conn_of(sk);
	return c && hello_following(c) ? c : NULL;
}

/*
 * The capture's hooks, each a program of its own (the read side's req_recv is another
 * feature's): the sock_recv_length tracepoint (6.3+), else the return of sock_recvmsg
 * (fexit). Attached in every mode.
 */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(hello_recv, struct sock *sk, int ret, int flags)
{
	struct conn_state *c = hello_wanted(sk, ret, flags);
	if (c)
		hello_read(sk, c, ret, flags, hello_syscall_buf(ret));
	return 0;
}

SEC("fexit/sock_recvmsg")
int BPF_PROG(hello_recv_fexit, struct socket *sock, struct msghdr *msg, int flags, int ret)
{
	struct sock *sk = sock->sk;
	if (!sk)
		return 0;
	struct conn_state *c = hello_wanted(sk, ret, flags);
	if (c)
		hello_read(sk, c, ret, flags, hello_iter_buf(msg, ret));
	return 0;
}

/* Where neither serves (arm64 before fexit): a kretprobe, the read's arguments kept from
 * its entry, only for the reads the gate lets through (LRU: a return missed is evicted). */
struct hello_call {
	__u64 sock;
	__u64 msg;
	__s32 flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct hello_call);
} hello_calls SEC(".maps");

SEC("kprobe/sock_recvmsg")
int BPF_KPROBE(hello_recv_entry, struct socket *sock, struct msghdr *msg, int flags)
{
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk || !hello_wanted_before(sk))
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hello_call call = { .sock = (__u64)sock, .msg = (__u64)msg, .flags = flags };
	map_insert(&hello_calls, &tid, &call, BPF_ANY, STAT_HELLO_CALLS_FULL);
	return 0;
}

SEC("kretprobe/sock_recvmsg")
int BPF_KRETPROBE(hello_recv_return, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hello_call *call = bpf_map_lookup_elem(&hello_calls, &tid);
	if (!call)
		return 0;
	/* read outside BPF_CORE_READ: local types (bpf/README.md) */
	struct socket *sock = (struct socket *)call->sock;
	const struct msghdr *msg = (const struct msghdr *)call->msg;
	int flags = call->flags;
	bpf_map_delete_elem(&hello_calls, &tid);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk || ret <= 0)
		return 0;
	struct conn_state *c = conn_of(sk);
	if (c && hello_following(c))
		hello_read(sk, c, ret, flags, hello_iter_buf(msg, ret));
	return 0;
}

#endif
