/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Connections accepted on the listening ports of traced processes (conn.bpf.h: lifecycle,
 * who closed, TIME_WAIT; requests.bpf.h: requests per connection): types shared with the
 * agent (the agent's Rust types are generated from it: agent/src/bpf/abi.rs).
 */
#ifndef TLSPROF_CONN_H
#define TLSPROF_CONN_H

#include "hello.h"
#include "requests.h"
#include "wire.h"

/* conn_port_stats.flags */
#define CONN_PORT_LISTEN 1 /* a traced process listens here (set by the agent) */
#define CONN_PORT_TLS 2    /* a connection accepted here carries TLS (set by the kernel) */

/*
 * Room in conn_ports: every port of one namespace (a process may listen on thousands). The
 * agent watches no more (agent/src/agent/ports.rs) and counts a port it could not add in
 * tlsprof_table_full_total{table="watched_ports"}.
 */
#define CONN_PORTS_ENTRIES 65536

/*
 * Live exchange counters (conn_exchanges, a per-CPU array: no shared cache line between a
 * server's workers): one slot per watched port, given by the agent in conn_port_stats.slot
 * and copied into each connection's state at accept. A port beyond them has no live count
 * (tlsprof_table_full_total{table="exchange_slots"}); its connections' counts still come
 * at their end.
 */
#define CONN_EXCHANGE_SLOTS 4096

/* A listening port of a traced process (key of conn_ports, kept by the agent). */
struct conn_port {
	__u32 netns;
	__u16 port; /* host byte order */
	__u16 pad;
};

/* Value of conn_ports. */
struct conn_port_stats {
	__u32 flags;                    /* CONN_PORT_* */
	__u32 slot;                     /* 1 + its live exchange counter in conn_exchanges; 0: none */
	__u64 accepted;                 /* connections accepted here since the agent added the port */
	__u64 untls[HELLO_UNTLS_KINDS]; /* ... that closed before their server sent TLS
			  * (conn_life.tls unset), by what they were (hello.h HELLO_UNTLS_*): on a
			  * port that carries TLS (CONN_PORT_TLS, now or later), connections that
			  * never offered TLS, or handshakes that failed before the server answered */
};

/* Who ended a connection. */
enum conn_by {
	CONN_BY_SERVER = 1,  /* the server sent the first FIN, and no reset followed */
	CONN_BY_CLIENT = 2,  /* the client sent the first FIN */
	CONN_BY_RESET = 3,   /* a reset before any FIN or after the server's, or an abort */
	CONN_BY_UNKNOWN = 4, /* never sent by the kernel: a connection the agent found gone
				     * whose close no program on the hook took (conns/unseen.rs) */
};

/* conn_event.time_wait: did the server's side enter TIME_WAIT? */
enum conn_tw {
	CONN_TW_NO = 0,
	CONN_TW_YES = 1,   /* FIN received after ours (FIN_WAIT2->CLOSE with the peer's FIN, or CLOSING->CLOSE) */
	CONN_TW_MAYBE = 2, /* the closed socket was handed to a FIN_WAIT2 timewait socket before the
				 * peer's FIN came: the agent watches that socket through sock_diag */
};

/* Who the connection is, and how it ends: conn.bpf.h's part of its state. */
struct conn_life {
	__u64 id;       /* the connection's identity, in every event about it: minted once by
			   * conn_new_id, at accept or at its first data on the listening
			   * socket (conn_early), never 0 */
	__u64 start_ns; /* handshake completed (SYN_RECV -> ESTABLISHED) */
	__u32 netns;
	__u16 port;     /* local (listening) port */
	__u8 first_fin; /* CONN_BY_SERVER / CONN_BY_CLIENT, 0 before any FIN */
	__u8 reset;     /* a reset was sent or received */
	__u8 tls;       /* a TLS handshake call read or wrote this socket, or it sent TLS records */
	__u8 late;      /* taken on after the client's first bytes were read (conn_adopt): the
			   * kernel estimate cannot time its handshake */
	__u8 adopted;   /* taken on at its process's first read or send (conn_adopt), not at
			   * accept: in no port's accepted or exchange count */
	__u8 pad;
	__u32 states; /* the TCP states it entered whose change a program on the hook took
			   * (CONN_STATE_BIT; conn_state_take) */
};

/* A TCP state's bit in conn_life.states */
#define CONN_STATE_BIT(s) (1U << ((s)&31))

/*
 * Socket-local state of a connection accepted on a watched port (conn.bpf.h keeps it in
 * BPF_MAP_TYPE_SK_STORAGE, or a hash): one part per feature that follows connections, each
 * defined in its feature's header and written by that feature only (bpf/iface.h lists what
 * one feature asks of another's).
 */
struct conn_state {
	/* req and wire first: a keep-alive request's send reads and writes only them, which
	 * then share the cache line of the storage's own header (the kernel aligns it) */
	struct req_conn req;     /* requests.bpf.h: requests counted (requests.h) */
	struct wire_conn wire;   /* wire.bpf.h: the server's handshake output (wire.h) */
	struct conn_life life;   /* conn.bpf.h: identity, lifecycle, who closed */
	struct hello_conn hello; /* hello.bpf.h: the client's ClientHello (hello.h) */
};

/* A connection on a watched port ended (its full socket reached TCP_CLOSE). */
struct conn_event {
	__u64 conn_id;     /* conn_life.id */
	__u64 duration_ns; /* ESTABLISHED -> CLOSE */
	__u64 start_ns;    /* conn_life.start_ns: the agent reconciles a port's accepted count
			    * with its ends and live connections by it (conns/unseen.rs) */
	__u8 saddr[16];    /* local address: IPv4 in the first 4 bytes, or IPv6 */
	__u8 daddr[16];    /* remote address */
	__u32 netns;
	__u32 requests;
	__u16 port;     /* local port, host byte order */
	__u16 dport;    /* remote port, host byte order */
	__u16 family;   /* AF_INET or AF_INET6 */
	__u8 closed_by; /* CONN_BY_* */
	__u8 time_wait; /* CONN_TW_* */
	__u8 tls;
	__u8 adopted; /* conn_life.adopted: the agent counts it, and its requests, on its port
			    * at close */
	__u8 pad[6];
};

/* conn_port_nums values (bits): a TCP port watched, a UDP port watched (QUIC) */
#define CONN_NUM_TCP 1
#define CONN_NUM_UDP 2

#endif
