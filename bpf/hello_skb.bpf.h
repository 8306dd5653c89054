/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The ClientHello capture from the client's packets (the walk and the events:
 * hello.bpf.h; user side: agent/src/bpf/hello_cgroups.rs attaches it): a cgroup_skb
 * ingress program, attached by the agent to the cgroup of each traced process, so it runs
 * only for packets that reach those processes' sockets, in the softirq that delivers them,
 * before the server reads them. A connection's packets are followed by TCP sequence
 * number from the stream's start (hello_conn.start). The program returns after one array
 * load for a socket whose local port is not watched (the clients' sockets of the same
 * cgroup, a proxy's upstream connections), and for the others once the client has sent
 * HELLO_GATE bytes (the socket's byte count) or its ClientHello is complete (its state).
 *
 * This is the capture's first hook: where it serves, the per-read hooks of hello.bpf.h are
 * not attached (those run at every socket read of the machine). A packet out of order ends
 * the capture (HELLO_GAP: the kernel queues it and the packets before it later without
 * passing them here again).
 *
 * A connection whose first data completes its TCP handshake (the server listens with
 * TCP_DEFER_ACCEPT, as Apache httpd does by default and nginx with `deferred`; or the
 * client sent its ACK with its first data) has that packet pass here on the listening
 * socket, before the connection's socket exists: its bytes are walked and sent at once,
 * under an identity taken now, and the walk's state waits in this CPU's slot
 * (hello_early), from which the connection's accept, next in the same softirq on the same
 * CPU, takes both (conn.bpf.h asks hello_early_take).
 */
#ifndef TLSPROF_HELLO_SKB_BPF_H
#define TLSPROF_HELLO_SKB_BPF_H

/* A connection's first packet of data, seen on its listening socket (one per CPU). */
struct hello_early {
	struct conn_state c; /* life (id, netns, port) and hello; the rest unused */
	__u32 seq;           /* the packet's first byte: the stream's start */
	__u16 rport;         /* the client's port, network order */
	__u8 valid;
	__u8 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hello_early);
} hello_early SEC(".maps");

/* conn.bpf.h, at accept: the identity and ClientHello state of a connection whose first
 * data this CPU walked on its listening socket a moment ago, else 0. */
static __always_inline __u64 hello_early_take(const struct sock *sk, __u32 start, struct hello_conn *h)
{
	__u32 zero = 0;
	struct hello_early *e = bpf_map_lookup_elem(&hello_early, &zero);
	if (!e || !e->valid)
		return 0;
	e->valid = 0;
	if (e->seq != start || e->rport != BPF_CORE_READ(sk, __sk_common.skc_dport))
		return 0;
	__builtin_memcpy(h, &e->c.hello, sizeof(*h));
	return e->c.life.id;
}

/* A TCP segment's place in the packet. */
struct hello_seg {
	__u32 seq;
	__u32 off; /* its payload's offset in the packet */
	__u32 len; /* payload bytes */
	__u16 sport;
	__u8 flags; /* SYN 0x02, ACK 0x10 */
};

/* The segment of an IPv4 or IPv6 packet (no IPv6 extension headers); false otherwise. The
 * program sees the packet from its network header. */
static __always_inline bool hello_segment(struct __sk_buff *skb, struct hello_seg *s)
{
	__u32 th;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		__u8 vihl, proto;
		if (bpf_skb_load_bytes(skb, 0, &vihl, 1) || bpf_skb_load_bytes(skb, 9, &proto, 1) ||
		    proto != IPPROTO_TCP)
			return false;
		th = (vihl & 0xf) * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		__u8 next;
		if (bpf_skb_load_bytes(skb, 6, &next, 1) || next != IPPROTO_TCP)
			return false;
		th = 40;
	} else {
		return false;
	}
	__u8 t[14];
	if (bpf_skb_load_bytes(skb, th, t, sizeof(t)))
		return false;
	s->sport = (__u16)t[1] << 8 | t[0]; /* network order, as stored */
	s->seq = (__u32)t[4] << 24 | (__u32)t[5] << 16 | (__u32)t[6] << 8 | t[7];
	s->off = th + (t[12] >> 4) * 4;
	s->flags = t[13];
	s->len = skb->len > s->off ? skb->len - s->off : 0;
	return true;
}

/* The first data of a connection, on its listening socket (see above). */
static __always_inline void hello_on_listener(struct __sk_buff *skb, const struct sock *sk)
{
	struct hello_seg s;
	if (!hello_segment(skb, &s) || !s.len || (s.flags & 0x02) || !(s.flags & 0x10))
		return;
	__u32 zero = 0;
	struct hello_early *e = bpf_map_lookup_elem(&hello_early, &zero);
	if (!e || !conn_early(sk, &e->c.life))
		return;
	__builtin_memset(&e->c.hello, 0, sizeof(e->c.hello));
	e->seq = s.seq;
	e->rport = s.sport;
	e->valid = 1;
	hello_accepted(&e->c.hello, s.seq);
	hello_bytes(&e->c, skb, true, s.seq, s.len, s.off);
}

SEC("cgroup_skb/ingress")
int hello_ingress(struct __sk_buff *skb)
{
	struct bpf_sock *bs = skb->sk;
	if (!bs || !conn_port_maybe(bs->src_port))
		return 1; /* a socket whose local port no traced process listens on */
	struct tcp_sock *tp = bpf_skc_to_tcp_sock(bs);
	if (!tp)
		return 1;
	const struct sock *sk = (const struct sock *)tp;
	if (tp->inet_conn.icsk_inet.sk.__sk_common.skc_state == TCP_LISTEN) {
		hello_on_listener(skb, sk);
		return 1;
	}
	if (tp->bytes_received >= HELLO_GATE)
		return 1;
	struct conn_state *c = conn_of(sk);
	if (!c || !hello_following(c))
		return 1;
	struct hello_seg s;
	if (hello_segment(skb, &s) && s.len && !(s.flags & 0x02))
		hello_bytes(c, skb, true, s.seq, s.len, s.off);
	return 1;
}

#endif
