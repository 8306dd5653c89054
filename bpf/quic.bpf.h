/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * QUIC handshakes (what is sent and why: quic.h; user side: agent/src/wire/quic/, ports:
 * agent/src/agent/ports.rs, the egress program's cgroups: agent/src/bpf/hello_cgroups.rs).
 * Runs in packet programs of its own on the cgroups of the traced processes that have a QUIC
 * port: the client's datagrams in quic_ingress, the server's in quic_egress below, for UDP
 * sockets whose local port a traced process has bound (conn_port_nums' CONN_NUM_UDP, kept by
 * the agent).
 * A datagram that does not start with a long-header packet of QUIC v1 or v2 returns after
 * one byte's load: a 1-RTT datagram, DNS, anything else.
 */
#ifndef TLSPROF_QUIC_BPF_H
#define TLSPROF_QUIC_BPF_H

#include "quic.h"

#define QUIC_V1 0x00000001
#define QUIC_V2 0x6b3343cf

/* The connections followed, from the client's first Initial; the least recently used make
 * room (a connection is done after a handful of datagrams). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, QUIC_FLOWS);
	__type(key, struct quic_key);
	__type(value, struct quic_flow);
} quic_flows SEC(".maps");

/* A UDP port bound by a traced process (conn.bpf.h conn_port_nums, kept by the agent). */
static __always_inline bool quic_port_on(__u32 port)
{
	return conn_port_kinds(port) & CONN_NUM_UDP;
}

/* A packet's type, the same for v1 and v2 (RFC 9369 renumbers them). */
#define QT_INITIAL 0
#define QT_ZERO_RTT 1
#define QT_HANDSHAKE 2
#define QT_RETRY 3
#define QT_SHORT 4

/* A datagram: where its UDP payload is, and its connection's key but for the server's port. */
struct quic_dgram {
	__u32 off;
	__u32 end;
	struct quic_key k;
};

/* The UDP datagram of an IPv4 or IPv6 packet (no IPv6 extension headers); `in`: the client
 * sent it (its address is the source). */
static __always_inline bool quic_dgram(struct __sk_buff *skb, bool in, struct quic_dgram *d)
{
	__u32 uh;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 h[20];
		if (bpf_skb_load_bytes(skb, 0, h, sizeof(h)) || h[9] != IPPROTO_UDP)
			return false;
		uh = (h[0] & 0xf) * 4;
		__builtin_memcpy(d->k.addr, in ? &h[12] : &h[16], 4);
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 h[40];
		if (bpf_skb_load_bytes(skb, 0, h, sizeof(h)) || h[6] != IPPROTO_UDP)
			return false;
		uh = 40;
		__builtin_memcpy(d->k.addr, in ? &h[8] : &h[24], 16);
	} else {
		return false;
	}
	__u8 u[4];
	if (bpf_skb_load_bytes(skb, uh, u, sizeof(u)))
		return false;
	__builtin_memcpy(&d->k.rport, in ? &u[0] : &u[2], 2);
	d->off = uh + 8;
	d->end = skb->len;
	return d->off < d->end;
}

/* A variable-length integer (RFC 9000 §16) at the start of b; its size in *n. */
static __always_inline __u64 quic_varint(const __u8 *b, __u32 *n)
{
	__u32 len = 1u << (b[0] >> 6);
	__u64 v = b[0] & 0x3f;
#pragma unroll
	for (int i = 1; i < 8; i++)
		if (i < len)
			v = v << 8 | b[i];
	*n = len;
	return v;
}

/* A packet of a datagram: its type and where it ends (a Retry: the datagram's end). */
struct quic_pkt {
	__u32 end;
	__u32 dcid;   /* where its Destination Connection ID starts (long headers) */
	__u32 scid;   /* ... its Source Connection ID */
	__u16 length; /* its Length field */
	__u8 type;    /* QT_* */
	__u8 dcid_len;
	__u8 scid_len;
};

/* The packet at `at`; false if it is not one of QUIC v1 or v2 or its lengths do not add up. */
static __always_inline bool quic_packet(struct __sk_buff *skb, __u32 at, __u32 end, struct quic_pkt *p)
{
	__u8 h[6];
	if (at + sizeof(h) > end || bpf_skb_load_bytes(skb, at, h, sizeof(h)))
		return false;
	if (!(h[0] & 0x80)) {
		/* a 1-RTT packet has its fixed bit set; zeros after the last packet are padding */
		p->type = QT_SHORT;
		return h[0] & 0x40;
	}
	__u32 ver = (__u32)h[1] << 24 | (__u32)h[2] << 16 | (__u32)h[3] << 8 | h[4];
	__u8 t = (h[0] >> 4) & 3;
	if (ver == QUIC_V1)
		p->type = t;
	else if (ver == QUIC_V2)
		p->type = (t + 3) & 3; /* v2: Initial 1, 0-RTT 2, Handshake 3, Retry 0 */
	else
		return false;
	__u32 o = at + 5;
	if (h[5] > 20)
		return false;
	p->dcid = o + 1;
	p->dcid_len = h[5];
	o += 1 + h[5];
	__u8 scid;
	if (bpf_skb_load_bytes(skb, o, &scid, 1) || scid > 20)
		return false;
	p->scid = o + 1;
	p->scid_len = scid;
	o += 1 + scid;
	if (p->type == QT_RETRY) {
		p->end = end;
		p->length = 0;
		return true;
	}
	__u8 v[8];
	__u32 n;
	if (p->type == QT_INITIAL) {
		if (bpf_skb_load_bytes(skb, o, v, sizeof(v)))
			return false;
		__u64 token = quic_varint(v, &n);
		if (token > 2048)
			return false;
		o += n + (__u32)token;
	}
	if (bpf_skb_load_bytes(skb, o, v, sizeof(v)))
		return false;
	__u64 len = quic_varint(v, &n);
	if (len > 0xffff || o + n + len > end)
		return false;
	p->end = o + n + (__u32)len;
	p->length = len;
	return true;
}

/* The client's connection ID (`len` bytes at `at`) into the key: its length and first 8
 * bytes. A long header is followed by at least 8 more bytes (a token or Length field, a
 * packet number, an AEAD tag), so 8 can be loaded whatever the length. */
static __always_inline bool quic_key_cid(struct __sk_buff *skb, __u32 at, __u8 len, struct quic_key *k)
{
	if (bpf_skb_load_bytes(skb, at, k->cid, sizeof(k->cid)))
		return false;
#pragma unroll
	for (int i = 0; i < 8; i++)
		if (i >= len)
			k->cid[i] = 0;
	k->cid_len = len;
	return true;
}

/* Sends a datagram's Initial packet (bytes [from, from + n) of the packet; none if n is 0). */
static __always_inline void quic_emit(struct __sk_buff *skb, __u64 id, __u16 port, __u8 flags, __u32 from, __u32 n,
                                      __u16 hs_len, __u32 dgram)
{
	struct wire_event *e = wire_event_new();
	if (!e) {
		stat_inc(STAT_WIRE_EVENTS_LOST);
		return;
	}
	struct quic_head *h = (struct quic_head *)e->data;
	__builtin_memset(h, 0, sizeof(*h));
	h->ts = bpf_ktime_get_ns();
	h->hs_len = hs_len;
	h->dgram = dgram > 0xffff ? 0xffff : dgram;
	__u64 sz = n > QUIC_MAX_PACKET ? QUIC_MAX_PACKET : n;
	asm volatile("" : "+r"(sz));
	if (sz > QUIC_MAX_PACKET || (sz && bpf_skb_load_bytes(skb, from, e->data + QUIC_HEAD, sz))) {
		bpf_ringbuf_discard(e, 0);
		return;
	}
	e->conn_id = id;
	e->tgid = 0; /* a packet's: the agent takes the port's owner */
	e->netns = 0;
	e->port = port;
	e->kind = WIRE_EV_QUIC;
	e->flags = flags;
	e->len = QUIC_HEAD + sz;
	e->offset = 0;
	wire_event_send(e);
}

/* A datagram that reached a traced process's UDP socket bound to `port`. */
static __always_inline void quic_in(struct __sk_buff *skb, __u16 port)
{
	struct quic_dgram d = {};
	if (!quic_dgram(skb, true, &d))
		return;
	__u8 b0;
	if (bpf_skb_load_bytes(skb, d.off, &b0, 1) || !(b0 & 0x80))
		return; /* 1-RTT, or not QUIC */
	d.k.lport = port;
	__u32 at = d.off, ini = 0, ini_end = 0;
	__u16 hs_len = 0;
	bool done = false;
	for (int i = 0; i < QUIC_WALK; i++) {
		struct quic_pkt p = {};
		if (at >= d.end || !quic_packet(skb, at, d.end, &p))
			break;
		/* the client's connection ID, from its datagram's first packet */
		if (i == 0 && (p.type == QT_SHORT || !quic_key_cid(skb, p.scid, p.scid_len, &d.k)))
			return;
		if (p.type == QT_SHORT || (p.type == QT_HANDSHAKE && p.length >= QUIC_MIN_FINISHED)) {
			done = true;
			hs_len = p.type == QT_HANDSHAKE ? p.length : 0;
			break;
		}
		if (p.type == QT_INITIAL && i == 0) {
			ini = at;
			ini_end = p.end;
		}
		if (p.type == QT_RETRY)
			break;
		at = p.end;
	}
	if (!ini_end && !done)
		return;
	struct quic_flow *f = bpf_map_lookup_elem(&quic_flows, &d.k);
	if (!f) {
		if (!ini_end || d.end - d.off < QUIC_MIN_INITIAL)
			return; /* a connection whose start was not seen, or no start at all */
		struct quic_flow nf = { .id = conn_new_id() };
		if (!nf.id || bpf_map_update_elem(&quic_flows, &d.k, &nf, BPF_NOEXIST))
			return;
		f = bpf_map_lookup_elem(&quic_flows, &d.k);
		if (!f)
			return;
	}
	if (f->done)
		return;
	bool send = ini_end && f->client < QUIC_MAX_CLIENT;
	if (send)
		f->client++;
	if (done)
		f->done = 1;
	if (send || done)
		quic_emit(skb, f->id, port, QUIC_F_CLIENT | (done ? QUIC_F_DONE : 0), ini, send ? ini_end - ini : 0,
		          hs_len, d.end - d.off);
}

/* A datagram a traced process sends from its UDP socket bound to `port`: the server's first
 * Initial packets, or its Retry. */
static __always_inline void quic_out(struct __sk_buff *skb, __u16 port)
{
	struct quic_dgram d = {};
	if (!quic_dgram(skb, false, &d))
		return;
	__u8 b0;
	if (bpf_skb_load_bytes(skb, d.off, &b0, 1) || !(b0 & 0x80))
		return;
	struct quic_pkt p = {};
	if (!quic_packet(skb, d.off, d.end, &p) || (p.type != QT_INITIAL && p.type != QT_RETRY) ||
	    !quic_key_cid(skb, p.dcid, p.dcid_len, &d.k))
		return;
	d.k.lport = port;
	struct quic_flow *f = bpf_map_lookup_elem(&quic_flows, &d.k);
	if (!f || f->done)
		return;
	if (p.type == QT_RETRY) {
		quic_emit(skb, f->id, port, QUIC_F_RETRY, 0, 0, 0, d.end - d.off);
		return;
	}
	if (f->server >= QUIC_MAX_SERVER)
		return;
	f->server++;
	quic_emit(skb, f->id, port, 0, d.off, p.end - d.off, 0, d.end - d.off);
}

/* The local port of the packet's socket when it is a UDP socket a traced process bound
 * (quic_port_on), else 0: a packet of any other socket costs one array load. */
static __always_inline __u16 quic_socket_port(struct __sk_buff *skb)
{
	struct bpf_sock *bs = skb->sk;
	if (!bs || !quic_port_on(bs->src_port))
		return 0;
	__u16 port = bs->src_port;
	bs = bpf_sk_fullsock(bs);
	return bs && bs->protocol == IPPROTO_UDP ? port : 0;
}

/* The client's datagrams: a program of its own beside hello_skb.bpf.h's (attached to the same
 * cgroups, only those with a QUIC port), so that neither's verification grows with the other's
 * and a TCP packet never pays for QUIC. */
SEC("cgroup_skb/ingress")
int quic_ingress(struct __sk_buff *skb)
{
	__u16 port = quic_socket_port(skb);
	if (port)
		quic_in(skb, port);
	return 1;
}

SEC("cgroup_skb/egress")
int quic_egress(struct __sk_buff *skb)
{
	__u16 port = quic_socket_port(skb);
	if (port)
		quic_out(skb, port);
	return 1;
}

#endif
