/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What crosses a server's socket during its TLS handshake, as wire.bpf.h sends it to the
 * agent (its Rust types are generated from this header: agent/src/bpf/abi.rs).
 *
 * Only the server's output is looked at, and only until its handshake is over. Its TLS may
 * start after a plaintext preamble (STARTTLS, PostgreSQL's SSLRequest): of a preamble send
 * only its first bytes (at most 5) are looked at, in the kernel, to tell whether it begins a
 * TLS record; nothing of it is copied. Then:
 * - plaintext records (handshake, alert, change_cipher_spec) before the first encrypted
 *   record are copied whole: ServerHello, and in TLS 1.2 Certificate, ServerKeyExchange;
 * - of encrypted records (TLS 1.3's EncryptedExtensions..Finished) only the 5-byte header
 *   (type, length) is kept: their contents are never read;
 * - it stops at TLS 1.2's server Finished, at the first data the client sends after the
 *   server's first encrypted record (TLS 1.3), at a fatal plaintext alert, or at a cap.
 * No byte of an application data record is ever read.
 */
#ifndef TLSPROF_WIRE_H
#define TLSPROF_WIRE_H

/* wire_conn.state */
#define WIRE_IDLE 0   /* nothing sent yet */
#define WIRE_PLAIN 1  /* plaintext records so far: copied */
#define WIRE_SEALED 2 /* after the first encrypted record: headers only */
#define WIRE_DONE 3   /* over (or not TLS): nothing more is looked at */

/* wire_conn.flags */
#define WIRE_F_CCS 1      /* the server sent change_cipher_spec */
#define WIRE_F_FINISHED 2 /* the current record is TLS 1.2's (encrypted) server Finished */
#define WIRE_F_TLS 4      /* the output is TLS records from here (after a preamble, if any) */

/* wire_event.kind */
enum wire_ev {
	WIRE_EV_DATA = 1,   /* data[0..len]: plaintext handshake-phase bytes of the output stream */
	WIRE_EV_RECORD = 2, /* data[0..len]: headers of encrypted handshake records, 5 bytes
				 * each: those one send held (at most WIRE_MAX_SEALED) */
	WIRE_EV_END = 3,    /* the capture is over; flags: WIRE_END_* */
	WIRE_EV_HELLO = 4,  /* data[0..len]: the client's stream at `offset`, its ClientHello's
				 * records (hello.h, hello.bpf.h); flags: HELLO_LAST, HELLO_WHY_MASK */
	WIRE_EV_QUIC = 5,   /* a QUIC connection's datagram: data is a struct quic_head and an
				 * Initial packet (quic.h, quic.bpf.h); flags: QUIC_F_* */
};

/* The protocol of a plaintext preamble, told from the first bytes of the server's first
 * send (and of its last, which answers the client's request to start TLS), in the kernel:
 * sent to the agent as this code alone, in a WIRE_EV_END's data[8] (wire_end_data). */
enum wire_proto {
	WIRE_PROTO_NONE = 0,       /* TLS from the connection's first byte */
	WIRE_PROTO_OTHER = 1,      /* a preamble of no protocol below */
	WIRE_PROTO_SMTP = 2,       /* "220" greeting, "220" answer to STARTTLS */
	WIRE_PROTO_FTP = 3,        /* "220" greeting, "234" answer to AUTH TLS */
	WIRE_PROTO_IMAP = 4,       /* "* OK" greeting */
	WIRE_PROTO_POP3 = 5,       /* "+OK" greeting */
	WIRE_PROTO_LDAP = 6,       /* a BER SEQUENCE (0x30): the StartTLS extended response */
	WIRE_PROTO_XMPP = 7,       /* "<?xml" or "<stream" */
	WIRE_PROTO_NNTP = 8,       /* "200" or "201" greeting */
	WIRE_PROTO_POSTGRESQL = 9, /* the single byte 'S' answering an SSLRequest */
	WIRE_PROTO_MYSQL = 10,     /* a handshake packet: sequence 0, protocol version 10 */
};

/* data of WIRE_EV_END: the connection's accept time (conn_life.start_ns), its
 * preamble's protocol, and, where the connection's close ended the capture
 * (WIRE_END_CLOSED_LEN bytes sent), who had ended it: conn_life.first_fin (conn.h
 * CONN_BY_SERVER/CLIENT, 0: no FIN yet) in the low 4 bits, conn_life.reset in the high 4. */
struct wire_end_data {
	__u64 conn_start;
	__u8 proto;
	__u8 by;
};
#define WIRE_END_LEN 9         /* bytes of it sent: conn_start, proto */
#define WIRE_END_CLOSED_LEN 10 /* ... and by, where the connection's close ended the capture */

/* wire_event.flags of WIRE_EV_END: why it ended */
enum wire_end {
	WIRE_END_FINISHED = 1,     /* TLS 1.2 server Finished sent, or the client answered the
				 * server's encrypted flight (TLS 1.3) */
	WIRE_END_ALERT = 2,        /* the server sent a plaintext alert */
	WIRE_END_CLOSED = 3,       /* the connection closed first */
	WIRE_END_CAP = 4,          /* too many bytes or records: gave up */
	WIRE_END_BAD = 5,          /* a record header that is not TLS after TLS had started */
	WIRE_END_UNSUPPORTED = 6,  /* output the capture cannot read (kernel buffers, splice) */
	WIRE_END_CLIENT_ALERT = 7, /* the client answered the server's TLS 1.3 flight with fewer
				 * bytes than any Finished: an alert (it rejected the server) */
};

#define WIRE_CHUNK 4096      /* largest DATA event */
#define WIRE_MAX_PLAIN 16384 /* plaintext bytes copied per connection at most */
#define WIRE_MAX_SEALED 12   /* encrypted record headers kept per connection at most */

/* wire.bpf.h's part of a connection's state (conn_state.wire): its handshake output, as
 * far as it is looked at. */
struct wire_conn {
	__u32 seq;     /* output stream position (tcp write_seq) looked at so far */
	__u32 left;    /* body bytes of the current record not yet sent */
	__u32 tgid;    /* the process that wrote it */
	__u16 copied;  /* plaintext bytes copied to user space */
	__u8 state;    /* WIRE_IDLE/PLAIN/SEALED/DONE */
	__u8 flags;    /* WIRE_F_* */
	__u8 hdr[8];   /* a record header split across writes (5 bytes used) */
	__u8 hdr_have; /* bytes of it so far */
	__u8 sealed;   /* encrypted record headers sent */
	__u8 end;      /* WIRE_END_* to report when the current record ends, 0 if none */
	__u8 why;      /* why the capture ended (WIRE_END_*; 0: not TLS) */
	__u16 fin_len; /* body length of the server's latest Finished-sized record: the
			  * client's Finished record has the same (same suite, same hash) */
	__u8 pre;      /* sends of a plaintext preamble before TLS (STARTTLS, an SSLRequest) */
	__u8 proto;    /* the preamble's protocol (WIRE_PROTO_*), from its first bytes */
	/* how far the server had read the client's stream (tcp copied_seq) at its sends: */
	__u32 rx_first;  /* at the first (its first flight answers the ClientHello) */
	__u32 rx_flight; /* at the latest while the capture runs */
};

struct wire_event {
	__u64 conn_id; /* conn_life.id */
	__u32 tgid;    /* the process that wrote (for END: the last one that did) */
	__u32 netns;
	__u16 port; /* local (listening) port */
	__u8 kind;  /* WIRE_EV_* */
	__u8 flags;
	__u16 len;    /* bytes in data */
	__u16 offset; /* WIRE_EV_HELLO: the client stream's offset of data[0]; else 0 */
	__u8 data[WIRE_CHUNK];
};

#define WIRE_EVENT_HEADER 24 /* offsetof(struct wire_event, data) */

#endif
