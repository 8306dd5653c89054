/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Wire capture, the send (wire.bpf.h is the capture's state and events, wire_walk.bpf.h the
 * walk): a server send on a watched connection, its first bytes told TLS or a plaintext
 * preamble, walked while the handshake output is captured, and the programs on
 * tcp_sendmsg_locked that run it.
 */
#ifndef TLSPROF_WIRE_SEND_BPF_H
#define TLSPROF_WIRE_SEND_BPF_H

/* The first bytes a send begins with (from its first buffer), for wire_looks_tls: false if
 * they cannot be read. */
static __always_inline bool wire_send_start(const struct msg_bufs *m, __u8 *b, __u32 n)
{
	if (m->count < n)
		return false;
	__u64 offset = m->offset;
	__u64 base;
	if (iter_is_ubuf(m->type)) {
		base = m->ubuf + offset;
	} else if (iter_is_iovec(m->type)) {
		struct iovec v;
		if (bpf_probe_read_kernel(&v, sizeof(v), m->iov) || v.iov_len < offset + n)
			return false;
		base = (__u64)v.iov_base + offset;
	} else {
		return false;
	}
	return bpf_probe_read_user(b, n, (void *)base) == 0;
}

/*
 * Without a selector, a process not traced is found by its connections: its first send on
 * a connection it accepted is looked at (its first 5 bytes, in the kernel) for a TLS record
 * (TLS from the first byte) or a greeting of a protocol that can start TLS later (SMTP, FTP
 * and NNTP's 2xx, IMAP's "* OK", POP3's "+OK", XMPP's "<", MySQL's handshake packet,
 * PostgreSQL's 'S'): such a connection is followed (the capture tells TLS when it starts,
 * and proc_found traces its process then); any other (an HTTP response) is not looked at
 * again.
 */
static __always_inline bool wire_looks_tls(const struct msghdr *msg)
{
	__u8 b[5] = {};
	struct msg_bufs m;
	msg_bufs_of(msg, &m);
	if (m.count == 1)
		return wire_send_start(&m, b, 1) && b[0] == 'S';
	if (!wire_send_start(&m, b, 5))
		return false;
	if ((b[0] == 22 || b[0] == 21) && b[1] == 3 && b[2] <= 4)
		return true;
	if (b[0] == '2' && (b[1] == '2' || b[1] == '0') && b[2] >= '0' && b[2] <= '9' && (b[3] == ' ' || b[3] == '-'))
		return true;
	if ((b[0] == '*' && b[1] == ' ' && b[2] == 'O' && b[3] == 'K') || (b[0] == '+' && b[1] == 'O' && b[2] == 'K'))
		return true;
	if (b[0] == '<' && (b[1] == '?' || b[1] == 's'))
		return true;
	return b[3] == 0 && b[4] == 10; /* MySQL: sequence 0, protocol version 10 */
}

/* The capture gives up on output it cannot read: the handshake is over as far as it goes. */
static __always_inline void wire_unsupported(const struct sock *sk, struct conn_state *c, __u32 copied)
{
	wire_finish(sk, c, WIRE_END_UNSUPPORTED);
	wire_hand_over(c, copied);
}

/* After a send's walk: the capture ended (requests are counted from here). */
static __always_inline void wire_after_send(struct conn_state *c, __u32 copied)
{
	if (c->wire.state == WIRE_DONE)
		wire_hand_over(c, copied);
}

#define WIRE_PRE_UNREAD \
	0                /* its first bytes could not be read, or a send shorter than 5 bytes may begin TLS
			   * (the walk says what it finds) */
#define WIRE_PRE_PLAIN 1 /* a preamble send */
#define WIRE_PRE_TLS 2   /* its first 5 bytes begin a TLS record */

/*
 * A send while nothing of TLS was sent yet (wire_preamble): its first bytes (5, or 1 of a
 * shorter send), read once before any walk, begin a TLS record, or the send is one more of
 * a plaintext preamble: its protocol told from them, counted as an exchange, and not walked
 * (the walk itself, which older kernels verify step by step, knows nothing of preambles).
 * Returns WIRE_PRE_*. A function of its own: its stack is gone when it returns, so that the
 * verifier finds the walk after it in states it has seen.
 */
static __noinline int wire_preamble_send(const struct sock *sk, struct conn_state *c, const struct msg_bufs *m,
                                         __u32 copied)
{
	__u8 b[8] = {};
	__u32 n = m->count >= 5 ? 5 : 1;
	bool read = n == 5 ? wire_send_start(m, b, 5) : wire_send_start(m, b, 1);
	if (!read)
		return WIRE_PRE_UNREAD;
	if (wire_tls_prefix(b, n))
		return n == 5 ? WIRE_PRE_TLS : WIRE_PRE_UNREAD;
	wire_preamble_seen(c, b, n);
	if (++c->wire.pre >= WIRE_PREAMBLE_SENDS) {
		wire_finish(sk, c, 0); /* not TLS: nothing was copied, nothing to say */
		wire_hand_over(c, copied);
	} else {
		req_sent(c, copied); /* a plaintext exchange, counted as any without TLS */
	}
	return WIRE_PRE_PLAIN;
}

/* The capture of a server send's handshake output, and the request count
 * (requests.bpf.h), while the capture is not over (wire_on_send counts the sends after it).
 * `bounded`: walk without bpf_loop. */
static __always_inline int wire_capture_send(const struct sock *sk, struct conn_state *c, const struct msghdr *msg,
                                             const bool bounded)
{
	__u32 copied = data_read(sk);

	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	bool in_hs = in_handshake_here(tid);
	if (in_hs)
		conn_handshake_io(c, tid); /* links the handshake call to its connection */
	__u32 seq = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	if (c->wire.state == WIRE_IDLE) {
		c->wire.state = WIRE_PLAIN;
		c->wire.seq = seq;
	}
	bool preamble = wire_preamble(c);
	if (preamble) {
		/* nothing of TLS sent yet: this send may be its first flight */
		c->wire.tgid = id >> 32;
		c->wire.rx_first = copied;
		c->wire.rx_flight = copied;
		/* a memory-BIO server's handshake call just returned on this thread: its flight */
		if (!in_hs)
			hs_link_membio(tid, id >> 32, c->life.id, c->life.start_ns);
	}
	if (c->wire.state == WIRE_SEALED && copied != c->wire.rx_flight) {
		/* The client answered the server's TLS 1.3 flight: the handshake is over. The
		 * answer is a change_cipher_spec and a Finished as long as the server's; bytes past
		 * them are a request. */
		wire_finish(sk, c, tls13_answer(c, copied));
		req_handshake_over(c, true, c->wire.rx_flight, 6 + 5 + c->wire.fin_len, copied);
		return 0;
	}
	c->wire.rx_flight = copied;

	struct msg_bufs m;
	msg_bufs_of(msg, &m);
	__u64 left = m.count;
	__s32 skip = (__s32)(c->wire.seq - seq);
	if (skip < 0) {
		wire_unsupported(sk, c, copied); /* output sent by a path not seen here */
		return 0;
	}
	if ((__u64)skip >= left)
		return 0; /* already walked when this send began: the kernel calls once per chunk */
	c->wire.seq = seq + (__u32)left;
	/* (not where the walk is a bounded loop, before 5.17: with this branch that program
	 * passes the verifier's million instructions; there TLS after a preamble is not seen) */
	/* (nor once the client's ClientHello has begun: the server answers it in TLS, and its
	 * first bytes are not read twice) */
	bool tls_start = false;
	if (!bounded && preamble && !c->wire.hdr_have && !hello_begun(c)) {
		int pre = wire_preamble_send(sk, c, &m, copied);
		if (pre == WIRE_PRE_PLAIN)
			return 0; /* one more plaintext send before TLS */
		tls_start = pre == WIRE_PRE_TLS && skip == 0;
	}

	__u64 offset = m.offset;
	/* a single user buffer (6.0+) */
	if (iter_is_ubuf(m.type)) {
		wire_walk(sk, c, m.ubuf + offset + skip, left - skip, bounded, tls_start);
		wire_after_send(c, copied);
		return 0;
	}
	if (!iter_is_iovec(m.type)) {
		wire_unsupported(sk, c, copied);
		return 0;
	}
	const struct iovec *iov = m.iov;
	__u64 nsegs = m.nr_segs;
	__u64 todo = left;
	for (int i = 0; i < WIRE_SEGS; i++) {
		if (i >= nsegs || todo == 0 || c->wire.state == WIRE_DONE)
			break;
		struct iovec v;
		if (bpf_probe_read_kernel(&v, sizeof(v), &iov[i]))
			break;
		__u64 base = (__u64)v.iov_base, len = v.iov_len;
		if (i == 0) {
			base += offset;
			len = len > offset ? len - offset : 0;
		}
		if (len > todo)
			len = todo;
		todo -= len;
		if ((__u64)skip >= len) {
			skip -= len;
			continue;
		}
		/* (each segment's walk looks at its own first bytes) */
		wire_walk(sk, c, base + skip, len - skip, bounded, false);
		skip = 0;
	}
	if (todo && c->wire.state != WIRE_DONE)
		wire_finish(sk, c, WIRE_END_CAP);
	wire_after_send(c, copied);
	return 0;
}

/*
 * A server send (tcp_sendmsg_locked): the capture of its handshake output, the request
 * count (requests.bpf.h), and the kernel estimate's windows around it (estimate.bpf.h).
 */
static __always_inline int wire_on_send(const struct sock *sk, const struct msghdr *msg, const bool bounded,
                                        const bool typed)
{
	struct conn_state *c = conn_of(sk);
	if (c && c->wire.state == WIRE_DONE) {
		/* The answer to a request after the handshake (every keep-alive request), first:
		 * counted, the capture being over. An estimate window or a Go handshake's stretch
		 * of another connection that this thread left open closes (each one load of a
		 * global while none is open anywhere, as on a host where no handshake is under way). */
		est_before_send(sk);
		go_before_send(c);
		req_sent(c, typed ? data_read_typed(sk) : data_read(sk));
		return 0;
	}
	if (!c) {
		/* a traced process's first send on a connection accepted where no one watched; or
		 * without a selector, any process's that looks like TLS or a STARTTLS greeting */
		const struct tcp_sock *tp = (const struct tcp_sock *)sk;
		if (bytes_sent_of(sk, typed))
			return 0;
		__u32 read = data_read(sk) - BPF_CORE_READ(tp, rcv_nxt) + (__u32)BPF_CORE_READ(tp, bytes_received);
		c = conn_adopt(sk, read, 0, proc_finding() && wire_looks_tls(msg));
		if (!c)
			return 0;
	}
	est_before_send(sk);
	go_before_send(c);
	return wire_capture_send(sk, c, msg, bounded);
}

/*
 * The send-capture capability, cheapest first: the tracepoint (6.14+), fentry, a kprobe
 * (hash mode: its socket is an untyped pointer); each with bpf_loop (5.17+) or a bounded
 * loop. The tracepoint fires once per chunk the kernel queues, fentry and kprobe once per
 * call: wire.seq tells what was walked already either way.
 *
 * One body (wire_on_send), and per hook one thin wrapper for each way of walking. The two
 * cannot be one program with a load-time switch: the bpf_loop walk passes its callback as a
 * function pointer (a BPF_PSEUDO_FUNC ld_imm64), which kernels before 5.13 reject wherever
 * it is in a program, reachable or not, and bpf_loop itself is unknown before 5.17; the
 * bounded walk, verified step by step, is what such kernels load.
 */
#define WIRE_SEND_PROGRAMS(suffix, bounded)                                                                         \
	SEC("tp_btf/tcp_sendmsg_locked")                                                                            \
	int BPF_PROG(wire_send##suffix, const struct sock *sk, const struct msghdr *msg, const struct sk_buff *skb, \
	             int size_goal)                                                                                 \
	{                                                                                                           \
		return wire_on_send(sk, msg, bounded, true);                                                        \
	}                                                                                                           \
	SEC("fentry/tcp_sendmsg_locked")                                                                            \
	int BPF_PROG(wire_send_fentry##suffix, struct sock *sk, struct msghdr *msg, size_t size)                    \
	{                                                                                                           \
		return wire_on_send(sk, msg, bounded, true);                                                        \
	}                                                                                                           \
	SEC("kprobe/tcp_sendmsg_locked")                                                                            \
	int BPF_KPROBE(wire_send_kprobe##suffix, struct sock *sk, struct msghdr *msg)                               \
	{                                                                                                           \
		return wire_on_send(sk, msg, bounded, false);                                                       \
	}

WIRE_SEND_PROGRAMS(, false)        /* wire_send, wire_send_fentry, wire_send_kprobe */
WIRE_SEND_PROGRAMS(_bounded, true) /* wire_send_bounded, wire_send_fentry_bounded, ... */

#endif
