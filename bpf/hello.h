/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The client's ClientHello, as hello.bpf.h reads it from the server's socket reads: types
 * shared with the agent (the agent's Rust types are generated from it: agent/src/bpf/abi.rs).
 *
 * Of the client's byte stream only its first records are looked at, from the stream's
 * start: the handshake record(s) that carry its first ClientHello, record headers included,
 * up to the end of the record that completes it. After it only the next record's 5-byte
 * header is looked at, and its 2-byte body if it is an alert in the clear (a TLS 1.2
 * client rejecting the server's flight says why there: unknown_ca, bad_certificate...).
 * Nothing else past the ClientHello is ever read: no application data, no TLS 1.3 early
 * data, not the second ClientHello after a HelloRetryRequest (RFC 8446 makes it the first
 * one with another key share). A stream
 * whose packets or reads within its first HELLO_GATE bytes never begin with a handshake record
 * (a connection without TLS) is not read at all: of each, its first three bytes are looked at
 * in the kernel, to find where TLS starts after a plaintext preamble (STARTTLS, PostgreSQL's
 * SSLRequest) and, of the stream's first chunk, to tell which protocol a client speaks that
 * is not TLS (hello_untls: HTTP's methods, HTTP/2's preface, SSH's banner); nothing of them
 * leaves it.
 *
 * The bytes go to the agent on the wire_events ring buffer (wire.h), kind WIRE_EV_HELLO:
 * data[0..len] are the stream's bytes at offset `offset` (struct wire_event); flags say
 * whether the ClientHello is complete and why the capture gave up.
 */
#ifndef TLSPROF_HELLO_H
#define TLSPROF_HELLO_H

/* hello_conn.state */
#define HELLO_OFF 0  /* not followed (a connection accepted before the capture's hook) */
#define HELLO_ON 1   /* reading the ClientHello */
#define HELLO_DONE 2 /* complete, given up, or not TLS: nothing more is looked at */
#define HELLO_NEXT 3 /* complete: the next record's header is looked at, for an alert */

/* wire_event.flags of WIRE_EV_HELLO: HELLO_LAST, and in the high nibble why it gave up */
#define HELLO_LAST 0x01 /* these bytes complete the ClientHello */
#define HELLO_ALERT \
	0x02 /* data[0..2] is the alert (level, description) the client sent in
			       * the clear right after its ClientHello: nothing else is sent */
#define HELLO_WHY_MASK 0xf0
enum hello_why {
	HELLO_WHY_NONE = 0,      /* not given up (HELLO_LAST: complete; else more to come) */
	HELLO_UNREADABLE = 0x10, /* a read the hook cannot follow (io_uring, several iovec
				      * segments, a user buffer it cannot find or read) */
	HELLO_CUT = 0x20,        /* the ClientHello's records run past HELLO_MAX bytes, or it
				      * takes more than HELLO_MAX_RECORDS records */
	HELLO_GAP = 0x30,        /* bytes of the stream were read where the hook did not see it */
	HELLO_BAD = 0x40,        /* a record that cannot continue a ClientHello (not a
				      * handshake record, bad version or length, not a ClientHello) */
};

/* What a connection accepted on a port that carries TLS was, when it closed before its
 * server sent any TLS (conn.bpf.h counts it on its port: conn_port_stats.untls, indexed by
 * this). The first five are no handshake: the client's first bytes (hello_conn.first) or
 * none; the last three are handshakes that began (the client's ClientHello came) and
 * failed before the server answered, by who ended the connection. */
enum hello_untls {
	HELLO_UNTLS_SILENT = 0,       /* the client sent no byte: a TCP health check, a port scan */
	HELLO_UNTLS_HTTP = 1,         /* an HTTP/1 request line (GET, POST, HEAD, PUT, ...) */
	HELLO_UNTLS_HTTP2 = 2,        /* HTTP/2's cleartext preface ("PRI") */
	HELLO_UNTLS_SSH = 3,          /* an SSH banner ("SSH-") */
	HELLO_UNTLS_OTHER = 4,        /* bytes that begin no TLS record, of no protocol above, or a
				       * connection the capture did not follow */
	HELLO_UNTLS_HELLO_CLIENT = 5, /* a ClientHello, then the client closed (FIN) */
	HELLO_UNTLS_HELLO_RESET = 6,  /* a ClientHello, then a reset */
	HELLO_UNTLS_HELLO_SERVER = 7, /* a ClientHello, then the server closed without a TLS byte */
};
#define HELLO_UNTLS_KINDS 8

#define HELLO_MAX 8192                 /* bytes of the client's stream read at most */
#define HELLO_MAX_RECORDS 16           /* records a ClientHello may span */
#define HELLO_MAX_RECORD (16384 + 256) /* a plaintext record body (2^14), with slack */

/* hello.bpf.h's part of a connection's state (conn_state.hello). */
struct hello_conn {
	__u32 start;    /* where the client's TLS starts in its stream (tcp sequence): at accept
			 * (copied_seq), moved past a plaintext preamble */
	__u32 seen;     /* bytes of the stream looked at from `start` (all sent to the agent) */
	__u32 rec_left; /* body bytes of the current record still to come */
	__u32 msg_len;  /* the ClientHello's length, its 4-byte header included; 0: not known */
	__u32 body;     /* handshake record body bytes so far */
	__u8 state;     /* HELLO_OFF/ON/DONE */
	__u8 hdr_have;  /* bytes of a record header split across reads */
	__u8 msg_have;  /* bytes of the ClientHello's message header so far */
	__u8 records;   /* records begun */
	__u8 first;     /* the client's first bytes, where they began no TLS record: HELLO_UNTLS_*
			 * (0: none seen, or TLS) */
	__u8 pad[3];
	__u8 hdr[8]; /* the record header being read (5 bytes used; HELLO_NEXT: the record
			 * after the ClientHello, and an alert's 2 bytes after it) */
	__u8 msg[4]; /* the ClientHello's message header: type, 24-bit length */
};

#endif
