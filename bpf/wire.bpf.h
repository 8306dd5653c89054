/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Wire capture (types: wire.h; user side: agent/src/bpf/wire.rs, agent/src/wire/): the
 * server's handshake output, what it negotiated, for servers with and without handshake
 * probes. tcp_sendmsg_locked fires for every TCP send of the machine, once per chunk the
 * kernel queues: on a socket that is not watched, or whose handshake is over, it stops at
 * the socket-storage lookup. The same send counts requests (requests.bpf.h).
 */
#ifndef TLSPROF_WIRE_BPF_H
#define TLSPROF_WIRE_BPF_H

/* The smallest TLS 1.3 Finished record: header, SHA-256 verify data and its message
 * header, inner content type, AEAD tag. An alert (24 bytes, 30 after a change_cipher_spec)
 * is smaller. */
#define TLS13_MIN_FINISHED (5 + 4 + 32 + 1 + 16)
/* The body of the longest TLS 1.3 Finished record (SHA-384 suites): what the client's is
 * taken to be at most when the server's Finished shared its record with the rest of its
 * flight (GnuTLS sends its whole encrypted flight as one record). */
#define TLS13_MAX_FINISHED_BODY (4 + 48 + 1 + 16)

/* How a TLS 1.3 handshake ended, from what the server has read of the client's answer to
 * its encrypted flight (copied: tcp copied_seq now). */
static __always_inline __u8 tls13_answer(const struct conn_state *c, __u32 copied)
{
	__u32 answer = copied - c->wire.rx_flight;
	if (answer == 0)
		return WIRE_END_CLOSED;
	return answer >= TLS13_MIN_FINISHED ? WIRE_END_FINISHED : WIRE_END_CLIENT_ALERT;
}

/* The server spoke a protocol that can start TLS later (a STARTTLS greeting, PostgreSQL's
 * 'S'): a connection that closes without TLS after that was a plaintext session, not a
 * failed handshake. (A server that answers plaintext on a TLS port, nginx's 400, is not
 * one: its connection is a failed handshake.) */
static __always_inline bool wire_spoke_plaintext(const struct conn_state *c)
{
	return c->wire.proto > WIRE_PROTO_OTHER;
}

/* The capture is still in the connection's plaintext preamble (it has sent, but no TLS record yet). */
static __always_inline bool wire_preamble(const struct conn_state *c)
{
	return c->wire.state == WIRE_PLAIN && !(c->wire.flags & WIRE_F_TLS);
}

#define WIRE_RINGBUF_BYTES (2 * 1024 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WIRE_RINGBUF_BYTES);
} wire_events SEC(".maps");

/* An event of the ClientHello or QUIC capture's, on this ring buffer (NULL if it is full):
 * filled, then sent with wire_event_send. */
static __always_inline struct wire_event *wire_event_new(void)
{
	return bpf_ringbuf_reserve(&wire_events, sizeof(struct wire_event), 0);
}

static __always_inline void wire_event_send(struct wire_event *e)
{
	bpf_ringbuf_submit(e, RB_LAZY(&wire_events, WIRE_RINGBUF_BYTES));
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wire_event);
} wire_scratch SEC(".maps");

/* The encrypted record headers of one send, gathered in one WIRE_EV_RECORD (a TLS 1.3
 * flight's four or five records: one ring-buffer event instead of one each). Per CPU, as
 * wire_scratch: filled and sent within one program run. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wire_event);
} wire_records SEC(".maps");

/* A walk's bytes, read once (up to WIRE_CHUNK) where they are TLS: the record headers within
 * them are taken from here rather than read one by one, and a plaintext phase that ends
 * within them (a ServerHello) is sent from here. Per CPU, filled and used within one run. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wire_event);
} wire_window SEC(".maps");

#define WIRE_STEPS 24 /* record headers and bodies walked per chunk of output */
#define WIRE_SEGS \
	8 /* iovec segments looked at per send (GnuTLS: one per record of its flight; after a HelloRetryRequest the ServerHello too) */
#define WIRE_MAX_RECORD (16384 + 2048)

/* An event's header: connection `c`'s, of `kind`, `len` bytes of data. */
static __always_inline void wire_ev_head(struct wire_event *e, const struct conn_state *c, __u8 kind, __u16 len)
{
	e->conn_id = c->life.id;
	e->tgid = c->wire.tgid;
	e->netns = c->life.netns;
	e->port = c->life.port;
	e->kind = kind;
	e->flags = 0;
	e->len = len;
	e->offset = 0;
}

static __always_inline struct wire_event *wire_ev(const struct sock *sk, const struct conn_state *c, __u8 kind)
{
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_scratch, &zero);
	if (!e)
		return NULL;
	wire_ev_head(e, c, kind, 0);
	return e;
}

static __always_inline void wire_out(struct wire_event *e, __u32 len)
{
	__u64 size = WIRE_EVENT_HEADER + (__u64)len;
	/* keep the compiler from folding the bound into something the verifier cannot follow */
	asm volatile("" : "+r"(size));
	if (size > sizeof(*e))
		return;
	if (bpf_ringbuf_output(&wire_events, e, size, RB_LAZY(&wire_events, WIRE_RINGBUF_BYTES)))
		stat_inc(STAT_WIRE_EVENTS_LOST);
}

/* The capture is over: nothing more of this connection is looked at. `closing`: the
 * connection's close ended it (wire_closed), and the event says who had ended the connection;
 * a constant, so the send walks' many inlined ends carry no more code than before it. */
static __always_inline void wire_end(const struct sock *sk, struct conn_state *c, __u8 why, const bool closing)
{
	bool tls = c->wire.flags & WIRE_F_TLS;
	if (c->wire.state == WIRE_DONE)
		return;
	c->wire.state = WIRE_DONE;
	c->wire.why = why;
	if (!tls)
		return; /* not TLS: nothing was sent, nothing to say */
	struct wire_event *e = wire_ev(sk, c, WIRE_EV_END);
	if (!e)
		return;
	e->flags = why;
	/* when the connection was accepted (the agent asks whether the process's probes were
	 * there), and what its preamble was */
	__builtin_memcpy(e->data, &c->life.start_ns, 8);
	e->data[8] = c->wire.proto;
	if (closing) {
		e->data[9] = c->life.first_fin | c->life.reset << 4;
		e->len = WIRE_END_CLOSED_LEN;
		wire_out(e, WIRE_END_CLOSED_LEN);
	} else {
		e->len = WIRE_END_LEN;
		wire_out(e, WIRE_END_LEN);
	}
}

static __always_inline void wire_finish(const struct sock *sk, struct conn_state *c, __u8 why)
{
	wire_end(sk, c, why, false);
}

/* The connection closed while its handshake output was being captured (conn.bpf.h). */
static __always_inline void wire_closed(const struct sock *sk, struct conn_state *c)
{
	if (c->wire.state == WIRE_SEALED)
		wire_end(sk, c, tls13_answer(c, data_read(sk)), true);
	else if (c->wire.state == WIRE_PLAIN)
		wire_end(sk, c, WIRE_END_CLOSED, true);
}

/* A read of the client's data, where the server's sends do not count requests
 * (requests.bpf.h): the client answered the server's encrypted flight, TLS 1.3's
 * handshake is over. */
static __always_inline void wire_read_data(const struct sock *sk, struct conn_state *c)
{
	if (c->wire.state == WIRE_SEALED)
		wire_finish(sk, c, WIRE_END_FINISHED);
}

/* The bytes of the client's stream read so far, up to `copied` (tcp copied_seq), are still
 * its handshake (estimate.bpf.h): the capture is not over, and after the server's TLS 1.3
 * encrypted flight, no more than the client's change_cipher_spec and Finished were read. */
static __always_inline bool wire_client_handshake(const struct conn_state *c, __u32 copied)
{
	if (c->wire.state == WIRE_SEALED)
		return c->wire.fin_len && copied - c->wire.rx_flight <= 6 + 5 + c->wire.fin_len;
	/* after a plaintext preamble: once the client's TLS has begun (its ClientHello) */
	if (wire_preamble(c))
		return hello_begun(c);
	/* a preamble the client began, before the server sent anything (PostgreSQL's
	 * SSLRequest): the ClientHello capture stepped over it */
	if (hello_before_tls(c, copied))
		return false;
	return c->wire.state != WIRE_DONE;
}

/* The capture ended during this send (the client having read up to `copied`): requests are
 * counted from here (requests.bpf.h). */
static __always_inline void wire_hand_over(struct conn_state *c, __u32 copied)
{
	bool tls = c->wire.flags & WIRE_F_TLS;
	/* TLS 1.2 resumption: the server's Finished went before the client's, which is still
	 * to come (change_cipher_spec, and a Finished record as long as the server's) */
	__u32 tail = c->wire.why == WIRE_END_FINISHED && copied == c->wire.rx_first ? 6 + 5 + c->wire.fin_len : 0;
	req_handshake_over(c, tls, copied, tail, copied);
}

/* Copies plaintext bytes [ptr, ptr + len) of the output to user space, within the cap. */
static __always_inline void wire_copy(const struct sock *sk, struct conn_state *c, __u64 ptr, __u32 len)
{
	for (int i = 0; i < WIRE_MAX_PLAIN / WIRE_CHUNK && len > 0; i++) {
		__u32 room = WIRE_MAX_PLAIN - c->wire.copied;
		if (room == 0 || room > WIRE_MAX_PLAIN) {
			wire_finish(sk, c, WIRE_END_CAP);
			return;
		}
		__u32 n = len < WIRE_CHUNK ? len : WIRE_CHUNK;
		if (n > room)
			n = room;
		struct wire_event *e = wire_ev(sk, c, WIRE_EV_DATA);
		if (!e)
			return;
		__u64 sz = n;
		asm volatile("" : "+r"(sz));
		if (sz > WIRE_CHUNK)
			return;
		if (bpf_probe_read_user(e->data, sz, (void *)ptr)) {
			wire_finish(sk, c, WIRE_END_UNSUPPORTED);
			return;
		}
		e->len = n;
		wire_out(e, n);
		c->wire.copied += n;
		ptr += n;
		len -= n;
	}
}

#define WIRE_NOT_TLS 255 /* internal: the output is not TLS, end silently */

/* A connection's TLS may start after a plaintext preamble: STARTTLS (SMTP, IMAP, POP3,
 * LDAP, XMPP, NNTP, FTP's AUTH TLS), PostgreSQL's SSLRequest, MySQL's SSL request. The
 * server's first TLS record begins a send of its own (it answers the client's ClientHello,
 * which follows the preamble's last exchange). Until then each send's first bytes are
 * looked at, nothing more, and nothing of them is copied; after WIRE_PREAMBLE_SENDS sends
 * that begin no TLS record the connection is taken to be plaintext. */
#define WIRE_PREAMBLE_SENDS 16

/* A preamble send's first `have` bytes (at most 5, in h): its protocol, told once from the
 * first send, and FTP from SMTP by the answer to the client's request for TLS (234). */
static __always_inline void wire_preamble_seen(struct conn_state *c, const __u8 *h, __u32 have)
{
	if (c->wire.pre) {
		if (c->wire.proto == WIRE_PROTO_SMTP && have >= 3 && h[0] == '2' && h[1] == '3' && h[2] == '4')
			c->wire.proto = WIRE_PROTO_FTP;
		return;
	}
	__u8 p = WIRE_PROTO_OTHER;
	if (have == 1 && h[0] == 'S')
		p = WIRE_PROTO_POSTGRESQL;
	else if (have >= 1 && h[0] == 0x30)
		p = WIRE_PROTO_LDAP;
	else if (have >= 5 && h[3] == 0 && h[4] == 10)
		p = WIRE_PROTO_MYSQL;
	else if (have >= 4 && h[0] == '*' && h[1] == ' ' && h[2] == 'O' && h[3] == 'K')
		p = WIRE_PROTO_IMAP;
	else if (have >= 3 && h[0] == '+' && h[1] == 'O' && h[2] == 'K')
		p = WIRE_PROTO_POP3;
	else if (have >= 3 && h[0] == '2' && h[1] == '2' && h[2] == '0')
		p = WIRE_PROTO_SMTP;
	else if (have >= 3 && h[0] == '2' && h[1] == '0' && (h[2] == '0' || h[2] == '1'))
		p = WIRE_PROTO_NNTP;
	else if (have >= 2 && h[0] == '<' && (h[1] == '?' || h[1] == 's'))
		p = WIRE_PROTO_XMPP;
	c->wire.proto = p;
}

/* Whether the first `have` bytes of a record header (at most 5) can begin the server's TLS:
 * a handshake or alert record of SSL 3.0 to TLS 1.3 (record versions 3.0-3.4). */
static __always_inline bool wire_tls_prefix(const __u8 *h, __u32 have)
{
	if (have >= 1 && h[0] != 22 && h[0] != 21)
		return false;
	if (have >= 2 && h[1] != 3)
		return false;
	return have < 3 || h[2] <= 4;
}

/* A complete record header: what it means for the capture. Returns why the capture ends
 * (WIRE_END_*, WIRE_NOT_TLS), 0 to go on. */
static __always_inline __u8 wire_header(const struct sock *sk, struct conn_state *c, const __u8 *h, __u64 body,
                                        __u32 avail)
{
	__u8 type = h[0];
	__u32 len = (__u32)h[3] << 8 | h[4];
	bool valid = type >= 20 && type <= 23 && h[1] == 3 && h[2] <= 4 && len > 0 && len <= WIRE_MAX_RECORD;

	if (!(c->wire.flags & WIRE_F_TLS)) {
		if (!valid || (type != 22 && type != 21))
			return WIRE_NOT_TLS; /* the server does not speak TLS here (wire_preamble_send) */
		c->wire.flags |= WIRE_F_TLS;
		conn_mark_tls(c); /* also for servers without handshake probes */
		/* without a selector, its process is found by this (if it is not traced yet) */
		proc_found(c->wire.tgid, c->life.port);
	} else if (!valid) {
		return WIRE_END_BAD;
	}
	c->wire.left = len;
	if (type == 23) {
		c->wire.state = WIRE_SEALED;
		/* the flight's last record ends with its Finished, and is no more than it, unless the
		 * flight shares one record: then the longest a Finished can be (a request is longer
		 * than the difference, so it is still counted) */
		c->wire.fin_len = len < TLS13_MAX_FINISHED_BODY ? len : TLS13_MAX_FINISHED_BODY;
		__u32 zero = 0;
		struct wire_event *e = bpf_map_lookup_elem(&wire_records, &zero);
		if (e && e->len < WIRE_MAX_SEALED * 5) {
			__u32 at = e->len & 63; /* < WIRE_MAX_SEALED * 5: the mask tells the verifier */
			__builtin_memcpy(e->data + at, h, 5);
			e->len = at + 5;
		}
		if (++c->wire.sealed >= WIRE_MAX_SEALED)
			c->wire.end = WIRE_END_CAP;
		return 0;
	}
	if (c->wire.state != WIRE_PLAIN)
		return 0; /* after encryption started only type 23 is expected: keep walking */
	if (type == 20) {
		c->wire.flags |= WIRE_F_CCS;
	} else if (type == 21) {
		c->wire.end = WIRE_END_ALERT;
	} else if (type == 22 && (c->wire.flags & WIRE_F_CCS)) {
		/* After change_cipher_spec: TLS 1.2's encrypted Finished ends the server's part;
		 * a TLS 1.3 ServerHello after a HelloRetryRequest (a record holding exactly one
		 * message of type 2) does not. */
		__u8 b[4] = {};
		bool hello = false;
		if (avail >= 4 && !bpf_probe_read_user(b, 4, (void *)body))
			hello = b[0] == 2 && ((__u32)b[1] << 16 | (__u32)b[2] << 8 | b[3]) + 4 == len;
		if (!hello) {
			c->wire.end = WIRE_END_FINISHED;
			c->wire.fin_len = len;
		}
	}
	return 0;
}

struct wire_walk_ctx {
	const struct sock *sk;
	struct conn_state *c;
	__u64 ptr;       /* user address of the bytes */
	__u32 n;         /* how many */
	__u32 off;       /* walked so far */
	__u32 plain_end; /* end of the plaintext-phase bytes among them */
	__u8 why;        /* the capture ends: WIRE_END_*, WIRE_NOT_TLS */
};

/* Reads the walk's bytes into wire_window when they are TLS: the connection's output is
 * TLS already, or they begin with a TLS record header (`tls_start`: the send's first bytes
 * were just seen to; a preamble's plaintext is not read past its first bytes). The
 * window's len says how many it holds, 0 if none. A function of its own: its branches leave
 * no trace in the walk's verifier states. */
static __noinline int wire_window_read(const struct conn_state *c, __u64 ptr, __u32 n, bool tls_start)
{
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_window, &zero);
	if (!e)
		return 0;
	e->len = 0;
	if (n < 5)
		return 0;
	if (!(c->wire.flags & WIRE_F_TLS) && !tls_start) {
		__u8 h[8] = {};
		if (c->wire.left || c->wire.hdr_have || bpf_probe_read_user(h, 5, (void *)ptr) ||
		    !wire_tls_prefix(h, 5))
			return 0;
	}
	__u64 len = n < WIRE_CHUNK ? n : WIRE_CHUNK;
	/* keep the compiler from folding the bound into something the verifier cannot follow */
	asm volatile("" : "+r"(len));
	if (len > WIRE_CHUNK)
		return 0;
	if (bpf_probe_read_user(e->data, len, (void *)ptr))
		return 0;
	e->len = len;
	return 0;
}

/* A record header's 5 bytes at walk offset `off` from wire_window, if it holds them. */
static __always_inline bool wire_window_header(__u32 off, __u8 *h)
{
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_window, &zero);
	if (!e || off > WIRE_CHUNK - 5 || off + 5 > e->len)
		return false;
	__builtin_memcpy(h, e->data + off, 5);
	return true;
}

/* One step of the walk: a record header, or as much of the current record's body as this
 * write holds. 1 stops. `windowed`: headers within wire_window come from it (the bpf_loop
 * walk; the bounded one, verified step by step on older kernels, reads each). */
static __always_inline long wire_step_body(struct wire_walk_ctx *w, const bool windowed)
{
	struct conn_state *c = w->c;
	__u32 off = w->off, n = w->n;

	if (off >= n)
		return 1;
	__u32 avail = n - off;
	bool plain = c->wire.state == WIRE_PLAIN;
	if (c->wire.left) {
		__u32 take = c->wire.left < avail ? c->wire.left : avail;
		c->wire.left -= take;
		w->off = off + take;
		if (plain)
			w->plain_end = w->off;
		if (!c->wire.left && c->wire.end) {
			w->why = c->wire.end;
			return 1;
		}
		return 0;
	}
	/* a record header, possibly continued from the previous write */
	__u32 have = c->wire.hdr_have, hdr_at = off;
	__u8 h[8] = {};
	if (have == 0 && avail >= 5) {
		if (!(windowed && wire_window_header(off, h)) && bpf_probe_read_user(h, 5, (void *)(w->ptr + off))) {
			w->why = WIRE_END_UNSUPPORTED;
			return 1;
		}
		off += 5;
	} else {
		for (int k = 0; k < 5; k++) {
			if (have >= 5 || off >= n)
				break;
			__u8 byte;
			if (bpf_probe_read_user(&byte, 1, (void *)(w->ptr + off))) {
				w->why = WIRE_END_UNSUPPORTED;
				return 1;
			}
			c->wire.hdr[have & 7] = byte;
			have++;
			off++;
		}
		w->off = off;
		c->wire.hdr_have = have;
		if (have < 5) {
			if (plain)
				w->plain_end = off;
			return 1;
		}
		c->wire.hdr_have = 0;
		__builtin_memcpy(h, c->wire.hdr, 5);
	}
	w->off = off;
	w->why = wire_header(w->sk, c, h, w->ptr + off, n - off);
	if (plain)
		w->plain_end = c->wire.state == WIRE_PLAIN ? off : hdr_at;
	return w->why ? 1 : 0;
}

/* A step of the bpf_loop walk (verified once, whatever the number of steps). */
static long wire_step(__u32 i, void *ctx)
{
	return wire_step_body(ctx, true);
}

/* A step of the bounded walk: the walk before the window, a function of its own called
 * once per step of the unrolled loop, as Linux 5.10's verifier passes it (a step inlined in
 * a loop took 6.1's and 6.12's minutes to verify). */
static __noinline long wire_step_bounded(__u32 i, void *ctx)
{
	return wire_step_body(ctx, false);
}

/* Before a walk: no encrypted record header gathered yet (wire_records). */
static __always_inline void wire_records_start(void)
{
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_records, &zero);
	if (e)
		e->len = 0;
}

/* After a walk: the encrypted record headers it gathered, in one event. */
static __always_inline void wire_records_send(const struct conn_state *c)
{
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_records, &zero);
	if (!e || !e->len)
		return;
	__u32 len = e->len & 63;
	wire_ev_head(e, c, WIRE_EV_RECORD, len);
	wire_out(e, len);
}

/* The plaintext-phase bytes walked, sent from wire_window as one DATA event when it holds
 * them all and they fit the connection's cap; false if not (wire_copy reads them). */
static __always_inline bool wire_window_copy(struct wire_walk_ctx *w)
{
	struct conn_state *c = w->c;
	__u32 n = w->plain_end;
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_window, &zero);
	if (!e || n > e->len || n > WIRE_MAX_PLAIN - c->wire.copied || c->wire.copied > WIRE_MAX_PLAIN)
		return false;
	wire_ev_head(e, c, WIRE_EV_DATA, n);
	wire_out(e, n);
	c->wire.copied += n;
	return true;
}

/* After a walk: copy the plaintext-phase bytes walked, send the encrypted record headers
 * it saw, end the capture if the walk did. */
static __always_inline void wire_walked(struct wire_walk_ctx *w, bool plain_start, const bool windowed)
{
	struct conn_state *c = w->c;
	if (!w->why && w->off < w->n)
		w->why = WIRE_END_CAP; /* more records in one write than walked */
	if (plain_start && w->plain_end && (c->wire.flags & WIRE_F_TLS) && !(windowed && wire_window_copy(w)))
		wire_copy(w->sk, c, w->ptr, w->plain_end);
	wire_records_send(c);
	if (w->why)
		wire_finish(w->sk, c, w->why == WIRE_NOT_TLS ? 0 : w->why);
}

/*
 * Walks n bytes of output at user address ptr, record header by record body. The bytes
 * written while the capture is in its plaintext phase are copied; encrypted records give
 * their headers only; the walk stops where the capture ends. With bpf_loop (5.17+) the
 * step is verified once; without, the kernel verifies every step of a bounded loop.
 */
static __noinline int wire_walk_loop(const struct sock *sk, struct conn_state *c, __u64 ptr, __u32 n, bool tls_start)
{
	struct wire_walk_ctx w = { .sk = sk, .c = c, .ptr = ptr, .n = n };
	bool plain_start = c->wire.state == WIRE_PLAIN;

	wire_window_read(c, ptr, n, tls_start);
	wire_records_start();
	bpf_loop(WIRE_STEPS, wire_step, &w, 0);
	wire_walked(&w, plain_start, true);
	return 0;
}

static __noinline int wire_walk_bounded(const struct sock *sk, struct conn_state *c, __u64 ptr, __u32 n)
{
	struct wire_walk_ctx w = { .sk = sk, .c = c, .ptr = ptr, .n = n };
	bool plain_start = c->wire.state == WIRE_PLAIN;

	wire_records_start();
	for (__u32 i = 0; i < WIRE_STEPS; i++) {
		if (wire_step_bounded(i, &w))
			break;
	}
	wire_walked(&w, plain_start, false);
	return 0;
}

/* `tls_start`: the bytes at ptr were just seen to begin a TLS record (wire_preamble_send). */
static __always_inline void wire_walk(const struct sock *sk, struct conn_state *c, __u64 ptr, __u64 n,
                                      const bool bounded, bool tls_start)
{
	__u32 len = n > 0xffffffff ? 0xffffffff : n;
	if (bounded)
		wire_walk_bounded(sk, c, ptr, len);
	else
		wire_walk_loop(sk, c, ptr, len, tls_start);
}

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
