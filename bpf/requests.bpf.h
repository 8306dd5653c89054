/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Requests per connection (types: conn.h; user side: agent/src/conns/churn.rs): an
 * application data exchange is data from the client followed by data from the server.
 *
 * Where tcp_sendmsg_locked is attached (wire.bpf.h, req_ctl.wire_counts), requests are
 * counted at the server's sends, without any receive hook: a send after the server has
 * read new bytes of the client's stream (tcp copied_seq, past the handshake's) is one
 * exchange. Elsewhere, from sock_recv_length/sock_send_length: reads and writes made
 * inside a handshake call, or the first write after a handshake call that did no socket
 * I/O itself (memory BIO), are the handshake's, not requests. Per socket read/write: one
 * socket-storage lookup, which finds nothing on sockets that are not watched; while
 * nothing needs the reads the agent detaches the read side (agent/src/bpf/readside.rs), and
 * req_ctl.reads, cleared first, stops a read that still comes before it.
 */
#ifndef TLSPROF_REQUESTS_BPF_H
#define TLSPROF_REQUESTS_BPF_H

#include "wire.h"

#ifndef MSG_PEEK
#define MSG_PEEK 2
#endif

/* Switches the agent sets at run time (req_ctl, conn.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct req_ctl);
} req_ctl SEC(".maps");

/* The end of the capture of a connection's handshake output (wire.bpf.h). */
static __always_inline void wire_finish(const struct sock *sk, struct conn_state *c, __u8 why);

/* One more application data exchange on c: the connection's count, and its port's live
 * one (a per-CPU array slot: no hash lookup, no shared cache line). */
static __always_inline void req_exchange(struct conn_state *c)
{
	c->requests++;
	if (!c->slot)
		return;
	__u32 idx = c->slot - 1;
	__u64 *n = bpf_map_lookup_elem(&conn_exchanges, &idx);
	if (n)
		*n += 1; /* this CPU's own: sends run in process context, one at a time per CPU */
}

static __always_inline bool req_wire_counts(void)
{
	__u32 zero = 0;
	struct req_ctl *ctl = bpf_map_lookup_elem(&req_ctl, &zero);
	return ctl && ctl->wire_counts;
}

/* Whether anything needs the read side now (req_ctl.reads): checked first on every read of
 * the machine, before the socket's storage. */
static __always_inline bool req_reads(void)
{
	__u32 zero = 0;
	struct req_ctl *ctl = bpf_map_lookup_elem(&req_ctl, &zero);
	return ctl && ctl->reads;
}

static __always_inline bool req_read_links(void)
{
	__u32 zero = 0;
	struct req_ctl *ctl = bpf_map_lookup_elem(&req_ctl, &zero);
	return ctl && ctl->read_links;
}

/*
 * A server send: one more request if the server has read new bytes of the client's stream
 * since the last one counted. rx_tail holds back the client's handshake bytes that come
 * after the capture ended (its Finished), so that a send answering only them (TLS 1.3
 * session tickets) is not a request.
 */
static __always_inline void count_request(struct conn_state *c, __u32 copied)
{
	__s32 adv = (__s32)(copied - c->rx_mark);
	if (adv <= 0)
		return;
	if (c->rx_tail) {
		if ((__u32)adv <= c->rx_tail)
			return;
		c->rx_tail = 0;
	}
	req_exchange(c);
	c->rx_mark = copied;
}

/* The capture ended during this send: what the client sent so far was its handshake. */
static __always_inline void handshake_over(struct conn_state *c, __u32 copied)
{
	if (!(c->wire_flags & WIRE_F_TLS)) {
		count_request(c, copied); /* not TLS: the server answers a request */
		return;
	}
	c->rx_mark = copied;
	/* TLS 1.2 resumption: the server's Finished went before the client's, which is still
	 * to come (change_cipher_spec, and a Finished record as long as the server's) */
	c->rx_tail = c->wire_why == WIRE_END_FINISHED && copied == c->rx_first ? 6 + 5 + c->fin_len : 0;
}

/*
 * The connection's state when this read or write of sk is the application's, NULL when
 * the I/O belongs to the handshake: made inside a handshake call, or the first write after
 * a memory-BIO server handshake call (cpu_now.after_hs).
 */
static __always_inline struct conn_state *app_io(struct conn_state *c, struct sock *sk, bool write)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cpu_now *cpu = this_cpu();
	if (!cpu)
		return NULL;
	if (cpu->in_hs == tid) {
		conn_handshake_io(c, sk, tid);
		return NULL;
	}
	if (cpu->after_hs == tid) {
		cpu->after_hs = 0;
		if (write)
			return NULL;
	}
	return c;
}

/* A read of a watched connection returned: `ret` bytes, with recvmsg's `flags`. */
static __always_inline int req_received(struct sock *sk, int ret, int flags)
{
	if (!req_reads())
		return 0;
	struct conn_state *c = conn_of(sk);
	if (!c)
		return 0;
	go_on_read(sk, c, ret); /* a Go handshake's goroutine parks or resumes (gotls.bpf.h) */
	if (req_wire_counts()) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		if (in_handshake_here(tid) && req_read_links())
			conn_handshake_io(c, sk, tid);
		/* the capture sees the handshake end: the kernel estimate can be summed */
		est_on_read(sk, c, ret, flags);
	} else {
		bool data = ret > 0 && !(flags & MSG_PEEK);
		/* the client answered the server's encrypted flight: TLS 1.3's handshake is over */
		if (data && c->wire == WIRE_SEALED)
			wire_finish(sk, c, WIRE_END_FINISHED);
		if (app_io(c, sk, false) && data)
			c->dir = CONN_DIR_IN;
	}
	return 0;
}

/*
 * The read side: the kernel estimate's windows open at reads (estimate.bpf.h); with --exact
 * a handshake call that reads a connection marks it as TLS, so that it is not also counted
 * as a connection without a handshake; where the server's sends cannot be seen, requests
 * and TLS 1.3's end are seen from the reads: the sock_recv_length tracepoint (6.3+), else the return of sock_recvmsg,
 * through fexit, else through a kretprobe (hash mode) with its arguments kept at entry.
 */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(req_recv, struct sock *sk, int ret, int flags)
{
	return req_received(sk, ret, flags);
}

SEC("fexit/sock_recvmsg")
int BPF_PROG(req_recv_fexit, struct socket *sock, struct msghdr *msg, int flags, int ret)
{
	struct sock *sk = sock->sk; /* typed: socket storage can take it */
	return sk ? req_received(sk, ret, flags) : 0;
}

/* sock_recvmsg's arguments, per thread, from its entry to its return (kretprobe). LRU: an
 * entry whose return was missed (kretprobe maxactive) is evicted first; an insert that fails
 * is req_recv_calls_full. */
struct req_recv_call {
	__u64 sock;
	__s32 flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct req_recv_call);
} req_recv_calls SEC(".maps");

SEC("kprobe/sock_recvmsg")
int BPF_KPROBE(req_recv_entry, struct socket *sock, struct msghdr *msg, int flags)
{
	if (!req_reads())
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct req_recv_call call = { .sock = (__u64)sock, .flags = flags };
	map_insert(&req_recv_calls, &tid, &call, BPF_ANY, STAT_REQ_RECV_CALLS_FULL);
	return 0;
}

SEC("kretprobe/sock_recvmsg")
int BPF_KRETPROBE(req_recv_return, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct req_recv_call *call = bpf_map_lookup_elem(&req_recv_calls, &tid);
	if (!call)
		return 0;
	/* call->sock read outside BPF_CORE_READ: inside, it would be a CO-RE relocation against
	 * a type the kernel does not have (the loader poisons it) */
	struct socket *sock = (struct socket *)call->sock;
	int flags = call->flags;
	struct sock *sk = BPF_CORE_READ(sock, sk);
	bpf_map_delete_elem(&req_recv_calls, &tid);
	return sk ? req_received(sk, ret, flags) : 0;
}

/* Attached only where the kernel lacks tcp_sendmsg_locked (wire_send counts requests). */
SEC("tp_btf/sock_send_length")
int BPF_PROG(req_send, struct sock *sk, int ret)
{
	struct conn_state *c = conn_of(sk);
	if (!c || !app_io(c, sk, true) || ret <= 0)
		return 0;
	if (c->dir == CONN_DIR_IN)
		req_exchange(c);
	c->dir = CONN_DIR_OUT;
	return 0;
}

#endif
