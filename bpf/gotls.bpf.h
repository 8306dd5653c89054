/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Go's crypto/tls: a handshake is one call of `(*Conn).serverHandshake` (or
 * clientHandshake) on the connection's goroutine, which blocks inside it — Go's reads park
 * the goroutine, and it may resume on another thread while the thread it left runs other
 * goroutines. So the handshake's on-CPU time is the sum of its goroutine's stretches on
 * threads (user side: agent/src/discovery/handshake/gotls.rs says where the probes go):
 *
 * - a stretch opens at the call's entry (uprobe; Go code takes no return probes) and when a
 *   read of the handshake's connection returns data on a thread with none open (the
 *   goroutine resumed there after its read had parked it);
 * - it closes, as a call that will be called again, when a read of that connection returns
 *   EAGAIN (Go's poller parks the goroutine), or when the thread reads or sends on another
 *   connection (another goroutine runs there); while the thread is switched out its clock
 *   stops (sched.bpf.h), as for a library call;
 * - the handshake ends at any of the function's return instructions (one uprobe each), on
 *   whatever thread the goroutine is then, found by the goroutine (Go's g register): a nil
 *   error (the first word of the `error` interface result) is done, anything else failed.
 *
 * The stretches are handshake calls of the usual kind (hs_threads with `go` set, summed per
 * crypto/tls Conn in hs_conns), so labels, histograms and the budget treat Go like C.
 * Not counted: the goroutine's time between resuming and its read returning (the Go
 * scheduler's, a few µs), and work after a park that did not read (GC assists, a
 * preemption moving the goroutine) until its next read of the connection.
 */
#ifndef TLSPROF_GOTLS_BPF_H
#define TLSPROF_GOTLS_BPF_H

#include "handshake.h"

#ifndef EAGAIN
#define EAGAIN 11
#endif

/* Go's register ABI (ABIInternal, Go 1.17+): the goroutine in R14 (x86-64) or R28 (arm64),
 * the receiver and the first result in the first integer register. */
#if defined(__TARGET_ARCH_x86)
#define GO_G(ctx) ((__u64)(ctx)->r14)
/* RAX, not the C ABI's RDI (PT_REGS_PARM1): read there, every handshake of a server whose
 * RDI held the same value at the call (Caddy's: 0) shared one state, and of two at once
 * only the first to end was counted */
#define GO_ARG0(ctx) ((__u64)(ctx)->ax)
#elif defined(__TARGET_ARCH_arm64)
#define GO_G(ctx) ((__u64)((struct user_pt_regs *)(ctx))->regs[28])
#define GO_ARG0(ctx) ((__u64)((struct user_pt_regs *)(ctx))->regs[0])
#else
#define GO_G(ctx) ((__u64)0)
#define GO_ARG0(ctx) ((__u64)0)
#endif
#define GO_RET0(ctx) ((__u64)PT_REGS_RC(ctx))

struct go_g_key {
	__u64 g;
	__u32 tgid;
	__u32 pad;
};

/* A goroutine inside a handshake: its crypto/tls Conn, and the thread it entered on. */
struct go_goroutine {
	__u64 conn;
	__u32 tid;
	__u32 pad;
};

/* The goroutines inside a handshake (key: goroutine, process).
 * LRU: a handshake whose return the probes never see (detached by the budget mid-call)
 * cannot leak; an insert that fails all the same is go_map_full. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_g_key);
	__type(value, struct go_goroutine);
} go_goroutines SEC(".maps");

/* The connection (conn_life.id) of each Go handshake in progress -> its crypto/tls Conn and
 * process: a read of it that returns data resumes the handshake's goroutine. LRU, as above. */
struct go_sock {
	__u64 conn;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct go_sock);
} go_socks SEC(".maps");

/* Go handshakes entered (never decremented below what returned): while 0, which it is on a
 * host without Go probes, the socket hooks stop at this one load. */
__u64 go_open = 0;

/* The goroutine's stretch on thread `tid` is over; its handshake goes on elsewhere. `own`:
 * `tid` is the thread running here (go_enter also ends another thread's stretch). */
static __always_inline void go_park(__u32 tid, struct hs_thread *t, const bool own)
{
	hs_call_end_by(tid, t, HS_CALL_AGAIN, false, own, bpf_ktime_get_ns());
}

/* A Go handshake stretch links its connection at its first socket I/O. */
static __always_inline void go_link(struct hs_thread *t, const struct conn_state *c)
{
	struct go_sock s = { .conn = t->ssl, .tgid = t->tgid };
	t->conn_id = c->life.id;
	t->conn_start = c->life.start_ns;
	t->io = 1;
	map_insert(&go_socks, &t->conn_id, &s, BPF_ANY, STAT_GO_MAP_FULL);
}

/* The thread's open Go stretch, NULL if none (one load while no handshake is in flight). */
static __always_inline struct hs_thread *go_stretch(__u32 tid)
{
	if (!hs_any_active())
		return NULL;
	struct hs_thread *t = hs_live_thread(tid);
	return t && t->go ? t : NULL;
}

/* A read of watched connection `c` returned `ret`. */
static __always_inline void go_on_read(const struct conn_state *c, int ret)
{
	if (!go_open)
		return;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct hs_thread *t = go_stretch(tid);
	if (t) {
		if (!t->conn_id)
			go_link(t, c);
		if (t->conn_id != c->life.id)
			go_park(tid, t, true); /* another goroutine reads here now */
		else if (ret == -EAGAIN)
			go_park(tid, t, true); /* this one parks until its connection is readable */
		else
			return;
	}
	if (ret <= 0)
		return;
	__u64 key = c->life.id;
	struct go_sock *s = bpf_map_lookup_elem(&go_socks, &key);
	if (!s)
		return;
	if (s->tgid != id >> 32) {
		/* left by a handshake whose return the probes missed (detached mid-call) */
		bpf_map_delete_elem(&go_socks, &key);
		return;
	}
	__u64 conn = s->conn;
	t = hs_live_thread(tid);
	if (t) {
		if (!t->est)
			return; /* inside a library call (cgo) */
		est_close(tid, t);
	}
	hs_open(tid, id >> 32, conn, HS_ROLE_UNKNOWN, 1);
	t = hs_live_thread(tid);
	if (t) {
		t->conn_id = key;
		t->conn_start = c->life.start_ns;
		t->io = 1;
	}
}

/* A send on watched connection `c`: a Go stretch of another connection on this thread is
 * over (another goroutine runs here); the first I/O of a stretch links its connection. */
static __always_inline void go_before_send(const struct conn_state *c)
{
	if (!go_open)
		return;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hs_thread *t = go_stretch(tid);
	if (!t)
		return;
	if (!t->conn_id)
		go_link(t, c);
	else if (t->conn_id != c->life.id)
		go_park(tid, t, true);
}

static __always_inline int go_enter(struct pt_regs *ctx, __u8 role)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	__u64 conn = GO_ARG0(ctx);
	struct go_g_key gk = { .g = GO_G(ctx), .tgid = tgid };
	HS_HIT(tgid, false);
	/* this goroutine's handshake of this Conn, if it entered the function before */
	struct go_goroutine *again = bpf_map_lookup_elem(&go_goroutines, &gk);
	bool same = again && again->conn == conn;
	struct hs_thread *t = hs_live_thread(tid);
	if (t) {
		/* the function ran again after growing its stack (morestack). Not so a stretch of
		 * the same Conn address left by another goroutine: a handshake that moved threads
		 * without a read and returned elsewhere, whose Conn Go's allocator gave to this
		 * one. Taken for a morestack, this handshake went untimed. */
		if (t->ssl == conn && same)
			return 0;
		if (t->est)
			est_close(tid, t);
		else if (t->go)
			go_park(tid, t, true); /* the goroutine that was here has left */
		else
			return 0;
	}
	if (same) {
		/* The function runs again from its start on another thread: its prologue's stack
		 * check is where Go preempts a goroutine (runtime.newstack), which then resumed
		 * here. Its stretch on the thread it left is closed, not left open there to take
		 * the next goroutine's socket for this handshake's; the handshake goes on. */
		__u32 old = again->tid;
		struct hs_thread *left = hs_live_other(old);
		if (left && left->go && left->ssl == conn)
			go_park(old, left, false);
		again->tid = tid;
		hs_open(tid, tgid, conn, role, 1);
		return 0;
	}
	struct go_goroutine g = { .conn = conn, .tid = tid };
	if (!map_insert(&go_goroutines, &gk, &g, BPF_ANY, STAT_GO_MAP_FULL))
		return 0;
	__sync_fetch_and_add(&go_open, 1);
	/* a crypto/tls Conn handshakes once: whatever its address held before is gone */
	struct hs_key key = { .ssl = conn, .tgid = tgid };
	struct hs_state st = { .role = role };
	map_insert(&hs_conns, &key, &st, BPF_ANY, STAT_HS_SSL_MAP_FULL);
	hs_open(tid, tgid, conn, role, 1);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(hs_go_enter_server)
{
	return go_enter(ctx, HS_ROLE_SERVER);
}

SEC("uprobe")
int BPF_KPROBE(hs_go_enter_client)
{
	return go_enter(ctx, HS_ROLE_CLIENT);
}

/* A return instruction of the handshake function, on the goroutine's current thread. */
SEC("uprobe")
int BPF_KPROBE(hs_go_return)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, tgid = id >> 32;
	struct go_g_key gk = { .g = GO_G(ctx), .tgid = tgid };
	__u8 outcome = GO_RET0(ctx) == 0 ? HS_CALL_DONE : HS_CALL_FAILED;
	HS_HIT(tgid, true);
	struct go_goroutine *found = bpf_map_lookup_elem(&go_goroutines, &gk);
	if (!found) {
		stat_inc(STAT_HS_UNMATCHED_RETURN); /* not a failure: stats.h */
		return 0;
	}
	__u64 conn = found->conn;
	bpf_map_delete_elem(&go_goroutines, &gk);
	__sync_fetch_and_add(&go_open, -1);
	struct hs_thread *t = hs_live_thread(tid);
	if (t && t->ssl != conn) {
		/* another stretch is open here: the goroutine resumed without a read */
		if (t->est)
			est_close(tid, t);
		else if (t->go)
			go_park(tid, t, true);
		else
			return 0;
		t = NULL;
	}
	if (!t) {
		hs_open(tid, tgid, conn, HS_ROLE_UNKNOWN, 1);
		t = hs_live_thread(tid);
		if (!t)
			return 0;
	}
	__u64 conn_id = t->conn_id;
	if (!conn_id) {
		struct hs_key key = { .ssl = conn, .tgid = tgid };
		struct hs_state *st = bpf_map_lookup_elem(&hs_conns, &key);
		conn_id = st ? st->conn_id : 0;
	}
	hs_call_end(tid, t, outcome, false);
	if (conn_id)
		bpf_map_delete_elem(&go_socks, &conn_id);
	return 0;
}

#endif
