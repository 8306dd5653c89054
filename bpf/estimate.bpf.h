/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The kernel-only estimate of a handshake's CPU, for servers whose TLS stack has no entry
 * point tlsprof probes (HCL Domino's, GSKit, NSS, Go, a stripped static binary) or whose
 * probes are switched off (--no-handshake-probes). User side: agent/src/agent/handshakes.rs
 * (sums the parts, labels them from the wire).
 *
 * A window opens when a server thread's read of a watched connection returns data while the
 * server has sent nothing of its handshake yet (the ClientHello), or only plaintext handshake
 * records (TLS 1.2's ClientKeyExchange and Finished, a ClientHello after a
 * HelloRetryRequest), or its TLS 1.3 encrypted flight (then only while the bytes read are
 * the client's Finished); it stays open across the server's sends on that connection (a
 * flight in several writes, TLS 1.3 session tickets after the capture's end) and closes when
 * the thread goes to sleep (sched_switch, not preempted), reads or sends on another watched
 * connection, reads past the client's handshake messages on this one (the first request),
 * or enters a probed handshake call (hs_enter, go_enter): the thread's on-CPU time in between, clocked
 * by sched_switch as a handshake call's is (hs_threads, with `est` set), is one part; the
 * parts of a connection are summed when its capture ends (wire.bpf.h).
 *
 * Assumptions (docs/metrics.md): the thread that reads a connection's handshake message
 * answers it before it serves another connection (event loops such as nginx's, a thread per
 * connection); not in it: the kernel's part of the reads and of the sends (on loopback the
 * send also delivers), and work a server does before a read returns.
 */
#ifndef TLSPROF_ESTIMATE_BPF_H
#define TLSPROF_ESTIMATE_BPF_H

#include "conn.h"
#include "handshake.h"
#include "wire.h"

/* Closes the thread's window: its on-CPU time since the read is one part of its connection's
 * handshake, sent to the agent (hs_events, estimate set). */
static __always_inline void est_close(__u32 tid, struct hs_thread *t)
{
	__u64 now = bpf_ktime_get_ns();
	struct hs_state part = {
		.first_ns = t->enter_ns,
		.last_ns = now,
		.cpu_ns = t->cpu_ns + (t->oncpu_ns ? now - t->oncpu_ns : 0),
		.calls = 1,
		.role = HS_ROLE_SERVER,
		.conn_id = t->conn_id,
		.conn_start = t->conn_start,
	};
	__u32 tgid = t->tgid;
	hs_thread_end(tid, t, true);
	hs_emit(tgid, &part, HS_RESULT_OK, 1);
}

/* The thread's open window, NULL if none (one load while no window or call is open). */
static __always_inline struct hs_thread *est_window(__u32 tid)
{
	if (!hs_any_active())
		return NULL;
	/* inside a probed handshake call: the thread's entry is the call's (no hash lookup) */
	if (in_handshake_here(tid))
		return NULL;
	struct hs_thread *t = hs_thread_of(tid);
	return t && t->est ? t : NULL;
}

/* A thread sends on watched connection `sk`: a window it had open for another connection
 * closes (a server may send its flight in several writes: the window stays open across
 * them, until the handshake's capture is over or the thread turns to another connection). */
static __always_inline void est_before_send(const struct sock *sk)
{
	if (!hs_any_active())
		return; /* no window open anywhere (every keep-alive send on a quiet host): no helper call */
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hs_thread *t = est_window(tid);
	if (t && t->ssl != (__u64)sk)
		est_close(tid, t);
}

/*
 * Beside probes still judged, the read side looks only at reads that begin within a
 * connection's first EST_GATE bytes from the client (REQ_READS_HANDSHAKES): the ClientHello,
 * a TLS 1.2 client's second flight or a TLS 1.3 client's Finished, client certificates
 * included, after a plaintext preamble (STARTTLS, an SSLRequest). A later read costs these
 * loads from the socket, not a lookup of its storage: a keep-alive server whose probes are
 * not judged yet pays little for the estimate that covers its next new connection. A window
 * such a skipped read would have closed (a read of another connection) closes at the
 * thread's next send or sleep.
 */
#define EST_GATE 16384

/* Whether a read that returned `ret` bytes (recvmsg `flags`) began within EST_GATE; `typed`:
 * the program's socket is typed (tp_btf, fexit: plain loads, no helper call per field). */
static __always_inline bool est_gate_passed(struct sock *sk, int ret, int flags, const bool typed)
{
	if (ret <= 0 || (flags & MSG_PEEK))
		return false; /* nothing the estimate looks at */
	__u64 received;
	__u32 unread;
	if (typed) {
		struct tcp_sock *tp = bpf_skc_to_tcp_sock(sk);
		if (!tp)
			return false; /* not TCP */
		received = tp->bytes_received;
		unread = tp->rcv_nxt - tp->copied_seq;
	} else {
		if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
			return false;
		const struct tcp_sock *tp = (const struct tcp_sock *)sk;
		received = BPF_CORE_READ(tp, bytes_received);
		unread = BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq);
	}
	return (__s64)received - (__s64)unread - ret < EST_GATE;
}

/* A read of watched connection `sk` returned `ret` bytes (recvmsg `flags`). */
static __always_inline void est_on_read(struct sock *sk, struct conn_state *c, int ret, int flags)
{
	if (ret <= 0 || (flags & MSG_PEEK))
		return;
	if (c->wire.state == WIRE_DONE && !hs_any_active())
		return; /* past its handshake, no window open anywhere: nothing to open or close */
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	/* the process is estimated, or its probes came after the connection, or (no selector)
	 * it is not traced yet and may be found by this connection's TLS (proc_found) */
	struct proc_traced *p = proc_of(tgid);
	if (p ? !(p->estimate || c->life.start_ns < p->probed_ns) : !proc_finding())
		return;
	if (c->life.late)
		return; /* its first messages were read before it was followed */
	/* TLS 1.3, after the server's encrypted flight: the client's answer is a
	 * change_cipher_spec and a Finished record as long as the server's; bytes read past it
	 * are a request, which is not the handshake's; so is everything once the capture is over */
	bool handshake = wire_client_handshake(c, BPF_CORE_READ((struct tcp_sock *)sk, copied_seq));
	struct hs_thread *t = hs_thread_of(tid);
	if (t) {
		if (!t->est)
			return; /* inside a probed call */
		if (t->ssl == (__u64)sk) {
			/* this connection's window is open: more of the same message (the record
			 * body after its header), or the first request after it */
			if (!handshake)
				est_close(tid, t);
			return;
		}
		est_close(tid, t);
	}
	if (!handshake)
		return;
	__u64 now = bpf_ktime_get_ns();
	struct hs_thread nt = {
		.ssl = (__u64)sk,
		.enter_ns = now,
		.oncpu_ns = now,
		.tgid = tgid,
		.depth = 1,
		.role = HS_ROLE_SERVER,
		.est = 1,
		.conn_id = c->life.id,
		.conn_start = c->life.start_ns,
	};
	hs_thread_start(tid, &nt);
}

#endif
