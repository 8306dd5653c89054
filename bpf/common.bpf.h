/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Kernel-only helpers every feature uses: the failure counters, lazy ring-buffer
 * submission, lookup-or-create, what this CPU is running, and how far a server has read
 * its client's byte stream. Included first by tlsprof.bpf.c.
 */
#ifndef TLSPROF_COMMON_BPF_H
#define TLSPROF_COMMON_BPF_H

#include "stats.h"

/* Failure counters (stats.h): every kernel-side failure path bumps one. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&stats, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

/*
 * Ring-buffer submit flags: wake the agent only once the buffer is a quarter full. It also
 * drains them every 50 ms (agent/src/agent/mod.rs DRAIN_EVERY), so at thousands of events
 * per second none is woken. `size` is the buffer's max_entries.
 */
#define RB_LAZY(rb, size) \
	(bpf_ringbuf_query((rb), BPF_RB_AVAIL_DATA) > (size) / 4 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP)

/* Errors of bpf_map_update_elem that say the map is full (vmlinux.h has no errno names). */
#define E2BIG 7   /* a hash at max_entries */
#define ENOMEM 12 /* no memory for the entry (LRU: no free node; no-prealloc: allocation failed) */

/* An insert failed because the map is full: not because the key exists (BPF_NOEXIST racing
 * another CPU) or any other reason. */
static __always_inline bool map_full(long err)
{
	return err == -E2BIG || err == -ENOMEM;
}

/* Inserts value at key (flags: BPF_ANY, BPF_NOEXIST), counting `stat` when the map is full.
 * True when the entry is in. */
static __always_inline bool map_insert(void *map, const void *key, const void *value, __u64 flags, __u32 stat)
{
	long err = bpf_map_update_elem(map, key, value, flags);
	if (map_full(err))
		stat_inc(stat);
	return err == 0;
}

/* The value at key, created from init first if there is none; NULL when the map is full
 * (counted in `stat`). */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *init, __u32 stat)
{
	void *v = bpf_map_lookup_elem(map, key);
	if (v)
		return v;
	/* -EEXIST: another CPU created it meanwhile, which is as good */
	long err = bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	if (map_full(err)) {
		stat_inc(stat);
		return NULL;
	}
	return bpf_map_lookup_elem(map, key);
}

/*
 * What this CPU is running, kept per CPU so that the hot paths learn it with one per-CPU
 * load instead of a hash lookup:
 * - in_hs: the thread running here while inside a handshake call, 0 if none (kept by the
 *   handshake probes and sched_switch);
 * - after_hs: a thread whose handshake call just returned without touching a socket itself
 *   (the library works on a memory BIO, as in node): the application's next socket
 *   write carries that call's output, a handshake flight, not a response;
 * - run_tgid/run_since: the traced process running here and its task's se.sum_exec_runtime
 *   when its CPU time was last summed (sched.bpf.h).
 */
struct cpu_now {
	__u32 in_hs;
	__u32 after_hs;
	__u32 run_tgid;
	__u32 pad;
	__u64 run_since;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_now);
} cpu_now SEC(".maps");

static __always_inline struct cpu_now *this_cpu(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&cpu_now, &zero);
}

/* The peer's FIN has arrived. */
static __always_inline bool fin_received(const struct sock *sk)
{
	unsigned long flags = BPF_CORE_READ(sk, __sk_common.skc_flags);
	return flags & (1UL << bpf_core_enum_value(enum sock_flags, SOCK_DONE));
}

/*
 * How far the server has read the client's byte stream (tcp copied_seq), not counting the
 * client's FIN: it takes a sequence number, which a reader that reached it consumed.
 */
static __always_inline __u32 data_read(const struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	__u32 copied = BPF_CORE_READ(tp, copied_seq);

	if (fin_received(sk) && copied == BPF_CORE_READ(tp, rcv_nxt))
		copied--;
	return copied;
}

/*
 * The same where the program's socket argument is typed (tp_btf, fentry): plain loads
 * instead of a bpf_probe_read_kernel call per field, on paths that run for every send of
 * the machine. kprobe programs (an untyped pointer) use data_read.
 */
static __always_inline __u32 data_read_typed(const struct sock *sk)
{
	const struct tcp_sock *tp = bpf_skc_to_tcp_sock((struct sock *)sk);
	if (!tp)
		return data_read(sk);
	__u32 copied = tp->copied_seq;
	unsigned long done = 1UL << bpf_core_enum_value(enum sock_flags, SOCK_DONE);
	if ((sk->__sk_common.skc_flags & done) && copied == tp->rcv_nxt)
		copied--;
	return copied;
}

/* The bytes of sk's stream received before the `ret` just read (0 at its first read);
 * `typed` as data_read_typed. */
static __always_inline __u64 received_before(const struct sock *sk, int ret, const bool typed)
{
	if (typed) {
		const struct tcp_sock *tp = bpf_skc_to_tcp_sock((struct sock *)sk);
		if (tp)
			return tp->bytes_received - (__u64)(__u32)(tp->rcv_nxt - tp->copied_seq) - (__u64)ret;
	}
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	return BPF_CORE_READ(tp, bytes_received) -
	        (__u64)(__u32)(BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq)) - (__u64)ret;
}

/* tcp bytes_sent of `sk`; `typed` as data_read_typed. */
static __always_inline __u64 bytes_sent_of(const struct sock *sk, const bool typed)
{
	if (typed) {
		const struct tcp_sock *tp = bpf_skc_to_tcp_sock((struct sock *)sk);
		if (tp)
			return tp->bytes_sent;
	}
	return BPF_CORE_READ((const struct tcp_sock *)sk, bytes_sent);
}

/* recvmsg's flags: a read that leaves the bytes in the socket */
#ifndef MSG_PEEK
#define MSG_PEEK 2
#endif

/* skb->protocol of the packet programs (hello_skb.bpf.h, quic.bpf.h) */
#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD

#endif
