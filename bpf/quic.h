/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * QUIC handshakes on the traced processes' UDP sockets, as quic.bpf.h sends them to the agent
 * (the agent's Rust types are generated from it, agent/src/bpf/abi.rs; the reading:
 * agent/src/wire/quic/).
 *
 * A QUIC connection's Initial packets are protected with keys any observer derives from the
 * client's Destination Connection ID (RFC 9001 §5.2): they carry the ClientHello and the
 * ServerHello. Of each connection (the client's address and port, the server's port) the
 * kernel sends the agent the Initial packet at the head of the client's first QUIC_MAX_CLIENT
 * datagrams and of the server's first QUIC_MAX_SERVER, and marks the client's first datagram
 * that carries a Handshake packet (its Finished, or its refusal: the handshake is over on its
 * side; a shorter one, an ACK or its refusal, does not end it) or a 1-RTT packet. Only Initial packets' bytes leave the kernel: of Handshake, 0-RTT
 * and 1-RTT packets nothing but their type and length is looked at, and the agent never holds
 * a key to them. Short-header (1-RTT) datagrams cost one byte's load.
 *
 * The bytes go on the wire_events ring buffer (wire.h) as WIRE_EV_QUIC: data[0..16] is a
 * struct quic_head, data[16..len] the Initial packet (none if the datagram's first packet is
 * not one).
 */
#ifndef TLSPROF_QUIC_H
#define TLSPROF_QUIC_H

/* wire_event.flags of WIRE_EV_QUIC */
#define QUIC_F_CLIENT 0x01 /* the client's datagram (else the server's) */
#define QUIC_F_DONE \
	0x02              /* the client's first datagram with a Handshake packet that can
			    * hold its Finished, or with a 1-RTT packet */
#define QUIC_F_RETRY 0x04 /* the server answered with a Retry packet */

#define QUIC_MAX_CLIENT \
	4                                  /* client datagrams with an Initial sent per connection, at most
			     * (a ClientHello with a post-quantum key share takes two) */
#define QUIC_MAX_SERVER 2                  /* server datagrams with an Initial sent per connection, at most */
#define QUIC_HEAD 16                       /* sizeof(struct quic_head) */
#define QUIC_MAX_PACKET (4096 - QUIC_HEAD) /* an Initial packet's bytes sent at most (WIRE_CHUNK) */
#define QUIC_FLOWS 32768                   /* connections followed at once (LRU: the oldest make room) */
#define QUIC_MIN_INITIAL \
	1200        /* a client's first Initial datagram is at least this long (RFC 9000
			       * §14.1: servers drop shorter ones): shorter ones begin nothing */
#define QUIC_WALK 4 /* coalesced packets walked per datagram */
/* The shortest Length of a Handshake packet that carries a client's Finished: a packet
 * number (1 byte), a CRYPTO frame's header (3), a Finished of SHA-256 (4 + 32), the AEAD tag
 * (16). A shorter one holds an ACK alone, or the client's CONNECTION_CLOSE refusing the
 * server (then no Finished ever comes, and the agent counts the handshake failed). */
#define QUIC_MIN_FINISHED 56

struct quic_head {
	__u64 ts;     /* when the datagram passed (bpf_ktime_get_ns) */
	__u16 hs_len; /* QUIC_F_DONE: the Length field of the client's Handshake packet that
		       * ended it (0: a 1-RTT packet did) */
	__u16 dgram;  /* the datagram's UDP payload length */
	__u8 pad[4];
};

/* A connection, as the kernel follows it: the client's address and port, the server's
 * port, and the client's connection ID (the Source Connection ID of its long-header packets,
 * the Destination Connection ID of the server's): a client that makes its connections one
 * after another from one socket (quic-go's Transport), or several at once, has one entry per
 * connection. */
struct quic_key {
	__u8 addr[16]; /* IPv6, or IPv4 in its first 4 bytes */
	__u16 rport;   /* the client's port, network order */
	__u16 lport;   /* the server's port, host order */
	__u8 cid_len;  /* the client's connection ID: its length (0-20) */
	__u8 pad[3];
	__u8 cid[8]; /* ... and its first 8 bytes (zeros past its length) */
};

struct quic_flow {
	__u64 id;    /* the connection's identity in the events (conn.bpf.h conn_new_id) */
	__u8 client; /* client datagrams with an Initial sent */
	__u8 server; /* server datagrams with an Initial sent */
	__u8 done;   /* the client's Handshake or 1-RTT packet was seen: nothing more is sent */
	__u8 pad[5];
};

#endif
