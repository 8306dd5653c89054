/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What one feature asks of another, declared once, by the feature that answers: a feature
 * header calls another's functions through these declarations only, and reads no other
 * feature's maps, globals or macros (tests/test_bpf_boundaries.py checks it), so the order
 * of the includes in tlsprof.bpf.c matters only among one feature's files. A feature's files are one feature: the
 * handshake probes' handshake.bpf.h, hs_calls.bpf.h, hs_objects.bpf.h and gotls.bpf.h (Go's
 * handshakes), the ClientHello capture's hello.bpf.h and hello_skb.bpf.h. Definitions stay
 * in their feature's header; a new cross-feature call gets its declaration here, under its
 * owner.
 *
 * A connection's state (struct conn_state, conn.h) has one part per feature: each feature
 * writes its own part only, and asks the others through their functions here.
 */
#ifndef TLSPROF_IFACE_H
#define TLSPROF_IFACE_H

#include "conn.h"
#include "handshake.h"
#include "hello.h"
#include "proc.h"
#include "quic.h"
#include "requests.h"
#include "wire.h"

/* proc.bpf.h: the traced set */
static __always_inline struct proc_traced *proc_of(__u32 tgid);
static __always_inline void proc_found(__u32 tgid, __u16 port);
static __always_inline bool proc_listened(__u16 port);
static __always_inline bool proc_finding(void);

/* handshake.bpf.h: handshake calls in progress, per thread. The kernel estimate
 * (estimate.bpf.h) and Go (gotls.bpf.h) are handshake calls of their own kinds: they also
 * open, end and report calls, through these. */
static __always_inline bool in_handshake_here(__u32 tid);
static __always_inline bool hs_link_io(__u32 tid, __u64 conn_id, __u64 conn_start);
static __always_inline void hs_link_membio(__u32 tid, __u32 tgid, __u64 conn_id, __u64 conn_start);
static __always_inline void hs_thread_exited(__u32 tid);
static __always_inline bool hs_before_detach(__u32 tgid, __u64 ns);
static __always_inline struct hs_thread *hs_live_thread(__u32 tid);
static __always_inline struct hs_thread *hs_live_other(__u32 tid);
static __always_inline void hs_set_oncpu(__u32 tid);
static __always_inline void hs_thread_end(__u32 tid, struct hs_thread *t, bool own);
static __always_inline void hs_open(__u32 tid, __u32 tgid, __u64 ssl, __u8 role, __u8 go);
static __always_inline void hs_call_end(__u32 tid, struct hs_thread *t, __u8 outcome, bool membio);
static __always_inline void hs_call_end_by(__u32 tid, struct hs_thread *t, __u8 outcome, bool membio, const bool own,
                                           __u64 now);
static __always_inline void hs_emit(__u32 tgid, const struct hs_state *st, __u8 result, __u8 estimate);
static __always_inline bool hs_any_active(void);
static __always_inline struct hs_thread *hs_thread_of(__u32 tid);
static __always_inline bool hs_thread_start(__u32 tid, const struct hs_thread *nt);

/* estimate.bpf.h: the kernel estimate's windows */
static __always_inline void est_close(__u32 tid, struct hs_thread *t);
static __always_inline void est_before_send(const struct sock *sk);
static __always_inline void est_on_read(struct sock *sk, struct conn_state *c, int ret, int flags);
static __always_inline bool est_gate_passed(struct sock *sk, int ret, int flags, const bool typed);

/* gotls.bpf.h: Go handshakes' goroutines at socket I/O */
static __always_inline void go_on_read(const struct conn_state *c, int ret);
static __always_inline void go_before_send(const struct conn_state *c);

/* sched.bpf.h: per-process CPU time */
static __always_inline void cpu_account(struct cpu_now *c, const struct task_struct *task);

/* conn.bpf.h: connections (conn_state.life). A connection's identity is minted by
 * conn_new_id only: at accept, at its first data on the listening socket (conn_early), and
 * for a QUIC connection (quic.bpf.h). */
static __always_inline __u64 conn_new_id(void);
static __always_inline bool conn_early(const struct sock *listener, struct conn_life *life);
static __always_inline struct conn_state *conn_of(const struct sock *sk);
static __always_inline struct conn_state *conn_adopt(const struct sock *sk, __u64 rx, __u64 tx, bool any);
static __always_inline bool conn_port_maybe(__u32 port);
static __always_inline __u8 conn_port_kinds(__u32 port);
static __always_inline void conn_mark_tls(struct conn_state *c);
static __noinline int conn_handshake_io(struct conn_state *c, __u32 tid);

/* requests.bpf.h: requests per connection (conn_state.req) */
static __always_inline void req_accepted(struct req_conn *r, __u32 slot, __u32 mark);
static __always_inline __u32 req_count(const struct conn_state *c);
static __always_inline void req_sent(struct conn_state *c, __u32 copied);
static __always_inline void req_handshake_over(struct conn_state *c, bool tls, __u32 mark, __u32 tail, __u32 copied);
static __always_inline __u32 req_process_started(void);
static __always_inline void req_tls_starts(void);

/* wire.bpf.h: the capture of the server's handshake output (conn_state.wire) */
static __always_inline void wire_closed(const struct sock *sk, struct conn_state *c);
static __always_inline void wire_read_data(const struct sock *sk, struct conn_state *c);
static __always_inline bool wire_client_handshake(const struct conn_state *c, __u32 copied);
static __always_inline bool wire_spoke_plaintext(const struct conn_state *c);
/* ... and its ring buffer, which the ClientHello and QUIC captures' events share */
static __always_inline struct wire_event *wire_event_new(void);
static __always_inline void wire_event_send(struct wire_event *e);

/* hello.bpf.h: the client's ClientHello (conn_state.hello) */
static __always_inline void hello_accepted(struct hello_conn *h, __u32 start);
/* ... whether the client's TLS has begun (after a plaintext preamble: its first record) */
static __always_inline bool hello_begun(const struct conn_state *c);
/* ... what a connection closed before its server's TLS was (HELLO_UNTLS_*) */
static __always_inline __u8 hello_untls(const struct conn_state *c, bool received, __u8 by);
/* ... whether the client's stream up to `copied` lies before where its TLS starts */
static __always_inline bool hello_before_tls(const struct conn_state *c, __u32 copied);
/* hello_skb.bpf.h: ... from the client's packets (a connection's first data, walked on its
 * listening socket before the connection existed: its identity and state) */
static __always_inline __u64 hello_early_take(const struct sock *sk, __u32 start, struct hello_conn *h);

#endif
