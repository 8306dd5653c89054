/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Requests per connection (types: conn.h; user side: agent/src/conns/churn.rs): an
 * application data exchange is data from the client followed by data from the server.
 *
 * Where tcp_sendmsg_locked is attached (wire.bpf.h, req_ctl.sends_captured), requests are
 * counted at the server's sends, without any receive hook: a send after the server has
 * read new bytes of the client's stream (tcp copied_seq, past the handshake's) is one
 * exchange. Elsewhere, from sock_recv_length/sock_send_length: reads and writes made
 * inside a handshake call, or the first write after a handshake call that did no socket
 * I/O itself (memory BIO), are the handshake's, not requests. Per socket read/write: one
 * socket-storage lookup, which finds nothing on sockets that are not watched; while
 * nothing needs the reads the agent detaches the read side (agent/src/bpf/readside.rs), and
 * req_ctl.reads, cleared first, stops a read that still comes before it. Its part of a
 * connection's state: struct req_conn (requests.h).
 */
#ifndef TLSPROF_REQUESTS_BPF_H
#define TLSPROF_REQUESTS_BPF_H

#include "requests.h"

/* Exchanges per watched port as they happen (conn.h: CONN_EXCHANGE_SLOTS; the agent gives
 * each port its slot). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CONN_EXCHANGE_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} conn_exchanges SEC(".maps");

/* Switches the agent sets after load (requests.h: why they are not read-only globals). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct req_ctl);
} req_ctl SEC(".maps");

/* The switches now: one lookup per program run, checked first on every read of the machine,
 * before the socket's storage (NULL: the array cannot be read, as good as everything off). */
static __always_inline const struct req_ctl *req_switches(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&req_ctl, &zero);
}

/* Process starts counted (reads_at_fork): the kernel's side of req_ctl.starts_seen. A
 * counter of its own, not a field of req_ctl, which the agent writes whole. */
__u32 req_starts = 0;

/*
 * A traced process forked, or a process is traced from its exec: where the mode asked
 * (reads_at_fork), the reads are on from here, before it runs, until the agent has read
 * this start's notice (its `seq`, the count returned here; 0 where not counted) and
 * decided what the process needs (agent/src/bpf/loader.rs). The agent's own switch,
 * written whole, cannot turn them off meanwhile: a process started for one connection has
 * its handshake estimated whatever the agent is doing. Concurrent starts on other CPUs may
 * be in the count read back: their notices come with theirs, in the same ring.
 */
static __always_inline __u32 req_process_started(void)
{
	__u32 zero = 0;
	struct req_ctl *ctl = bpf_map_lookup_elem(&req_ctl, &zero);
	if (!ctl || !ctl->reads_at_fork)
		return 0;
	__sync_fetch_and_add(&req_starts, 1);
	return req_starts;
}

/* What the reads are for now: the agent's switch, or every read while a process start is
 * not acknowledged (req_process_started). */
static __always_inline __u32 req_reads_now(const struct req_ctl *ctl)
{
	if (ctl->reads_at_fork && ctl->starts_seen != req_starts)
		return REQ_READS_ALL;
	return ctl->reads;
}

/* TLS starts on a followed connection: its first handshake record (hello.bpf.h), from its
 * packet where the packet program captures ClientHellos. Where a process is estimated beside
 * probes still judged (reads_at_hello), the reads that estimate needs are on from here: a
 * keep-alive server judged for long pays one array lookup per read until new TLS comes. */
static __always_inline void req_tls_starts(void)
{
	__u32 zero = 0;
	struct req_ctl *ctl = bpf_map_lookup_elem(&req_ctl, &zero);
	if (ctl && ctl->reads_at_hello && ctl->reads == REQ_READS_OFF)
		ctl->reads = REQ_READS_HANDSHAKES;
}

/* A connection accepted: its requests are counted from what the client sends past `mark`
 * (tcp copied_seq), with its port's live counter `slot` (conn_port_stats.slot). */
static __always_inline void req_accepted(struct req_conn *r, __u32 slot, __u32 mark)
{
	r->slot = (__u16)slot;
	r->rx_mark = mark;
}

/* The application data exchanges of a connection so far. */
static __always_inline __u32 req_count(const struct conn_state *c)
{
	return c->req.requests;
}

/* One more application data exchange on c: the connection's count, and its port's live
 * one (a per-CPU array slot: no hash lookup, no shared cache line). */
static __always_inline void req_exchange(struct conn_state *c)
{
	c->req.requests++;
	if (!c->req.slot)
		return;
	__u32 idx = c->req.slot - 1;
	__u64 *n = bpf_map_lookup_elem(&conn_exchanges, &idx);
	if (n)
		*n += 1; /* this CPU's own: sends run in process context, one at a time per CPU */
}

/*
 * A server send: one more request if the server has read new bytes of the client's stream
 * since the last one counted. rx_tail holds back the client's handshake bytes that come
 * after the capture ended (its Finished), so that a send answering only them (TLS 1.3
 * session tickets) is not a request.
 */
static __always_inline void req_sent(struct conn_state *c, __u32 copied)
{
	__s32 adv = (__s32)(copied - c->req.rx_mark);
	if (adv <= 0)
		return;
	if (c->req.rx_tail) {
		if ((__u32)adv <= c->req.rx_tail)
			return;
		c->req.rx_tail = 0;
	}
	req_exchange(c);
	c->req.rx_mark = copied;
}

/*
 * The capture of the server's handshake output ended during this send (wire.bpf.h), the
 * client having read up to `copied`: without TLS the server answers a request; with TLS,
 * what the client sent up to `mark` was its handshake, and `tail` bytes past it still are
 * (its change_cipher_spec and Finished, yet to come or just read).
 */
static __always_inline void req_handshake_over(struct conn_state *c, bool tls, __u32 mark, __u32 tail, __u32 copied)
{
	if (tls) {
		c->req.rx_mark = mark;
		c->req.rx_tail = tail;
	}
	req_sent(c, copied);
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
		conn_handshake_io(c, tid);
		return NULL;
	}
	if (cpu->after_hs == tid) {
		cpu->after_hs = 0;
		if (write)
			return NULL;
	}
	return c;
}

/* A read of a watched connection returned: `ret` bytes, with recvmsg's `flags`; `typed`:
 * the program's socket is typed (tp_btf, fexit: plain loads, common.bpf.h). */
static __always_inline int req_received(struct sock *sk, int ret, int flags, const bool typed)
{
	const struct req_ctl *ctl = req_switches();
	if (!ctl)
		return 0;
	__u32 reads = req_reads_now(ctl);
	if (reads == REQ_READS_OFF)
		return 0;
	bool handshakes_only = reads == REQ_READS_HANDSHAKES;
	if (handshakes_only && !est_gate_passed(sk, ret, flags, typed))
		return 0; /* past a handshake's bytes: no lookup of the socket's storage */
	struct conn_state *c = conn_of(sk);
	if (!c) {
		if (handshakes_only)
			return 0; /* accepted where no one watched: its handshake is not estimated */
		/* a traced process's first read on a connection accepted where no one watched:
		 * nothing read before this read's bytes, nothing sent */
		if (ret <= 0 || (flags & MSG_PEEK))
			return 0;
		if (received_before(sk, ret, typed))
			return 0; /* under way: not its start */
		c = conn_adopt(sk, 0, bytes_sent_of(sk, typed), false);
		if (!c)
			return 0;
	}
	go_on_read(c, ret); /* a Go handshake's goroutine parks or resumes (gotls.bpf.h) */
	if (ctl->sends_captured) {
		/* The sends link a handshake call to its connection, and the wire counts: a
		 * connection a handshake call only read (a client gone mid-ClientHello) closes
		 * without TLS, a failed handshake by the wire's rule, not marked TLS here. The
		 * capture sees the handshake end: the kernel estimate can be summed. */
		est_on_read(sk, c, ret, flags);
	} else {
		bool data = ret > 0 && !(flags & MSG_PEEK);
		if (data)
			wire_read_data(sk, c);
		if (app_io(c, sk, false) && data)
			c->req.dir = CONN_DIR_IN;
	}
	return 0;
}

/*
 * The read side: the kernel estimate's windows open at reads (estimate.bpf.h); where the
 * server's sends cannot be seen, a handshake call that reads a connection marks it as TLS
 * (the probes count its failure: it is not also a connection without a handshake), and
 * requests and TLS 1.3's end are seen from the reads: the sock_recv_length tracepoint (6.3+), else the return of sock_recvmsg,
 * through fexit, else through a kretprobe (hash mode) with its arguments kept at entry.
 */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(req_recv, struct sock *sk, int ret, int flags)
{
	return req_received(sk, ret, flags, true);
}

SEC("fexit/sock_recvmsg")
int BPF_PROG(req_recv_fexit, struct socket *sock, struct msghdr *msg, int flags, int ret)
{
	struct sock *sk = sock->sk; /* typed: socket storage can take it */
	return sk ? req_received(sk, ret, flags, true) : 0;
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
	const struct req_ctl *ctl = req_switches();
	if (!ctl || req_reads_now(ctl) == REQ_READS_OFF)
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
	return sk ? req_received(sk, ret, flags, false) : 0;
}

/* Attached only where the kernel lacks tcp_sendmsg_locked (wire_send counts requests). */
SEC("tp_btf/sock_send_length")
int BPF_PROG(req_send, struct sock *sk, int ret)
{
	struct conn_state *c = conn_of(sk);
	if (!c || !app_io(c, sk, true) || ret <= 0)
		return 0;
	if (c->req.dir == CONN_DIR_IN)
		req_exchange(c);
	c->req.dir = CONN_DIR_OUT;
	return 0;
}

#endif
