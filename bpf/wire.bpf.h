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

#endif
