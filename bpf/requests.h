/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Requests per connection (requests.bpf.h): types shared with the agent
 * (the agent's Rust types are generated from them: agent/src/bpf/abi.rs).
 */
#ifndef TLSPROF_REQUESTS_H
#define TLSPROF_REQUESTS_H

/* req_conn.dir: the direction application data last moved */
#define CONN_DIR_NONE 0
#define CONN_DIR_IN 1
#define CONN_DIR_OUT 2

/* req_ctl.reads: what the read side does at each read of the machine. */
enum req_reads {
	REQ_READS_OFF = 0,        /* returns after one array lookup */
	REQ_READS_ALL = 1,        /* every read of a watched connection */
	REQ_READS_HANDSHAKES = 2, /* only reads within a connection's first EST_GATE bytes from
				   * the client (estimate.bpf.h): the kernel estimate beside
				   * probes still judged (agent/src/agent/sightings.rs), whose
				   * other reads cost a few loads from the socket; switched on by
				   * the kernel at a ClientHello (reads_at_hello) */
};

/*
 * Value of req_ctl[0]: the switches the agent sets after load. Not read-only globals: the
 * object's .rodata is frozen when it is loaded, before the agent knows whether the send
 * capture attaches (sends_captured); `reads` changes while it runs.
 */
struct req_ctl {
	__u32 sends_captured; /* wire_send is attached: requests and the end of TLS 1.3 handshakes
			    * are seen from the server's sends, not from its reads */
	__u32 reads;          /* enum req_reads. ALL: --exact where processes are found by their
			    * TLS (the kernel estimate of processes that live for one
			    * connection), no sends_captured, a traced process whose handshakes
			    * the kernel estimates, or one with Go probes; HANDSHAKES: only
			    * processes estimated beside their probes; else OFF */
	__u32 reads_at_fork;  /* --exact with a selector: the read side stays attached; when a
			      * traced process forks, or a process is traced from its exec
			      * (proc.bpf.h), the reads are on, in the kernel, before the new
			      * process runs (it may live for one connection, its handshake over
			      * before the agent hears of it), until the agent has read of it
			      * (starts_seen) and decided what it needs (`reads`) */
	__u32 starts_seen;    /* reads_at_fork: the process starts (req_starts) whose notices the
			    * agent has read; while the kernel has counted more, the reads are
			    * on, whatever `reads` says (req_reads_now) */
	__u32 reads_at_hello; /* a process is estimated beside its probes, still judged, and the
			       * packet program captures ClientHellos: the read side stays
			       * attached, `reads` OFF until a ClientHello arrives on a followed
			       * connection, then HANDSHAKES, in the kernel, from its packet,
			       * before the server reads it (hello.bpf.h) */
};

/* requests.bpf.h's part of a connection's state (conn_state.req). */
struct req_conn {
	__u32 requests; /* application data exchanges: client data, then server data */
	__u16 slot;     /* its port's conn_port_stats.slot at accept: its live exchange counter */
	__u8 dir;       /* CONN_DIR_* (without the send capture) */
	__u8 pad;
	/*
	 * Requests without a receive hook: positions in the client's byte stream as the server
	 * has read it (tcp copied_seq), taken at the server's sends (tcp_sendmsg_locked).
	 */
	__u32 rx_mark; /* requests are counted up to here */
	__u32 rx_tail; /* bytes past rx_mark that are still the client's handshake (its
			  * change_cipher_spec and Finished, read after the capture ended) */
};

#endif
