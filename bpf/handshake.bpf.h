/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Handshake probes: count TLS handshakes per process and measure their wall-clock
 * duration and on-CPU time (types: handshake.h; user side: agent/src/bpf/handshake.rs,
 * agent/src/agent/handshakes.rs).
 *
 * The agent attaches the uprobes per process (never system-wide) to each TLS library's
 * handshake entry points (agent/src/discovery/handshake/: one file per library says which
 * functions, which role each call has and how its return value reads). For OpenSSL: the
 * handshake state machine (ossl_statem_accept/ossl_statem_connect, found by symbol or from
 * the SSL_METHOD tables) or, when that cannot be found, the exported
 * SSL_do_handshake/SSL_accept/SSL_connect; for GnuTLS, mbedTLS and wolfSSL their exported
 * handshake functions. A non-blocking server calls them several times per connection: one
 * handshake is the sum of its calls, reported once, when a call's return value says it is
 * done (or failed), or when the connection object is freed before the handshake finished
 * (failed).
 *
 * On-CPU time: sched_switch (sched.bpf.h) stops and restarts the clock of a thread that is
 * inside a handshake call, so time spent switched out is not counted.
 *
 * This header holds the handshake state (maps) and what the probes do; the programs are in
 * hs_calls.bpf.h (a handshake function's entry and return) and hs_objects.bpf.h (the
 * connection object's role, reset and free).
 */
#ifndef TLSPROF_HANDSHAKE_BPF_H
#define TLSPROF_HANDSHAKE_BPF_H

#include "handshake.h"
#include "proc.h" /* PROC_TRACED_ENTRIES */

/* Per thread of a traced process: its handshake call (or estimate window) while one is open,
 * kept between calls (depth 0) while fewer than HS_THREADS_KEPT are (hs_entries); an entry
 * goes when its thread exits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct hs_thread);
} hs_threads SEC(".maps");

/* LRU: a connection whose SSL_free we never see (attached late, probes detached by the
 * budget, process gone) cannot leak; when full, the least recently used entry (such a
 * leftover, well before a live handshake) is evicted, which the kernel does not count. An
 * insert that fails all the same is ssl_map_full. The size is the agent's at load, from the
 * host's memory (agent/src/bpf/sizes.rs: 16,384 to 262,144); 65536 is the object's own. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct hs_key);
	__type(value, struct hs_state);
} hs_conns SEC(".maps");

#define HS_RINGBUF_BYTES (256 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, HS_RINGBUF_BYTES);
} hs_events SEC(".maps");

/*
 * The SSL object of a server handshake call that just returned without socket I/O of its
 * own (memory BIO, as in node), per thread: the thread's next write on a connection whose
 * handshake output is being captured carries that call's flight, so it links the two
 * (wire.bpf.h). LRU: entries of threads that never wrote again are evicted first; an
 * insert that fails is hs_last_full.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct hs_key);
} hs_last SEC(".maps");

/* Uprobe hits per traced process: the agent keeps their cost under its overhead budget. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROC_TRACED_ENTRIES);
	__type(key, __u32);
	__type(value, struct hs_hits);
} hs_hits SEC(".maps");

/*
 * When the agent last detached a process's handshake probes (bpf_ktime_get_ns clock).
 * A thread inside a handshake call then never sees its return probe: its hs_threads entry
 * (entered before that time) is stale and dropped where it is found; a handshake whose
 * calls were cut by it starts afresh.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROC_TRACED_ENTRIES);
	__type(key, __u32);
	__type(value, __u64);
} hs_detached SEC(".maps");

/*
 * Threads inside a handshake call right now. sched_switch runs on every context
 * switch of the machine: while no handshake is in flight it stops at this one load.
 */
__u32 hs_active = 0;

/* Entries in hs_threads, in a call or kept between calls; a thread's entry stays between its
 * calls (an insert and a delete fewer per call) while fewer than HS_THREADS_KEPT are there,
 * half the table: the other half is for threads that have none yet. */
__u32 hs_entries = 0;
#define HS_THREADS_KEPT 8192

/* Set once a memory-BIO server's handshake call has ended (hs_last has had an entry): until
 * then a server's first send looks up no hs_last entry. */
__u32 hs_membio_seen = 0;

/* The process's probes were all gone at some point after `ns`: a call open then never
 * returns through them. */
static __always_inline bool hs_before_detach(__u32 tgid, __u64 ns)
{
	__u64 *d = bpf_map_lookup_elem(&hs_detached, &tgid);
	return d && ns <= (*d & ~HS_DETACHING);
}

/* A handshake whose last call seen ended at `ns` may have ended since without its return
 * seen: the probes were all gone after `ns`, or are being removed now. */
static __always_inline bool hs_end_unseen(__u32 tgid, __u64 ns)
{
	__u64 *d = bpf_map_lookup_elem(&hs_detached, &tgid);
	return d && ((*d & HS_DETACHING) || ns <= *d);
}

/* A probe program's hit, timed from here to the program's end (the cleanup runs on every
 * return): what the agent charges to the budget is the trap (calibrated) plus this. */
struct hs_hit_timer {
	struct hs_hits *h;
	__u64 t0;
};

static __always_inline struct hs_hit_timer hs_count_hit(__u32 tgid, bool ret)
{
	struct hs_hits zero = {};
	struct hs_hit_timer tm = { .t0 = bpf_ktime_get_ns() };
	struct hs_hits *h = lookup_or_init(&hs_hits, &tgid, &zero, STAT_HS_HITS_FULL);
	if (!h)
		return tm;
	if (ret)
		__sync_fetch_and_add(&h->returns, 1);
	else
		__sync_fetch_and_add(&h->entries, 1);
	tm.h = h;
	return tm;
}

static __always_inline void hs_hit_end(struct hs_hit_timer *tm)
{
	if (tm->h)
		__sync_fetch_and_add(&tm->h->prog_ns, bpf_ktime_get_ns() - tm->t0);
}

/* Counts this probe hit and times the rest of the program. */
#define HS_HIT(tgid, ret) \
	struct hs_hit_timer hs_timer_ __attribute__((cleanup(hs_hit_end), unused)) = hs_count_hit(tgid, ret)
/* The time of the hit, as HS_HIT read it: the time a call enters or returns (one clock read
 * fewer per hit; the program's own lookups before it are not the call's). */
#define HS_HIT_NS (hs_timer_.t0)

static __always_inline void hs_set_oncpu(__u32 tid)
{
	struct cpu_now *c = this_cpu();
	if (c)
		c->in_hs = tid;
}

/* The thread running here is inside a handshake call. */
static __always_inline bool in_handshake_here(__u32 tid)
{
	struct cpu_now *c = this_cpu();
	return c && c->in_hs == tid;
}

/* The thread's entry as it is, in a call or not, NULL if it has none. */
static __always_inline struct hs_thread *hs_thread_entry(__u32 tid)
{
	return bpf_map_lookup_elem(&hs_threads, &tid);
}

/* The entry is inside a call (or window): depth 0 is a kept entry between calls. */
static __always_inline bool hs_thread_in_call(const struct hs_thread *t)
{
	return t && t->depth;
}

/* Removes the thread's entry, ending its call if one is open. `alone`: the caller is the
 * thread itself, or the thread is not running (sched_switch's next), so nothing ends the
 * entry meanwhile. Otherwise (Go's cross-thread end, go_enter) the owner may be ending a
 * call of its own in it with a plain store (hs_thread_end), which counts that end itself:
 * the decrement here is only a Go stretch's, which every thread ends with a delete (the
 * delete happens once, so does its decrement). A thread that then never ends its call
 * leaves the count one too high, which costs lookups; never one too low, which would stop
 * sched_switch from stopping a call's clock. */
static __always_inline void hs_thread_drop(__u32 tid, bool alone)
{
	struct hs_thread *t = hs_thread_entry(tid);
	if (!t)
		return;
	bool counted = t->depth && (alone || t->go);
	if (bpf_map_delete_elem(&hs_threads, &tid) == 0) {
		__sync_fetch_and_add(&hs_entries, -1);
		if (counted)
			__sync_fetch_and_add(&hs_active, -1);
	}
	if (in_handshake_here(tid))
		hs_set_oncpu(0);
}

/* Thread `tid` left its outermost call (or window) `t`; `own`: the thread running here is
 * `tid`. The entry stays for its next call (no delete now, no insert then) when the thread
 * itself ends a library call or an estimate window: no other thread ends those, so a plain
 * store suffices. A Go stretch, which another thread may end (go_enter), goes with a
 * delete, and so does any entry ended by another thread (`t` may meanwhile hold that
 * thread's next call: a store through it would end that one); so does any entry while the
 * table holds HS_THREADS_KEPT or more (threads that handshook once stay, until they exit). */
static __always_inline void hs_thread_end(__u32 tid, struct hs_thread *t, bool own)
{
	/* (inlined: see conn_handshake_io for why, and for what the send capture's
	 * verification costs) */
	if (!own || t->go || hs_entries >= HS_THREADS_KEPT) {
		hs_thread_drop(tid, own);
		return;
	}
	if (!t->depth)
		return;
	t->depth = 0;
	__sync_fetch_and_add(&hs_active, -1);
	if (in_handshake_here(tid))
		hs_set_oncpu(0);
}

/* A thread's open call (or window) in hs_threads, NULL if none; an entry left behind by a
 * detach (the call entered before it never returns through the probe) is dropped on the
 * way. `alone`: as hs_thread_drop's. */
static __always_inline struct hs_thread *hs_live_in(__u32 tid, struct hs_thread *t, bool alone)
{
	if (!hs_thread_in_call(t))
		return NULL;
	if (hs_before_detach(t->tgid, t->enter_ns)) {
		hs_thread_drop(tid, alone);
		return NULL;
	}
	return t;
}

/* hs_live_in, looked up, for the thread running here or one not running. */
static __always_inline struct hs_thread *hs_live_thread(__u32 tid)
{
	return hs_live_in(tid, hs_thread_entry(tid), true);
}

/* hs_live_in, looked up, for a thread that may be running elsewhere (go_enter's). */
static __always_inline struct hs_thread *hs_live_other(__u32 tid)
{
	return hs_live_in(tid, hs_thread_entry(tid), false);
}

/* A thread exited (proc.bpf.h): its entry goes, and one that dies inside a call never returns. */
static __always_inline void hs_thread_exited(__u32 tid)
{
	if (hs_entries)
		hs_thread_drop(tid, true);
}

/* One handshake (or, `estimate` set, one part of the kernel estimate's) to the agent. */
static __always_inline void hs_emit(__u32 tgid, const struct hs_state *st, __u8 result, __u8 estimate)
{
	struct hs_event *e = bpf_ringbuf_reserve(&hs_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(STAT_HS_EVENTS_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->duration_ns = st->last_ns - st->first_ns;
	e->cpu_ns = st->cpu_ns;
	e->tgid = tgid;
	e->calls = st->calls;
	e->role = st->role;
	e->result = result;
	e->estimate = estimate;
	e->conn_id = st->conn_id;
	e->conn_start = st->conn_start;
	e->end_ns = st->last_ns;
	bpf_ringbuf_submit(e, RB_LAZY(&hs_events, HS_RINGBUF_BYTES));
}

/* Some thread is inside a handshake call (or a kernel-estimate window) right now. */
static __always_inline bool hs_any_active(void)
{
	return hs_active != 0;
}

/* The thread's open call (or window) as it is, NULL if none (hs_live_thread also drops one
 * a detach left behind). */
static __always_inline struct hs_thread *hs_thread_of(__u32 tid)
{
	struct hs_thread *t = hs_thread_entry(tid);
	return hs_thread_in_call(t) ? t : NULL;
}

/* The thread's call (or window) `nt` begins, in `t`, the thread's kept entry, if it has one
 * (no call of its own is open: the caller checked); false if hs_threads is full. A thread
 * starts only its own tid: no race. */
static __always_inline bool hs_thread_start_in(__u32 tid, struct hs_thread *t, const struct hs_thread *nt)
{
	if (t) {
		*t = *nt;
	} else {
		if (!map_insert(&hs_threads, &tid, nt, BPF_NOEXIST, STAT_HS_THREAD_MAP_FULL))
			return false;
		__sync_fetch_and_add(&hs_entries, 1);
	}
	__sync_fetch_and_add(&hs_active, 1);
	hs_set_oncpu(tid);
	return true;
}

/* hs_thread_start_in, the entry looked up. */
static __always_inline bool hs_thread_start(__u32 tid, const struct hs_thread *nt)
{
	return hs_thread_start_in(tid, hs_thread_entry(tid), nt);
}

/* The thread enters a handshake call on `ssl` at `now` in its entry `e` (kept, or NULL:
 * none), no call of its own open (the caller checked). */
static __always_inline void hs_open_in(__u32 tid, struct hs_thread *e, __u32 tgid, __u64 ssl, __u8 role, __u8 go,
                                       __u64 now)
{
	struct hs_thread nt = {
		.ssl = ssl,
		.enter_ns = now,
		.oncpu_ns = now,
		.tgid = tgid,
		.depth = 1,
		.role = role,
		.go = go,
	};
	hs_thread_start_in(tid, e, &nt);
}

/* hs_open_in, the entry looked up. */
static __always_inline void hs_open(__u32 tid, __u32 tgid, __u64 ssl, __u8 role, __u8 go)
{
	hs_open_in(tid, hs_thread_entry(tid), tgid, ssl, role, go, bpf_ktime_get_ns());
}

static __always_inline int hs_enter(void *ssl, __u8 role)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	HS_HIT(id >> 32, false);
	struct hs_thread *e = hs_thread_entry(tid);
	bool open = hs_thread_in_call(e);
	struct hs_thread *t = hs_live_in(tid, e, true);

	if (t && t->est) {
		/* The kernel estimate's window is open on this thread (its process's probes came
		 * in the middle of the connection: a process forked per connection, whose server
		 * read the client's next message before it slept): its part so far is reported,
		 * and the probed call times what follows. Dropped, a handshake lost its CPU and
		 * the call became a figure of its own. */
		est_close(tid, t);
		t = NULL;
	}
	if (t && t->ssl != (__u64)ssl && !t->go) {
		/* The thread's open call is another connection's: its return was never seen (the
		 * entry probe attached before the return probe while the call was under way, a
		 * return the kernel could not hook). Left, it would make every later call of
		 * the thread look nested in it, and none would end. */
		hs_thread_end(tid, t, true);
		t = NULL;
	}
	if (t) {
		/* nested call (SSL_accept -> SSL_do_handshake): the outermost one times it */
		t->depth++;
		if (role != HS_ROLE_UNKNOWN)
			t->role = role;
		return 0;
	}
	/* the entry as looked up, unless a call in it was ended on the way (and maybe deleted) */
	hs_open_in(tid, open ? hs_thread_entry(tid) : e, id >> 32, (__u64)ssl, role, 0, HS_HIT_NS);
	return 0;
}

/* A handshake call of thread `tid` read or wrote connection `conn_id` (accepted at
 * `conn_start`): the call is linked to it. False when the thread's open window is the
 * kernel estimate's (estimate.bpf.h), not a TLS library call. */
static __always_inline bool hs_link_io(__u32 tid, __u64 conn_id, __u64 conn_start)
{
	struct hs_thread *t = hs_thread_of(tid);
	if (t && t->est)
		return false;
	if (t) {
		t->io = 1;
		if (!t->conn_id) {
			t->conn_id = conn_id;
			t->conn_start = conn_start;
		}
	}
	return true;
}

/* The first send on a connection, by thread `tid` of `tgid` outside any handshake call: a
 * memory-BIO server's handshake call that just returned on this thread (hs_last) made its
 * flight, and is linked to the connection. */
static __always_inline void hs_link_membio(__u32 tid, __u32 tgid, __u64 conn_id, __u64 conn_start)
{
	if (!hs_membio_seen)
		return; /* no memory-BIO call has ended yet: hs_last is empty (no lookup per send) */
	struct hs_key *k = bpf_map_lookup_elem(&hs_last, &tid);
	if (!k)
		return;
	struct hs_state *st = bpf_map_lookup_elem(&hs_conns, k);
	if (st && !st->conn_id && k->tgid == tgid) {
		st->conn_id = conn_id;
		st->conn_start = conn_start;
	}
	bpf_map_delete_elem(&hs_last, &tid);
}

/* How a handshake call ended, as its library's return value says (hs_exit_*). */
#define HS_CALL_DONE 0   /* the handshake finished */
#define HS_CALL_FAILED 1 /* it failed, and the library says so at once */
#define HS_CALL_AGAIN 2  /* call again (would block), or an error: the free probe tells which */

/* The thread's outermost handshake call `t` ends with `outcome`: its on-CPU time is added to
 * its connection's handshake, which is reported when done or failed. `membio`: a server
 * call without socket I/O of its own may have left its flight for the thread's next write
 * (a library call; not a Go goroutine's part, whose next write may be another's). */
static __always_inline void hs_call_end_by(__u32 tid, struct hs_thread *t, __u8 outcome, bool membio, const bool own,
                                           __u64 now)
{
	__u64 cpu = t->cpu_ns + (t->oncpu_ns ? now - t->oncpu_ns : 0);
	struct hs_key key = { .ssl = t->ssl, .tgid = t->tgid };
	__u64 enter_ns = t->enter_ns;
	__u8 role = t->role;
	__u8 io = t->io;
	__u64 conn_id = t->conn_id, conn_start = t->conn_start;
	hs_thread_end(tid, t, own);
	if (membio && !io && role == HS_ROLE_SERVER) {
		/* a server handshake on a memory BIO: see cpu_now.after_hs and hs_last */
		struct cpu_now *c = this_cpu();
		if (c)
			c->after_hs = tid;
		if (!hs_membio_seen)
			hs_membio_seen = 1;
		map_insert(&hs_last, &tid, &key, BPF_ANY, STAT_HS_LAST_FULL);
	}

	struct hs_state fresh = {};
	struct hs_state *st = lookup_or_init(&hs_conns, &key, &fresh, STAT_HS_SSL_MAP_FULL);
	if (!st)
		return;
	if (st->done)
		return; /* post-handshake call (HAProxy calls SSL_do_handshake again) */
	if (st->calls && hs_before_detach(key.tgid, st->last_ns)) {
		/* the probes were away during part of this handshake: measure only what follows */
		__builtin_memset(st, 0, sizeof(*st));
	}
	if (!st->first_ns)
		st->first_ns = enter_ns;
	if (role != HS_ROLE_UNKNOWN)
		st->role = role;
	if (conn_id && !st->conn_id) {
		st->conn_id = conn_id;
		st->conn_start = conn_start;
	}
	/* A library with no role of its own in the call (gnutls_handshake,
	 * mbedtls_ssl_handshake): a call that read or wrote an accepted connection of a
	 * watched port (conn.bpf.h) is the server's. */
	if (st->role == HS_ROLE_UNKNOWN && st->conn_id)
		st->role = HS_ROLE_SERVER;
	st->last_ns = now;
	st->cpu_ns += cpu;
	st->calls++;

	if (outcome == HS_CALL_DONE) {
		st->done = 1;
		hs_emit(key.tgid, st, HS_RESULT_OK, 0);
	} else if (outcome == HS_CALL_FAILED) {
		st->done = 1;
		hs_emit(key.tgid, st, HS_RESULT_FAILED, 0);
	}
}

/* hs_call_end_by, ended now by the thread itself. */
static __always_inline void hs_call_end(__u32 tid, struct hs_thread *t, __u8 outcome, bool membio)
{
	hs_call_end_by(tid, t, outcome, membio, true, bpf_ktime_get_ns());
}

static __always_inline int hs_return(__u8 outcome)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	HS_HIT(id >> 32, true);
	struct hs_thread *t = hs_thread_of(tid);

	if (!t) {
		stat_inc(STAT_HS_UNMATCHED_RETURN); /* not a failure: stats.h */
		return 0;
	}
	if (t->depth > 1) {
		t->depth--;
		return 0;
	}
	hs_call_end_by(tid, t, outcome, true, true, HS_HIT_NS);
	return 0;
}

static __always_inline int hs_set_role(void *ssl, __u8 role)
{
	struct hs_key key = { .ssl = (__u64)ssl, .tgid = bpf_get_current_pid_tgid() >> 32 };
	HS_HIT(key.tgid, false);
	/* a new connection, or an SSL object reused after SSL_clear: start afresh */
	struct hs_state st = { .role = role };
	map_insert(&hs_conns, &key, &st, BPF_ANY, STAT_HS_SSL_MAP_FULL);
	return 0;
}

#endif
