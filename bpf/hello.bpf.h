/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The client's ClientHello (types: hello.h; user side: agent/src/bpf/wire.rs,
 * agent/src/wire/tracker.rs), once per connection accepted on a watched port, whatever its
 * TLS stack: the walk and its events (hello_bytes, for both ways of reading), and the
 * hooks that read it from the bytes the server reads, the fallback of the ones that read
 * it from the client's packets (hello_skb.bpf.h).
 *
 * Reads are followed by stream position, not by call: a connection's client stream starts
 * at tcp copied_seq at accept (hello_accepted); after a read of `ret` bytes its data began
 * at copied_seq - ret, and a MSG_PEEK read's at copied_seq (copied_seq does not move), so a
 * peek followed by the read of the same bytes copies them once. Only bytes at offsets not
 * captured yet are copied, contiguous from the stream's start; a read that starts past them
 * (bytes read where no hook saw them) ends the capture (HELLO_GAP).
 *
 * The walk reads each record header (5 bytes, possibly split across reads: OpenSSL without
 * read-ahead reads the header, then the body) and the ClientHello's 4-byte message header,
 * and stops at the end of the record that completes the ClientHello; the bytes walked, and
 * only those, are copied into ring-buffer reservations (never into a map), at most
 * HELLO_MAX per connection. The ClientHello may follow a plaintext preamble (STARTTLS, an
 * SSLRequest): a packet or read that does not begin with a handshake record moves the
 * stream's start past it, its first three bytes looked at and nothing copied (hello_bytes).
 *
 * Cost: a read hook runs at every socket read of the machine. Before any map or storage
 * lookup it keeps only TCP sockets whose reader is still within the first HELLO_GATE bytes
 * of the client's stream (tcp bytes_received, rcv_nxt and copied_seq: loads from the
 * socket); the socket-storage lookup follows only for those, and stops there once the
 * connection's ClientHello is complete.
 *
 * Where the read's bytes are: with the sock_recv_length tracepoint (6.3+), which gives no
 * buffer, from the syscall's saved user registers (read, recvfrom: the buffer argument;
 * readv: iov[0]; recvmsg: the user msghdr's msg_iov[0]; the bytes must all be in that first
 * segment), anything else (io_uring, recvmmsg, splice, a kernel thread) is HELLO_UNREADABLE;
 * with fexit on sock_recvmsg (5.10, 6.1), or a kretprobe (arm64's 6.1), from the msghdr's
 * iterator, which the read has advanced past its bytes.
 */
#ifndef TLSPROF_HELLO_BPF_H
#define TLSPROF_HELLO_BPF_H

#include "hello.h"

#define HELLO_STEPS 8 /* record headers and bodies walked per read */
/* Reads that start this far into the client's stream are not looked at (no storage
 * lookup): a keep-alive connection's requests stop costing a lookup once its client has
 * sent this much. Real ClientHellos end before it (a post-quantum one is ~1.8 KB); one
 * longer, whose bytes past it come in reads of their own, is not read whole (not counted). */
#define HELLO_GATE 4096

#ifndef PF_IO_WORKER
#define PF_IO_WORKER 0x00000010
#endif
#ifndef PF_KTHREAD
#define PF_KTHREAD 0x00200000
#endif

/* The syscalls whose buffer the tracepoint's program can find. */
#if defined(__TARGET_ARCH_arm64)
#define HELLO_NR_READ 63
#define HELLO_NR_READV 65
#define HELLO_NR_RECVFROM 207
#define HELLO_NR_RECVMSG 212
#define HELLO_SYSCALL_NR(regs) BPF_CORE_READ((regs), syscallno)
#else
#define HELLO_NR_READ 0
#define HELLO_NR_READV 19
#define HELLO_NR_RECVFROM 45
#define HELLO_NR_RECVMSG 47
#define HELLO_SYSCALL_NR(regs) BPF_CORE_READ((regs), orig_ax)
#endif

/* The client's TLS has begun: its first record's header is being read, or more. */
static __always_inline bool hello_begun(const struct conn_state *c)
{
	return c->hello.seen || c->hello.hdr_have;
}

/* The client's stream up to `copied` (tcp copied_seq) lies before where its TLS starts: a
 * plaintext preamble the capture stepped over (it moved `start` past it), no byte of its
 * TLS seen yet. False where the capture does not follow the connection. */
static __always_inline bool hello_before_tls(const struct conn_state *c, __u32 copied)
{
	return c->hello.state == HELLO_ON && !hello_begun(c) && (__s32)(copied - c->hello.start) <= 0;
}

/* Whether the first bytes of a chunk of the client's stream (a packet's or a read's: b[0..n),
 * n at most 3) can begin its TLS: a handshake record (SSL 3.0 to TLS 1.3 record versions). */
static __always_inline bool hello_tls_prefix(const __u8 *b, __u32 n)
{
	return b[0] == 22 && (n < 2 || b[1] == 3) && (n < 3 || b[2] <= 4);
}

/* What the client's first bytes (b[0..n), n at most 3) are, where they begin no TLS record:
 * HELLO_UNTLS_HTTP, _HTTP2, _SSH or _OTHER. */
static __always_inline __u8 hello_untls_first(const __u8 *b, __u32 n)
{
	if (n < 3)
		return HELLO_UNTLS_OTHER;
	__u32 w = (__u32)b[0] << 16 | (__u32)b[1] << 8 | b[2];
#define HELLO_W(a, b_, c) ((__u32)(a) << 16 | (__u32)(b_) << 8 | (c))
	switch (w) {
	case HELLO_W('G', 'E', 'T'):
	case HELLO_W('P', 'O', 'S'):
	case HELLO_W('H', 'E', 'A'):
	case HELLO_W('P', 'U', 'T'):
	case HELLO_W('D', 'E', 'L'):
	case HELLO_W('O', 'P', 'T'):
	case HELLO_W('P', 'A', 'T'):
	case HELLO_W('C', 'O', 'N'):
	case HELLO_W('T', 'R', 'A'):
		return HELLO_UNTLS_HTTP;
	case HELLO_W('P', 'R', 'I'):
		return HELLO_UNTLS_HTTP2;
	case HELLO_W('S', 'S', 'H'):
		return HELLO_UNTLS_SSH;
	}
#undef HELLO_W
	return HELLO_UNTLS_OTHER;
}

/* What a connection that closed before its server sent any TLS was (HELLO_UNTLS_*), given
 * whether the client sent any byte (`received`) and who ended it (`by`: CONN_BY_*). */
static __always_inline __u8 hello_untls(const struct conn_state *c, bool received, __u8 by)
{
	if (hello_begun(c)) {
		if (by == CONN_BY_CLIENT)
			return HELLO_UNTLS_HELLO_CLIENT;
		return by == CONN_BY_RESET ? HELLO_UNTLS_HELLO_RESET : HELLO_UNTLS_HELLO_SERVER;
	}
	if (!received)
		return HELLO_UNTLS_SILENT;
	return c->hello.first ? c->hello.first : HELLO_UNTLS_OTHER;
}

/* The capture still looks at this connection's reads: its ClientHello, or the record after it. */
static __always_inline bool hello_following(const struct conn_state *c)
{
	return c->hello.state == HELLO_ON || c->hello.state == HELLO_NEXT;
}

/* A connection accepted: its client stream starts at `start` (tcp copied_seq). */
static __always_inline void hello_accepted(struct hello_conn *h, __u32 start)
{
	h->start = start;
	h->state = HELLO_ON;
}

/*
 * The gate, on the socket alone: the state of a connection whose ClientHello may still be
 * read here, NULL for every other read. `ret` bytes were read, `flags` recvmsg's.
 */
static __always_inline struct conn_state *hello_wanted(struct sock *sk, int ret, int flags)
{
	if (ret <= 0)
		return NULL;
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return NULL; /* not TCP */
	/* bytes of the client's stream the reader had consumed before this read */
	__s64 consumed = (__s64)tp->bytes_received - (__s64)(__u32)(tp->rcv_nxt - tp->copied_seq);
	if (!(flags & MSG_PEEK))
		consumed -= ret;
	if (consumed >= HELLO_GATE)
		return NULL;
	struct conn_state *c = conn_of(sk);
	if (!c || !hello_following(c))
		return NULL;
	return c;
}

/*
 * Where the bytes walked are: a read's user buffer (pkt false: `at` is their address), or a
 * packet as it reaches the socket (pkt true, hello_skb.bpf.h: `at` is their offset in
 * skb). Each function that reads them comes in one body, inlined with `pkt` a constant, so
 * a tracing program holds no packet helper and the packet program no helper of tracing
 * programs (a kernel's verifier may not see that a branch on the context pointer is dead:
 * 6.1's does not).
 */
static __always_inline long hello_load(struct __sk_buff *skb, const bool pkt, void *to, __u64 n, __u64 at,
                                       const __u64 max)
{
	if (pkt) {
		/* 1 to max bytes, in a form every verifier follows (6.1's learns nothing from a
		 * test against 0, and the packet helper refuses a size that may be 0) */
		__u64 m = n - 1;
		asm volatile("" : "+r"(m));
		if (m >= max)
			return -1;
		return bpf_skb_load_bytes(skb, at, to, m + 1);
	}
	return bpf_probe_read_user(to, n, (void *)at);
}

/* Sends n bytes of the client's stream at `ptr` (hello_load), at stream offset `at`, with
 * `flags` (HELLO_*) on the last event; false if they could not be read. Never through a
 * map: read straight into ring-buffer reservations. An event from a packet carries tgid 0:
 * it runs where the packet arrives, not in the server (the agent takes the port's owner). */
static __always_inline bool hello_send(const struct conn_state *c, struct __sk_buff *skb, const bool pkt, __u64 ptr,
                                       __u32 n, __u32 at, __u8 flags)
{
	for (int i = 0; i < HELLO_MAX / WIRE_CHUNK; i++) {
		__u32 k = n < WIRE_CHUNK ? n : WIRE_CHUNK;
		bool final = k == n;
		if (!final && k == 0)
			return true;
		struct wire_event *e = wire_event_new();
		if (!e) {
			stat_inc(STAT_WIRE_EVENTS_LOST);
			return true; /* the agent sees the gap in the offsets: lost */
		}
		__u64 sz = k;
		asm volatile("" : "+r"(sz));
		if (sz > WIRE_CHUNK || (sz && hello_load(skb, pkt, e->data, sz, ptr, WIRE_CHUNK))) {
			bpf_ringbuf_discard(e, 0);
			return false;
		}
		e->conn_id = c->life.id;
		e->tgid = pkt ? 0 : bpf_get_current_pid_tgid() >> 32;
		e->netns = c->life.netns;
		e->port = c->life.port;
		e->kind = WIRE_EV_HELLO;
		e->flags = final ? flags : 0;
		e->len = k;
		e->offset = at;
		wire_event_send(e);
		if (final)
			return true;
		ptr += k;
		n -= k;
		at += k;
	}
	return true;
}

/* The capture gives up (why: HELLO_*): says so, with nothing more. */
static __always_inline void hello_stop(struct conn_state *c, struct __sk_buff *skb, const bool pkt, __u8 why)
{
	c->hello.state = HELLO_DONE;
	hello_send(c, skb, pkt, 0, 0, c->hello.seen, why);
}

/* Reads n (at most 5) bytes at ptr into the state's array `to` (8 bytes) from index `have`. */
static __always_inline bool hello_take_bytes(struct __sk_buff *skb, const bool pkt, __u8 *to, __u8 have, __u64 ptr,
                                             __u32 n)
{
	__u8 tmp[8] = {};
	__u64 sz = n;
	asm volatile("" : "+r"(sz)); /* a bound the verifier follows */
	if (sz > 5)
		return false;
	if (sz && hello_load(skb, pkt, tmp, sz, ptr, 5))
		return false;
	for (int k = 0; k < 5; k++) {
		if (k < n)
			to[(have + k) & 7] = tmp[k];
	}
	return true;
}

/*
 * Walks the new bytes [ptr, ptr + avail) of the client's stream, record by record: how many
 * belong to the ClientHello's records (the rest is never looked at); *why: HELLO_* when the
 * capture ends (HELLO_LAST: complete).
 */
static __always_inline __u32 hello_walk_from(struct hello_conn *h, struct __sk_buff *skb, const bool pkt, __u64 ptr,
                                             __u32 avail, __u8 *why)
{
	__u32 take = 0;
	for (int i = 0; i < HELLO_STEPS; i++) {
		if (take >= avail)
			return take;
		__u32 left = avail - take;
		if (h->rec_left == 0) {
			/* a record header, or the rest of one: within the cap, or none */
			if (h->seen + take + 5 - h->hdr_have > HELLO_MAX) {
				*why = HELLO_CUT;
				return take;
			}
			__u32 want = 5 - (h->hdr_have & 7);
			__u32 got = left < want ? left : want;
			if (got > 5 || !hello_take_bytes(skb, pkt, h->hdr, h->hdr_have, ptr + take, got)) {
				*why = HELLO_UNREADABLE;
				return take;
			}
			h->hdr_have += got;
			take += got;
			if (h->hdr_have < 5)
				return take; /* the rest comes with a later read */
			h->hdr_have = 0;
			__u32 len = (__u32)h->hdr[3] << 8 | h->hdr[4];
			if (h->hdr[0] != 22 || h->hdr[1] != 3 || len == 0 || len > HELLO_MAX_RECORD) {
				*why = HELLO_BAD;
				return take - got;
			}
			if (++h->records > HELLO_MAX_RECORDS || h->seen + take + len > HELLO_MAX) {
				*why = HELLO_CUT;
				return take - got;
			}
			h->rec_left = len;
			continue;
		}
		/* record body: the ClientHello's message header first */
		__u32 t = h->rec_left < left ? h->rec_left : left;
		if (h->msg_have < 4) {
			__u32 want = 4 - (h->msg_have & 3);
			__u32 got = t < want ? t : want;
			__u8 m[8] = {};
			__builtin_memcpy(m, h->msg, 4);
			if (!hello_take_bytes(skb, pkt, m, h->msg_have, ptr + take, got)) {
				*why = HELLO_UNREADABLE;
				return take;
			}
			__builtin_memcpy(h->msg, m, 4);
			h->msg_have += got;
			if (h->msg[0] != 1) {
				*why = HELLO_BAD; /* not a ClientHello */
				return take;
			}
			if (h->msg_have >= 4)
				h->msg_len = 4 + ((__u32)h->msg[1] << 16 | (__u32)h->msg[2] << 8 | h->msg[3]);
		}
		h->rec_left -= t;
		h->body += t;
		take += t;
		if (h->rec_left == 0 && h->msg_len && h->body >= h->msg_len) {
			*why = HELLO_LAST;
			return take;
		}
	}
	if (take < avail)
		*why = HELLO_CUT; /* more records in one read than walked */
	return take;
}

/* The walk as a function of its own, for reads and for packets (it is the biggest part). */
static __noinline __u32 hello_walk(struct hello_conn *h, __u64 ptr, __u32 avail, __u8 *why)
{
	return hello_walk_from(h, NULL, false, ptr, avail, why);
}

static __noinline __u32 hello_walk_skb(struct hello_conn *h, struct __sk_buff *skb, __u32 off, __u32 avail, __u8 *why)
{
	return hello_walk_from(h, skb, true, off, avail, why);
}

/*
 * The record after the ClientHello, from its first byte: [ptr, ptr + avail) (hello_load).
 * Its 5-byte header is read (across chunks, into hdr); if it is an alert in the clear (type
 * 21, 2 bytes), its level and description too, and those 2 bytes alone go to the agent
 * (HELLO_ALERT). Any other record ends the looking (a TLS 1.2 ClientKeyExchange, TLS 1.3's
 * change_cipher_spec or an encrypted record): nothing of it but the header is read.
 */
static __always_inline void hello_next_from(struct conn_state *c, struct __sk_buff *skb, const bool pkt, __u64 ptr,
                                            __u32 avail)
{
	struct hello_conn *h = &c->hello;
	__u32 have = h->hdr_have & 7;
	if (have < 5) {
		__u32 got = avail < 5 - have ? avail : 5 - have;
		if (!hello_take_bytes(skb, pkt, h->hdr, have, ptr, got)) {
			h->state = HELLO_DONE;
			return;
		}
		have += got;
		h->seen += got;
		h->hdr_have = have;
		ptr += got;
		avail -= got;
		if (have < 5)
			return;
		if (h->hdr[0] != 21 || h->hdr[1] != 3 || h->hdr[3] != 0 || h->hdr[4] != 2) {
			h->state = HELLO_DONE;
			return;
		}
	}
	__u32 got = avail < 7 - have ? avail : 7 - have;
	if (got > 2 || !hello_take_bytes(skb, pkt, h->hdr, have, ptr, got)) {
		h->state = HELLO_DONE;
		return;
	}
	have += got;
	h->seen += got;
	h->hdr_have = have;
	if (have < 7)
		return;
	h->state = HELLO_DONE;
	struct wire_event *e = wire_event_new();
	if (!e) {
		stat_inc(STAT_WIRE_EVENTS_LOST);
		return;
	}
	e->conn_id = c->life.id;
	e->tgid = pkt ? 0 : bpf_get_current_pid_tgid() >> 32;
	e->netns = c->life.netns;
	e->port = c->life.port;
	e->kind = WIRE_EV_HELLO;
	e->flags = HELLO_ALERT;
	e->len = 2;
	e->offset = h->seen - 2;
	e->data[0] = h->hdr[5];
	e->data[1] = h->hdr[6];
	wire_event_send(e);
}

static __noinline void hello_next(struct conn_state *c, __u64 ptr, __u32 avail)
{
	hello_next_from(c, NULL, false, ptr, avail);
}

static __noinline void hello_next_skb(struct conn_state *c, struct __sk_buff *skb, __u32 off, __u32 avail)
{
	hello_next_from(c, skb, true, off, avail);
}

/*
 * `n` bytes of the client's stream at stream position `pos` (tcp sequence number), at
 * `ptr` (hello_load; a read's buffer: 0 if the hook cannot tell where), of a connection
 * whose ClientHello is being captured: those not looked at yet are walked and sent.
 */
static __always_inline void hello_bytes(struct conn_state *c, struct __sk_buff *skb, const bool pkt, __u32 pos, __u32 n,
                                        __u64 ptr)
{
	struct hello_conn *h = &c->hello;
	__s32 off = (__s32)(pos - h->start);
	if (off < 0 || (__u32)off + n <= h->seen)
		return; /* nothing new (a peek read again, a packet sent again, or bytes before the stream's start) */
	if (h->state == HELLO_NEXT) {
		if ((__u32)off > h->seen || (!pkt && !ptr))
			h->state = HELLO_DONE; /* not seen where it begins: nothing to say */
		else if (pkt)
			hello_next_skb(c, skb, ptr + h->seen - (__u32)off, n - (h->seen - (__u32)off));
		else
			hello_next(c, ptr + h->seen - (__u32)off, n - (h->seen - (__u32)off));
		return;
	}
	if ((__u32)off > h->seen) {
		hello_stop(c, skb, pkt, HELLO_GAP); /* read where no hook saw, or a packet out of order */
		return;
	}
	if (!pkt && !ptr) {
		hello_stop(c, skb, pkt, HELLO_UNREADABLE);
		return;
	}
	__u32 skip = h->seen - (__u32)off;
	ptr += skip;
	if (h->seen == 0 && h->hdr_have == 0) {
		/* Where TLS starts: a chunk (a packet, a read) that begins with a handshake
		 * record. One that does not is a plaintext preamble (STARTTLS, PostgreSQL's
		 * SSLRequest), or a connection without TLS: its first bytes (at most 3) are all
		 * that is looked at, nothing is sent, and the stream's start moves past it; the
		 * gates (HELLO_GATE) end the looking 4 KiB into the stream. */
		__u8 first[4] = {};
		__u64 k = n < 3 ? n : 3;
		asm volatile("" : "+r"(k)); /* a bound the verifier follows */
		if (k < 1 || k > 3 || hello_load(skb, pkt, first, k, ptr, 3)) {
			hello_stop(c, skb, pkt, HELLO_UNREADABLE);
			return;
		}
		if (!hello_tls_prefix(first, k)) {
			if (!h->first)
				h->first = hello_untls_first(first, k);
			h->start = pos + n;
			return;
		}
		req_tls_starts();
	}
	__u8 why = 0;
	__u32 take = pkt ? hello_walk_skb(h, skb, ptr, n - skip, &why) : hello_walk(h, ptr, n - skip, &why);
	if (take > HELLO_MAX)
		take = HELLO_MAX;
	if (!take && !why)
		return;
	if (!hello_send(c, skb, pkt, ptr, take, h->seen, why)) {
		hello_stop(c, skb, pkt, HELLO_UNREADABLE);
		return;
	}
	h->seen += take;
	if (why == HELLO_LAST) {
		/* the record after it is looked at for an alert (hello_next_from) */
		h->state = HELLO_NEXT;
		h->hdr_have = 0;
	} else if (why) {
		h->state = HELLO_DONE;
	}
}

#endif
