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
#include <bpf/bpf_endian.h>
#include "handshake.h"
#include "conn.h"
#include "cpu.h"

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
 * Per CPU, so that the per-read/write socket hooks learn what they need with one per-CPU
 * load instead of a hash lookup:
 * - in_hs: the thread running there while inside a handshake call, 0 if none (kept by the
 *   handshake probes and sched_switch);
 * - after_hs: a thread whose handshake call just returned without touching a socket itself
 *   (the library works on a memory BIO, as in node): the application's next socket
 *   write carries that call's output, a handshake flight, not a response.
 */
struct hs_cpu {
	__u32 in_hs;
	__u32 after_hs;
	__u32 run_tgid;  /* the traced process running here (cpu_procs), 0 if none */
	__u32 pad;
	__u64 run_since; /* when its on-CPU time was last added to cpu_procs */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_cpu);
} hs_oncpu SEC(".maps");

static __always_inline struct hs_cpu *this_cpu(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&hs_oncpu, &zero);
}

static __always_inline void set_oncpu(__u32 tid)
{
	struct hs_cpu *c = this_cpu();
	if (c)
		c->in_hs = tid;
}

static __always_inline bool in_handshake_here(__u32 tid)
{
	struct hs_cpu *c = this_cpu();
	return c && c->in_hs == tid;
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
	__u8 io = t->io;
	thread_done(tid);
	if (!io && role == HS_ROLE_SERVER) {
		/* a server handshake on a memory BIO: see hs_cpu.after_hs */
		struct hs_cpu *c = this_cpu();
		if (c)
			c->after_hs = tid;
	}

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

/*
 * CPU attribution. cpu_procs holds the traced processes (filled by the agent): their exact
 * on-CPU time is summed here at every context switch (one hash lookup per switch of the
 * machine, two when a traced process is involved), and a per-CPU perf event samples what
 * they run (cpu_sample) for the split into handshake/crypto/kernel_net/other.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct cpu_proc);
} cpu_procs SEC(".maps");

/* Resized by the agent to the number of CPUs and the sampling frequency. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} cpu_samples SEC(".maps");

static __always_inline void cpu_account(struct hs_cpu *c, __u64 now)
{
	struct cpu_proc *p = bpf_map_lookup_elem(&cpu_procs, &c->run_tgid);

	if (p && now > c->run_since)
		__sync_fetch_and_add(&p->oncpu_ns, now - c->run_since);
	c->run_since = now;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(hs_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = 0;
	__u32 tid;
	struct hs_cpu *c = this_cpu();

	if (!c)
		return 0;
	if (c->run_tgid) {
		now = bpf_ktime_get_ns();
		cpu_account(c, now);
		c->run_tgid = 0;
	}
	__u32 tgid = BPF_CORE_READ(next, tgid);
	if (tgid && bpf_map_lookup_elem(&cpu_procs, &tgid)) {
		if (!now)
			now = bpf_ktime_get_ns();
		c->run_tgid = tgid;
		c->run_since = now;
	}

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
 * Connection accounting, per connection accepted on a listening port of a traced process
 * (hs_ports, kept by the agent). State changes run in softirq context, where the current
 * task is not the server: a connection belongs to the port it was accepted on.
 *
 * - accepted: SYN_RECV -> ESTABLISHED on a watched port creates the connection's socket-
 *   local storage (freed with the socket) and counts the port's accepted connections;
 * - who closed: the first transition out of ESTABLISHED says who sent the first FIN
 *   (FIN_WAIT1: the server, CLOSE_WAIT: the client); the client's FIN first makes it
 *   "client" whatever follows; otherwise a reset (tcp_receive_reset/tcp_send_reset, or a
 *   socket aborted from ESTABLISHED: unread data, SO_LINGER 0, the kernel sends its reset
 *   right after) makes it "reset", and the server's FIN first "server";
 * - TIME_WAIT: the server's full socket goes FIN_WAIT2 -> CLOSE or CLOSING -> CLOSE when
 *   the kernel replaces it with a timewait socket. With the peer's FIN already received
 *   (SOCK_DONE) or from CLOSING, that socket is in TIME_WAIT; an orphaned socket whose FIN
 *   was acknowledged before the peer's FIN came is handed over in FIN_WAIT2 and reaches
 *   TIME_WAIT only if that FIN follows: the agent finds out through sock_diag;
 * - requests: an application data exchange is data from the client followed by data
 *   from the server (sock_recv_length/sock_send_length). Reads and writes made inside a
 *   handshake call, or the first write after a handshake call that did no socket I/O
 *   itself (memory BIO), are the handshake's, not requests.
 * One event per connection, at close. Per socket read/write: one socket-storage lookup,
 * which finds nothing on sockets that are not watched.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct hs_port);
	__type(value, struct hs_port_stats);
} hs_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct conn_state);
} conn_store SEC(".maps");

#define CONN_RINGBUF_BYTES (512 * 1024)
#define CONN_WAKEUP_BYTES (CONN_RINGBUF_BYTES / 4)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CONN_RINGBUF_BYTES);
} conn_events SEC(".maps");

#define AF_INET 2
#define AF_INET6 10
#define MSG_PEEK 2

static __always_inline struct conn_state *conn_of(const struct sock *sk)
{
	return bpf_sk_storage_get(&conn_store, (struct sock *)sk, 0, 0);
}

static __always_inline void conn_accepted(const struct sock *sk)
{
	struct hs_port p = {
		.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum),
		.port = BPF_CORE_READ(sk, __sk_common.skc_num),
	};
	struct hs_port_stats *ps = bpf_map_lookup_elem(&hs_ports, &p);
	if (!ps)
		return;
	struct conn_state init = {
		.start_ns = bpf_ktime_get_ns(),
		.netns = p.netns,
		.port = p.port,
	};
	if (!bpf_sk_storage_get(&conn_store, (struct sock *)sk, &init, BPF_SK_STORAGE_GET_F_CREATE)) {
		stat_inc(HS_STAT_CONN_STORAGE_FULL);
		return;
	}
	__sync_fetch_and_add(&ps->accepted, 1);
}

static __always_inline bool fin_received(const struct sock *sk)
{
	unsigned long flags = BPF_CORE_READ(sk, __sk_common.skc_flags);
	return flags & (1UL << bpf_core_enum_value(enum sock_flags, SOCK_DONE));
}

static __always_inline void conn_closed(const struct sock *sk, struct conn_state *c, int oldstate)
{
	__u8 by, tw = CONN_TW_NO;

	if (c->first_fin == CONN_BY_CLIENT) {
		/* The client ended it. A reset may follow: a server that answers the client's FIN
		 * with its own close_notify gets one from a client socket that is gone. */
		by = CONN_BY_CLIENT;
	} else if (c->reset) {
		/* before any FIN (SO_LINGER 0, an abort), or after the server's: the client closed
		 * with the server's data (close_notify, FIN) unread */
		by = CONN_BY_RESET;
	} else if (oldstate == TCP_FIN_WAIT2 || oldstate == TCP_CLOSING) {
		by = CONN_BY_SERVER;
		tw = (oldstate == TCP_CLOSING || fin_received(sk)) ? CONN_TW_YES : CONN_TW_MAYBE;
	} else if (oldstate == TCP_LAST_ACK) {
		by = CONN_BY_CLIENT;
	} else if (oldstate == TCP_FIN_WAIT1) {
		by = CONN_BY_SERVER; /* our FIN was never acknowledged: retransmissions timed out */
	} else {
		by = CONN_BY_RESET; /* aborted from ESTABLISHED or CLOSE_WAIT */
	}

	struct conn_event *e = bpf_ringbuf_reserve(&conn_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(HS_STAT_CONN_EVENTS_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->duration_ns = bpf_ktime_get_ns() - c->start_ns;
	e->netns = c->netns;
	e->port = c->port;
	e->requests = c->requests;
	e->closed_by = by;
	e->time_wait = tw;
	e->tls = c->tls;
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (e->family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->saddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&e->daddr, sk, __sk_common.skc_v6_daddr);
	} else {
		BPF_CORE_READ_INTO((__u32 *)e->saddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)e->daddr, sk, __sk_common.skc_daddr);
	}
	bpf_ringbuf_submit(e, bpf_ringbuf_query(&conn_events, BPF_RB_AVAIL_DATA) > CONN_WAKEUP_BYTES ?
				      BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conn_state_change, const struct sock *sk, const int oldstate, const int newstate)
{
	if (oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED) {
		conn_accepted(sk);
		return 0;
	}
	struct conn_state *c = conn_of(sk);
	if (!c)
		return 0;
	if (oldstate == TCP_ESTABLISHED && !c->first_fin) {
		if (newstate == TCP_FIN_WAIT1)
			c->first_fin = CONN_BY_SERVER;
		else if (newstate == TCP_CLOSE_WAIT)
			c->first_fin = CONN_BY_CLIENT;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	conn_closed(sk, c, oldstate);
	bpf_sk_storage_delete(&conn_store, (struct sock *)sk);
	return 0;
}

static __always_inline void conn_reset(const struct sock *sk)
{
	struct conn_state *c = conn_of(sk);
	if (c)
		c->reset = 1;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(conn_rcv_reset, const struct sock *sk)
{
	conn_reset(sk);
	return 0;
}

/* Also fires for resets answering packets that match no full socket: then sk is NULL or
 * a timewait/request socket, which has no storage. */
SEC("tp_btf/tcp_send_reset")
int BPF_PROG(conn_send_reset, const struct sock *sk)
{
	conn_reset(sk);
	return 0;
}

/* A handshake call read or wrote this connection: it carries TLS, and so does its port. */
static __always_inline void handshake_io(struct conn_state *c, __u32 tid)
{
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);
	if (t)
		t->io = 1;
	if (c->tls)
		return;
	c->tls = 1;
	struct hs_port p = { .netns = c->netns, .port = c->port };
	struct hs_port_stats *ps = bpf_map_lookup_elem(&hs_ports, &p);
	if (ps)
		ps->flags |= HS_PORT_TLS;
}

/*
 * The connection's state when this read or write of sk is the application's, NULL when
 * the socket is not watched or the I/O belongs to the handshake: made inside a handshake
 * call, or the first write after a memory-BIO server handshake call (hs_cpu.after_hs).
 */
static __always_inline struct conn_state *app_io(struct sock *sk, bool write)
{
	struct conn_state *c = conn_of(sk);
	if (!c)
		return NULL;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hs_cpu *cpu = this_cpu();
	if (!cpu)
		return NULL;
	if (cpu->in_hs == tid) {
		handshake_io(c, tid);
		return NULL;
	}
	if (cpu->after_hs == tid) {
		cpu->after_hs = 0;
		if (write)
			return NULL;
	}
	return c;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(conn_recv, struct sock *sk, int ret, int flags)
{
	struct conn_state *c = app_io(sk, false);
	if (c && ret > 0 && !(flags & MSG_PEEK))
		c->dir = CONN_DIR_IN;
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(conn_send, struct sock *sk, int ret)
{
	struct conn_state *c = app_io(sk, true);
	if (!c || ret <= 0)
		return 0;
	if (c->dir == CONN_DIR_IN)
		c->requests++;
	c->dir = CONN_DIR_OUT;
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

/*
 * One sample of a traced process: whether the thread is inside a handshake call, where it
 * is (kernel and user stacks), and its on-CPU time brought up to date, so that a thread
 * that never switches out is counted too. Everything else is decided in user space.
 */
SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	long n;

	if (!tid)
		return 0; /* idle */
	if (!bpf_map_lookup_elem(&cpu_procs, &tgid))
		return 0;
	struct hs_cpu *c = this_cpu();
	if (c && c->run_tgid == tgid)
		cpu_account(c, bpf_ktime_get_ns());

	struct cpu_sample *e = bpf_ringbuf_reserve(&cpu_samples, sizeof(*e), 0);
	if (!e) {
		stat_inc(HS_STAT_SAMPLES_LOST);
		return 0;
	}
	e->tgid = tgid;
	e->tid = tid;
	e->flags = 0;
	if (bpf_map_lookup_elem(&hs_threads, &tid))
		e->flags |= CPU_SAMPLE_HANDSHAKE;
	/* ctx fields are read directly (the verifier rewrites them), whole: no narrowed load */
	__u64 cs = *(volatile __u64 *)&ctx->regs.cs;
	e->sp_word = 0;
	if ((cs & 3) == 3) {
		e->flags |= CPU_SAMPLE_USER;
		__u64 sp = *(volatile __u64 *)&ctx->regs.sp;
		if (bpf_probe_read_user(&e->sp_word, sizeof(e->sp_word), (void *)sp))
			e->sp_word = 0;
	}
	n = 0;
	if (!(e->flags & CPU_SAMPLE_USER))
		n = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
	e->kdepth = n > 0 ? (__u64)n / 8 : 0;
	n = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK);
	e->udepth = n > 0 ? (__u64)n / 8 : 0;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP); /* the agent reads them on its own clock */
	return 0;
}
