/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Resets: a connection that received or sent one is marked (conn_life.reset), and its close
 * is then said to be by reset (conn.bpf.h, conn_closed). Part of conn.bpf.h's feature.
 */
#ifndef TLSPROF_CONN_RESETS_BPF_H
#define TLSPROF_CONN_RESETS_BPF_H

static __always_inline void conn_reset(const struct sock *sk)
{
	struct conn_state *c = conn_of(sk);
	if (c)
		c->life.reset = 1;
}

/* The resets capability: typed tracepoints, or raw ones (hash mode). tcp_send_reset also
 * fires for resets answering packets that match no full socket: then sk is NULL or a
 * timewait/request socket, which has no state. */
SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(conn_rcv_reset, const struct sock *sk)
{
	conn_reset(sk);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(conn_send_reset, const struct sock *sk)
{
	conn_reset(sk);
	return 0;
}

SEC("raw_tp/tcp_receive_reset")
int conn_rcv_reset_raw(void *ctx)
{
	conn_reset((const struct sock *)RAW_ARG(ctx, 0));
	return 0;
}

SEC("raw_tp/tcp_send_reset")
int conn_send_reset_raw(void *ctx)
{
	conn_reset((const struct sock *)RAW_ARG(ctx, 0));
	return 0;
}

#endif
