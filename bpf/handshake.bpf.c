// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Handshake accounting: count TLS handshakes per process and measure their
 * wall-clock duration and on-CPU time.
 *
 * The agent attaches the uprobes per process (never system-wide) to the
 * library's handshake state machine (ossl_statem_accept/ossl_statem_connect,
 * found by symbol or from the SSL_METHOD tables) or, when that cannot be found,
 * to the exported SSL_do_handshake/SSL_accept/SSL_connect. A non-blocking server
 * calls them several times per connection: one handshake is the sum of its
 * calls, reported once, when a call returns 1 (ok) or 0 (failed), or when the
 * SSL object is freed before the handshake finished (failed).
 *
 * On-CPU time: sched_switch stops and restarts the clock of a thread that is
 * inside a handshake call, so time spent switched out is not counted.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "handshake.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct hs_thread);
} hs_threads SEC(".maps");

/* LRU: a connection whose SSL_free we never see (attached late) cannot leak. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct hs_key);
	__type(value, struct hs_state);
} hs_conns SEC(".maps");

#define HS_RINGBUF_BYTES (256 * 1024)
#define HS_WAKEUP_BYTES (HS_RINGBUF_BYTES / 4)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, HS_RINGBUF_BYTES);
} hs_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} hs_stats SEC(".maps");

/*
 * Threads inside a handshake call right now. sched_switch runs on every context
 * switch of the machine: while no handshake is in flight it stops at this one load.
 */
__u32 hs_active = 0;

/*
 * Per CPU: the thread running there while inside a handshake call, 0 if none. Kept by
 * the handshake probes and sched_switch, so that per-read hooks can tell "this thread is
 * in a handshake" with one per-CPU load instead of a hash lookup.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} hs_oncpu SEC(".maps");

static __always_inline void set_oncpu(__u32 tid)
{
	__u32 zero = 0;
	__u32 *v = bpf_map_lookup_elem(&hs_oncpu, &zero);
	if (v)
		*v = tid;
}

static __always_inline bool in_handshake_here(__u32 tid)
{
	__u32 zero = 0;
	__u32 *v = bpf_map_lookup_elem(&hs_oncpu, &zero);
	return v && *v == tid;
}

static __always_inline void thread_done(__u32 tid)
{
	if (bpf_map_delete_elem(&hs_threads, &tid) == 0)
		__sync_fetch_and_add(&hs_active, -1);
	if (in_handshake_here(tid))
		set_oncpu(0);
}

static __always_inline void stat_inc(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&hs_stats, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline struct hs_event *reserve(void)
{
	struct hs_event *e = bpf_ringbuf_reserve(&hs_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(HS_STAT_EVENTS_LOST);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	return e;
}

static __always_inline void submit(struct hs_event *e)
{
	/* Wake the agent only when the buffer fills up: it also polls every 200 ms, so
	 * at thousands of handshakes per second it wakes a few times, not per event. */
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&hs_events, BPF_RB_AVAIL_DATA) > HS_WAKEUP_BYTES ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void emit(__u32 tgid, const struct hs_state *st, __u8 result)
{
	struct hs_event *e = reserve();
	if (!e)
		return;
	e->duration_ns = st->last_ns - st->first_ns;
	e->cpu_ns = st->cpu_ns;
	e->tgid = tgid;
	e->calls = st->calls;
	e->role = st->role;
	e->result = result;
	e->kind = HS_EV_HANDSHAKE;
	submit(e);
}

static __always_inline int hs_enter(void *ssl, __u8 role)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);

	if (t) {
		/* nested call (SSL_accept -> SSL_do_handshake): the outermost one times it */
		t->depth++;
		if (role != HS_ROLE_UNKNOWN)
			t->role = role;
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	struct hs_thread nt = {
		.ssl = (__u64)ssl,
		.enter_ns = now,
		.oncpu_ns = now,
		.tgid = id >> 32,
		.depth = 1,
		.role = role,
	};
	if (bpf_map_update_elem(&hs_threads, &tid, &nt, BPF_NOEXIST)) {
		stat_inc(HS_STAT_THREAD_MAP_FULL);
		return 0;
	}
	__sync_fetch_and_add(&hs_active, 1);
	set_oncpu(tid);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(hs_enter_server, void *ssl)
{
	return hs_enter(ssl, HS_ROLE_SERVER);
}

SEC("uprobe")
int BPF_KPROBE(hs_enter_client, void *ssl)
{
	return hs_enter(ssl, HS_ROLE_CLIENT);
}

/* SSL_do_handshake: the role comes from SSL_set_accept_state/SSL_set_connect_state. */
SEC("uprobe")
int BPF_KPROBE(hs_enter_any, void *ssl)
{
	return hs_enter(ssl, HS_ROLE_UNKNOWN);
}

SEC("uretprobe")
int BPF_KRETPROBE(hs_exit, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);

	if (!t) {
		stat_inc(HS_STAT_UNMATCHED_RETURN);
		return 0;
	}
	if (t->depth > 1) {
		t->depth--;
		return 0;
	}

	__u64 now = bpf_ktime_get_ns();
	__u64 cpu = t->cpu_ns + (t->oncpu_ns ? now - t->oncpu_ns : 0);
	struct hs_key key = { .ssl = t->ssl, .tgid = t->tgid };
	__u64 enter_ns = t->enter_ns;
	__u8 role = t->role;
	thread_done(tid);

	struct hs_state *st = bpf_map_lookup_elem(&hs_conns, &key);
	if (!st) {
		struct hs_state fresh = {};
		bpf_map_update_elem(&hs_conns, &key, &fresh, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&hs_conns, &key);
		if (!st) {
			stat_inc(HS_STAT_SSL_MAP_FULL);
			return 0;
		}
	}
	if (st->done)
		return 0; /* post-handshake call (HAProxy calls SSL_do_handshake again) */
	if (!st->first_ns)
		st->first_ns = enter_ns;
	if (role != HS_ROLE_UNKNOWN)
		st->role = role;
	st->last_ns = now;
	st->cpu_ns += cpu;
	st->calls++;

	if (ret == 1) {
		st->done = 1;
		emit(key.tgid, st, HS_RESULT_OK);
	} else if (ret == 0) {
		/* "not successful but shut down controlled" */
		st->done = 1;
		emit(key.tgid, st, HS_RESULT_FAILED);
	}
	/* ret < 0: WANT_READ/WANT_WRITE or an error; SSL_free tells which. */
	return 0;
}

static __always_inline int set_role(void *ssl, __u8 role)
{
	struct hs_key key = { .ssl = (__u64)ssl, .tgid = bpf_get_current_pid_tgid() >> 32 };
	/* a new connection, or an SSL object reused after SSL_clear: start afresh */
	struct hs_state st = { .role = role };
	if (bpf_map_update_elem(&hs_conns, &key, &st, BPF_ANY))
		stat_inc(HS_STAT_SSL_MAP_FULL);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(ssl_set_accept_state, void *ssl)
{
	return set_role(ssl, HS_ROLE_SERVER);
}

SEC("uprobe")
int BPF_KPROBE(ssl_set_connect_state, void *ssl)
{
	return set_role(ssl, HS_ROLE_CLIENT);
}

SEC("uprobe")
int BPF_KPROBE(ssl_free, void *ssl)
{
	struct hs_key key = { .ssl = (__u64)ssl, .tgid = bpf_get_current_pid_tgid() >> 32 };
	struct hs_state *st = bpf_map_lookup_elem(&hs_conns, &key);

	if (!st)
		return 0;
	if (!st->done && st->calls > 0)
		emit(key.tgid, st, HS_RESULT_FAILED);
	bpf_map_delete_elem(&hs_conns, &key);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(hs_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = 0;
	__u32 tid;

	if (!hs_active)
		return 0;
	tid = BPF_CORE_READ(prev, pid);
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);

	if (t && t->oncpu_ns) {
		now = bpf_ktime_get_ns();
		t->cpu_ns += now - t->oncpu_ns;
		t->oncpu_ns = 0;
	}
	tid = BPF_CORE_READ(next, pid);
	t = bpf_map_lookup_elem(&hs_threads, &tid);
	if (t) {
		t->oncpu_ns = now ? now : bpf_ktime_get_ns();
		set_oncpu(tid);
	} else {
		set_oncpu(0);
	}
	return 0;
}

/*
 * Connections that never reach the TLS library. nginx peeks at the first byte of a
 * connection and answers plain HTTP on its TLS port itself, without a handshake call.
 * So: connections accepted on the listening ports of traced processes (hs_ports, kept
 * by the agent) are remembered until they close; a handshake call that reads from one
 * (sock_recv_length while the thread is inside the call) marks it, and its port, as
 * TLS; one that closes unmarked is reported, and the agent counts it as a failed
 * handshake once its port is known to carry TLS. Per connection: one map insert and
 * one delete; per read: one load while no handshake is in flight.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hs_port);
	__type(value, __u32);
} hs_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct hs_sock);
} hs_socks SEC(".maps");

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(hs_sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	__u64 key = (__u64)sk;

	if (oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED) {
		struct hs_port p = {
			.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum),
			.port = BPF_CORE_READ(sk, __sk_common.skc_num),
		};
		if (!bpf_map_lookup_elem(&hs_ports, &p))
			return 0;
		struct hs_sock s = { .netns = p.netns, .port = p.port };
		bpf_map_update_elem(&hs_socks, &key, &s, BPF_ANY);
		return 0;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	struct hs_sock *s = bpf_map_lookup_elem(&hs_socks, &key);
	if (!s)
		return 0;
	if (!s->tls) {
		struct hs_event *e = reserve();
		if (e) {
			e->netns = s->netns;
			e->port = s->port;
			e->role = HS_ROLE_SERVER;
			e->result = HS_RESULT_FAILED;
			e->kind = HS_EV_NO_HANDSHAKE;
			submit(e);
		}
	}
	bpf_map_delete_elem(&hs_socks, &key);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(hs_sock_recv, struct sock *sk, int ret, int flags)
{
	if (!hs_active || !in_handshake_here((__u32)bpf_get_current_pid_tgid()))
		return 0;
	__u64 key = (__u64)sk;
	struct hs_sock *s = bpf_map_lookup_elem(&hs_socks, &key);
	if (!s || s->tls)
		return 0;
	s->tls = 1;
	struct hs_port p = { .netns = s->netns, .port = s->port };
	__u32 *flags_p = bpf_map_lookup_elem(&hs_ports, &p);
	if (flags_p)
		*flags_p |= HS_PORT_TLS;
	return 0;
}

/* A thread that dies inside a handshake call never returns from it. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(hs_thread_exit, struct task_struct *task)
{
	__u32 tid;

	if (!hs_active)
		return 0;
	tid = BPF_CORE_READ(task, pid);
	thread_done(tid);
	return 0;
}
