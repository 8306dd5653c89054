/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Wire capture, the walk (wire.bpf.h is the capture's state and events): a send's bytes
 * walked record by record, the plaintext-phase bytes copied to user space and the
 * encrypted record headers gathered, with bpf_loop where the kernel has it and a bounded
 * loop before.
 */
#ifndef TLSPROF_WIRE_WALK_BPF_H
#define TLSPROF_WIRE_WALK_BPF_H

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

#endif
