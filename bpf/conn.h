/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Connections accepted on the listening ports of traced processes (conn.bpf.h: lifecycle,
 * who closed, TIME_WAIT; requests.bpf.h: requests per connection): types shared with the
 * agent (agent/src/bpf/conn.rs mirrors them; the layout test checks them).
 */
#ifndef TLSPROF_CONN_H
#define TLSPROF_CONN_H

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
	__u32 flags;     /* CONN_PORT_* */
	__u32 slot;      /* 1 + its live exchange counter in conn_exchanges; 0: none */
	__u64 accepted;  /* connections accepted here since the agent added the port */
};

/* Who ended a connection. */
#define CONN_BY_SERVER 1 /* the server sent the first FIN, and no reset followed */
#define CONN_BY_CLIENT 2 /* the client sent the first FIN */
#define CONN_BY_RESET 3  /* a reset before any FIN or after the server's, or an abort */

/* conn_event.time_wait: did the server's side enter TIME_WAIT? */
#define CONN_TW_NO 0
#define CONN_TW_YES 1   /* FIN received after ours (FIN_WAIT2->CLOSE with the peer's FIN, or CLOSING->CLOSE) */
#define CONN_TW_MAYBE 2 /* the closed socket was handed to a FIN_WAIT2 timewait socket before the
			 * peer's FIN came: the agent watches that socket through sock_diag */

/* conn_state.dir: the direction application data last moved */
#define CONN_DIR_NONE 0
#define CONN_DIR_IN 1
#define CONN_DIR_OUT 2

/* Value of req_ctl[0], set by the agent (requests.bpf.h). */
struct req_ctl {
	__u32 wire_counts; /* wire_send is attached: requests and the end of TLS 1.3 handshakes
			    * are seen from the server's sends, not from its reads */
	__u32 read_links;  /* --exact: a handshake call's reads mark its connection as TLS and
			    * link the call to it (the default mode leaves that to the sends) */
	__u32 reads;	   /* something needs the read side (requests.bpf.h): read_links, no
			    * wire_counts, a traced process whose handshakes the kernel estimates,
			    * or one with Go probes; else every read returns at once */
	__u32 pad;
};

/* Socket-local state of a connection accepted on a watched port (BPF_MAP_TYPE_SK_STORAGE). */
struct conn_state {
	__u64 start_ns;   /* handshake completed (SYN_RECV -> ESTABLISHED) */
	__u32 netns;
	__u16 port;       /* local (listening) port */
	__u8 first_fin;   /* CONN_BY_SERVER / CONN_BY_CLIENT, 0 before any FIN */
	__u8 reset;       /* a reset was sent or received */
	__u32 requests;   /* application data exchanges: client data, then server data */
	__u8 tls;         /* a TLS handshake call read or wrote this socket */
	__u8 dir;         /* CONN_DIR_* */
	__u16 slot;       /* its port's conn_port_stats.slot at accept */
	/* the server's handshake output, as far as it is looked at (wire.h) */
	__u32 wire_seq;     /* output stream position (tcp write_seq) looked at so far */
	__u32 wire_left;    /* body bytes of the current record not yet sent */
	__u32 wire_tgid;    /* the process that wrote it */
	__u16 wire_copied;  /* plaintext bytes copied to user space */
	__u8 wire;          /* WIRE_IDLE/PLAIN/SEALED/DONE */
	__u8 wire_flags;    /* WIRE_F_* */
	__u8 wire_hdr[8];   /* a record header split across writes (5 bytes used) */
	__u8 wire_hdr_have; /* bytes of it so far */
	__u8 wire_sealed;   /* encrypted record headers sent */
	__u8 wire_end;      /* WIRE_END_* to report when the current record ends, 0 if none */
	__u8 wire_why;      /* why the capture ended (WIRE_END_*; 0: not TLS) */
	__u16 fin_len;      /* body length of the server's latest Finished-sized record: the
			     * client's Finished record has the same (same suite, same hash) */
	__u8 pad2[2];
	/*
	 * Requests without a receive hook: positions in the client's byte stream as the server
	 * has read it (tcp copied_seq), taken at the server's sends (tcp_sendmsg_locked).
	 */
	__u32 rx_first;  /* at the server's first send (its first flight answers the ClientHello) */
	__u32 rx_flight; /* at its latest send while the handshake capture runs */
	__u32 rx_mark;   /* requests are counted up to here */
	__u32 rx_tail;   /* bytes past rx_mark that are still the client's handshake (its
			  * change_cipher_spec and Finished, read after the capture ended) */
};

/* A connection on a watched port ended (its full socket reached TCP_CLOSE). */
struct conn_event {
	__u64 duration_ns; /* ESTABLISHED -> CLOSE */
	__u8 saddr[16];    /* local address: IPv4 in the first 4 bytes, or IPv6 */
	__u8 daddr[16];    /* remote address */
	__u32 netns;
	__u32 requests;
	__u16 port;        /* local port, host byte order */
	__u16 dport;       /* remote port, host byte order */
	__u16 family;      /* AF_INET or AF_INET6 */
	__u8 closed_by;    /* CONN_BY_* */
	__u8 time_wait;    /* CONN_TW_* */
	__u8 tls;
	__u8 pad[7];
};

#endif
