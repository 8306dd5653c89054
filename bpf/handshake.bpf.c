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
#include "wire.h"

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
 * The SSL object of a server handshake call that just returned without socket I/O of its
 * own (memory BIO, as in node), per thread: the thread's next write on a connection whose
 * handshake output is being captured carries that call's flight, so it links the two.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct hs_key);
} hs_last SEC(".maps");

/* Switches the agent sets at run time (hs_ctl, handshake.h). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_ctl);
} hs_ctl SEC(".maps");

/* Uprobe hits per traced process: the agent keeps their cost under its overhead budget. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
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
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} hs_detached SEC(".maps");

static __always_inline bool before_detach(__u32 tgid, __u64 ns)
{
	__u64 *d = bpf_map_lookup_elem(&hs_detached, &tgid);
	return d && ns <= *d;
}

static __always_inline void count_hit(__u32 tgid, bool ret)
{
	struct hs_hits *h = bpf_map_lookup_elem(&hs_hits, &tgid);
	if (!h) {
		struct hs_hits zero = {};
		bpf_map_update_elem(&hs_hits, &tgid, &zero, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&hs_hits, &tgid);
		if (!h)
			return;
	}
	if (ret)
		__sync_fetch_and_add(&h->returns, 1);
	else
		__sync_fetch_and_add(&h->entries, 1);
}

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
	__u64 run_since; /* its task's se.sum_exec_runtime when last added to cpu_procs */
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

/* A thread's entry in hs_threads, NULL if none; an entry left behind by a detach (the
 * call entered before it never returns through the probe) is dropped on the way. */
static __always_inline struct hs_thread *live_thread(__u32 tid)
{
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);
	if (t && before_detach(t->tgid, t->enter_ns)) {
		thread_done(tid);
		return NULL;
	}
	return t;
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
	e->conn_sk = st->conn_sk;
	e->conn_start = st->conn_start;
	submit(e);
}

static __always_inline int hs_enter(void *ssl, __u8 role)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	count_hit(id >> 32, false);
	struct hs_thread *t = live_thread(tid);

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
	count_hit(id >> 32, true);
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
	__u64 conn_sk = t->conn_sk, conn_start = t->conn_start;
	thread_done(tid);
	if (!io && role == HS_ROLE_SERVER) {
		/* a server handshake on a memory BIO: see hs_cpu.after_hs and hs_last */
		struct hs_cpu *c = this_cpu();
		if (c)
			c->after_hs = tid;
		bpf_map_update_elem(&hs_last, &tid, &key, BPF_ANY);
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
	if (st->calls && before_detach(key.tgid, st->last_ns)) {
		/* the probes were away during part of this handshake: measure only what follows */
		__builtin_memset(st, 0, sizeof(*st));
	}
	if (!st->first_ns)
		st->first_ns = enter_ns;
	if (role != HS_ROLE_UNKNOWN)
		st->role = role;
	if (conn_sk && !st->conn_sk) {
		st->conn_sk = conn_sk;
		st->conn_start = conn_start;
	}
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
	count_hit(key.tgid, false);
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
	count_hit(key.tgid, false);
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

/*
 * The scheduler's own account of a task's CPU time (what /proc/PID/schedstat shows): it
 * leaves out time the hypervisor took (steal) and, with IRQ time accounting, interrupts
 * that ran on the task's time (loopback traffic's receive side, for one).
 */
static __always_inline __u64 exec_runtime(const struct task_struct *task)
{
	return BPF_CORE_READ(task, se.sum_exec_runtime);
}

static __always_inline void cpu_account(struct hs_cpu *c, const struct task_struct *task)
{
	struct cpu_proc *p = bpf_map_lookup_elem(&cpu_procs, &c->run_tgid);
	__u64 rt = exec_runtime(task);

	if (p && rt > c->run_since)
		__sync_fetch_and_add(&p->oncpu_ns, rt - c->run_since);
	c->run_since = rt;
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
		cpu_account(c, prev);
		c->run_tgid = 0;
	}
	__u32 tgid = BPF_CORE_READ(next, tgid);
	if (tgid && bpf_map_lookup_elem(&cpu_procs, &tgid)) {
		c->run_tgid = tgid;
		c->run_since = exec_runtime(next);
	}

	if (!hs_active)
		return 0;
	tid = BPF_CORE_READ(prev, pid);
	struct hs_thread *t = live_thread(tid);

	if (t && t->oncpu_ns) {
		now = bpf_ktime_get_ns();
		t->cpu_ns += now - t->oncpu_ns;
		t->oncpu_ns = 0;
	}
	tid = BPF_CORE_READ(next, pid);
	t = live_thread(tid);
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

/* The end of the capture of a connection's handshake output (defined with it below). */
static __always_inline void wire_finish(const struct sock *sk, struct conn_state *c, __u8 why);

/* The peer's FIN has arrived. */
static __always_inline bool fin_received(const struct sock *sk)
{
	unsigned long flags = BPF_CORE_READ(sk, __sk_common.skc_flags);
	return flags & (1UL << bpf_core_enum_value(enum sock_flags, SOCK_DONE));
}

/*
 * How far the server has read the client's byte stream (tcp copied_seq), not counting the
 * client's FIN: it takes a sequence number, which a reader that reached it consumed.
 */
static __always_inline __u32 data_read(const struct sock *sk)
{
	const struct tcp_sock *tp = (const struct tcp_sock *)sk;
	__u32 copied = BPF_CORE_READ(tp, copied_seq);

	if (fin_received(sk) && copied == BPF_CORE_READ(tp, rcv_nxt))
		copied--;
	return copied;
}

/* The smallest TLS 1.3 Finished record: header, SHA-256 verify data and its message
 * header, inner content type, AEAD tag. An alert (24 bytes, 30 after a change_cipher_spec)
 * is smaller. */
#define TLS13_MIN_FINISHED (5 + 4 + 32 + 1 + 16)

/* How a TLS 1.3 handshake ended, from what the server has read of the client's answer to
 * its encrypted flight (copied: tcp copied_seq now). */
static __always_inline __u8 tls13_answer(const struct conn_state *c, __u32 copied)
{
	__u32 answer = copied - c->rx_flight;
	if (answer == 0)
		return WIRE_END_CLOSED;
	return answer >= TLS13_MIN_FINISHED ? WIRE_END_FINISHED : WIRE_END_CLIENT_ALERT;
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
		/* what the client sends from here on is read past this position */
		.rx_mark = data_read(sk),
	};
	if (!bpf_sk_storage_get(&conn_store, (struct sock *)sk, &init, BPF_SK_STORAGE_GET_F_CREATE)) {
		stat_inc(HS_STAT_CONN_STORAGE_FULL);
		return;
	}
	__sync_fetch_and_add(&ps->accepted, 1);
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
	if (c->wire == WIRE_SEALED)
		wire_finish(sk, c, tls13_answer(c, data_read(sk)));
	else if (c->wire == WIRE_PLAIN)
		wire_finish(sk, c, WIRE_END_CLOSED);
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

/* The connection carries TLS, and so does its port. */
static __always_inline void mark_tls(struct conn_state *c)
{
	if (c->tls)
		return;
	c->tls = 1;
	struct hs_port p = { .netns = c->netns, .port = c->port };
	struct hs_port_stats *ps = bpf_map_lookup_elem(&hs_ports, &p);
	if (ps)
		ps->flags |= HS_PORT_TLS;
}

/* A handshake call read or wrote this connection. */
static __always_inline void handshake_io(struct conn_state *c, const struct sock *sk, __u32 tid)
{
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);
	if (t) {
		t->io = 1;
		if (!t->conn_sk) {
			t->conn_sk = (__u64)sk;
			t->conn_start = c->start_ns;
		}
	}
	mark_tls(c);
}

/*
 * The connection's state when this read or write of sk is the application's, NULL when
 * the I/O belongs to the handshake: made inside a handshake call, or the first write after
 * a memory-BIO server handshake call (hs_cpu.after_hs).
 */
static __always_inline struct conn_state *app_io(struct conn_state *c, struct sock *sk, bool write)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct hs_cpu *cpu = this_cpu();
	if (!cpu)
		return NULL;
	if (cpu->in_hs == tid) {
		handshake_io(c, sk, tid);
		return NULL;
	}
	if (cpu->after_hs == tid) {
		cpu->after_hs = 0;
		if (write)
			return NULL;
	}
	return c;
}

static __always_inline bool wire_counts(void)
{
	__u32 zero = 0;
	struct hs_ctl *ctl = bpf_map_lookup_elem(&hs_ctl, &zero);
	return ctl && ctl->wire_counts;
}

/*
 * Attached only with --exact (a handshake call that reads a connection marks it as TLS,
 * so that it is not also counted as a connection without a handshake) or where the kernel
 * lacks tcp_sendmsg_locked (requests and TLS 1.3's end are then seen from the reads).
 */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(conn_recv, struct sock *sk, int ret, int flags)
{
	struct conn_state *c = conn_of(sk);
	if (!c)
		return 0;
	if (wire_counts()) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		if (in_handshake_here(tid))
			handshake_io(c, sk, tid);
		return 0;
	}
	bool data = ret > 0 && !(flags & MSG_PEEK);
	/* the client answered the server's encrypted flight: TLS 1.3's handshake is over */
	if (data && c->wire == WIRE_SEALED)
		wire_finish(sk, c, WIRE_END_FINISHED);
	if (app_io(c, sk, false) && data)
		c->dir = CONN_DIR_IN;
	return 0;
}

/* Attached only where the kernel lacks tcp_sendmsg_locked (wire_send counts requests). */
SEC("tp_btf/sock_send_length")
int BPF_PROG(conn_send, struct sock *sk, int ret)
{
	struct conn_state *c = conn_of(sk);
	if (!c || !app_io(c, sk, true) || ret <= 0)
		return 0;
	if (c->dir == CONN_DIR_IN)
		c->requests++;
	c->dir = CONN_DIR_OUT;
	return 0;
}

/*
 * The server's handshake output (wire.h): what it negotiated, for servers with and without
 * handshake probes. tcp_sendmsg_locked fires for every TCP send of the machine, once per
 * chunk the kernel queues: on a socket that is not watched, or whose handshake is over,
 * it stops at the socket-storage lookup.
 */
#define WIRE_RINGBUF_BYTES (2 * 1024 * 1024)
#define WIRE_WAKEUP_BYTES (WIRE_RINGBUF_BYTES / 4)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WIRE_RINGBUF_BYTES);
} wire_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wire_event);
} wire_scratch SEC(".maps");

#define WIRE_STEPS 24 /* record headers and bodies walked per chunk of output */
#define WIRE_SEGS 4   /* iovec segments looked at per send */
#define WIRE_MAX_RECORD (16384 + 2048)

static __always_inline struct wire_event *wire_ev(const struct sock *sk, const struct conn_state *c, __u8 kind)
{
	__u32 zero = 0;
	struct wire_event *e = bpf_map_lookup_elem(&wire_scratch, &zero);
	if (!e)
		return NULL;
	e->sk = (__u64)sk;
	e->conn_start = c->start_ns;
	e->tgid = c->wire_tgid;
	e->netns = c->netns;
	e->port = c->port;
	e->kind = kind;
	e->flags = 0;
	e->len = 0;
	e->pad = 0;
	return e;
}

static __always_inline void wire_out(struct wire_event *e, __u32 len)
{
	__u64 size = WIRE_EVENT_HEADER + (__u64)len;
	/* keep the compiler from folding the bound into something the verifier cannot follow */
	asm volatile("" : "+r"(size));
	if (size > sizeof(*e))
		return;
	/* the agent reads them on its own clock, woken only when the buffer fills up */
	__u64 flags = bpf_ringbuf_query(&wire_events, BPF_RB_AVAIL_DATA) > WIRE_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP
											     : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&wire_events, e, size, flags))
		stat_inc(HS_STAT_WIRE_EVENTS_LOST);
}

/* The capture is over: nothing more of this connection is looked at. */
static __always_inline void wire_finish(const struct sock *sk, struct conn_state *c, __u8 why)
{
	bool tls = c->wire_flags & WIRE_F_TLS;
	if (c->wire == WIRE_DONE)
		return;
	c->wire = WIRE_DONE;
	c->wire_why = why;
	if (!tls)
		return; /* not TLS: nothing was sent, nothing to say */
	struct wire_event *e = wire_ev(sk, c, WIRE_EV_END);
	if (!e)
		return;
	e->flags = why;
	wire_out(e, 0);
}

/* Copies plaintext bytes [ptr, ptr + len) of the output to user space, within the cap. */
static __always_inline void wire_copy(const struct sock *sk, struct conn_state *c, __u64 ptr, __u32 len)
{
	for (int i = 0; i < WIRE_MAX_PLAIN / WIRE_CHUNK && len > 0; i++) {
		__u32 room = WIRE_MAX_PLAIN - c->wire_copied;
		if (room == 0 || room > WIRE_MAX_PLAIN) {
			wire_finish(sk, c, WIRE_END_CAP);
			return;
		}
		__u32 n = len < WIRE_CHUNK ? len : WIRE_CHUNK;
		if (n > room)
			n = room;
		struct wire_event *e = wire_ev(sk, c, WIRE_EV_DATA);
		if (!e)
			return;
		__u64 sz = n;
		asm volatile("" : "+r"(sz));
		if (sz > WIRE_CHUNK)
			return;
		if (bpf_probe_read_user(e->data, sz, (void *)ptr)) {
			wire_finish(sk, c, WIRE_END_UNSUPPORTED);
			return;
		}
		e->len = n;
		wire_out(e, n);
		c->wire_copied += n;
		ptr += n;
		len -= n;
	}
}

#define WIRE_NOT_TLS 255 /* internal: the output is not TLS, end silently */

/* A complete record header: what it means for the capture. Returns why the capture ends
 * (WIRE_END_*, WIRE_NOT_TLS), 0 to go on. */
static __always_inline __u8 wire_header(const struct sock *sk, struct conn_state *c, const __u8 *h,
					__u64 body, __u32 avail)
{
	__u8 type = h[0];
	__u32 len = (__u32)h[3] << 8 | h[4];
	bool valid = type >= 20 && type <= 23 && h[1] == 3 && h[2] <= 4 && len > 0 && len <= WIRE_MAX_RECORD;

	if (!(c->wire_flags & WIRE_F_TLS)) {
		if (!valid || (type != 22 && type != 21))
			return WIRE_NOT_TLS; /* the server does not speak TLS first */
		c->wire_flags |= WIRE_F_TLS;
		mark_tls(c); /* also for servers without handshake probes */
	} else if (!valid) {
		return WIRE_END_BAD;
	}
	c->wire_left = len;
	if (type == 23) {
		c->wire = WIRE_SEALED;
		c->fin_len = len; /* the flight's last one is its Finished */
		struct wire_event *e = wire_ev(sk, c, WIRE_EV_RECORD);
		if (e) {
			__builtin_memcpy(e->data, h, 5);
			e->len = 5;
			wire_out(e, 5);
		}
		if (++c->wire_sealed >= WIRE_MAX_SEALED)
			c->wire_end = WIRE_END_CAP;
		return 0;
	}
	if (c->wire != WIRE_PLAIN)
		return 0; /* after encryption started only type 23 is expected: keep walking */
	if (type == 20) {
		c->wire_flags |= WIRE_F_CCS;
	} else if (type == 21) {
		c->wire_end = WIRE_END_ALERT;
	} else if (type == 22 && (c->wire_flags & WIRE_F_CCS)) {
		/* After change_cipher_spec: TLS 1.2's encrypted Finished ends the server's part;
		 * a TLS 1.3 ServerHello after a HelloRetryRequest (a record holding exactly one
		 * message of type 2) does not. */
		__u8 b[4] = {};
		bool hello = false;
		if (avail >= 4 && !bpf_probe_read_user(b, 4, (void *)body))
			hello = b[0] == 2 && ((__u32)b[1] << 16 | (__u32)b[2] << 8 | b[3]) + 4 == len;
		if (!hello) {
			c->wire_end = WIRE_END_FINISHED;
			c->fin_len = len;
		}
	}
	return 0;
}

struct wire_walk_ctx {
	const struct sock *sk;
	struct conn_state *c;
	__u64 ptr;      /* user address of the bytes */
	__u32 n;        /* how many */
	__u32 off;      /* walked so far */
	__u32 plain_end; /* end of the plaintext-phase bytes among them */
	__u8 why;       /* the capture ends: WIRE_END_*, WIRE_NOT_TLS */
};

/* One step of the walk (bpf_loop: verified once, whatever the number of steps): a record
 * header, or as much of the current record's body as this write holds. 1 stops. */
static long wire_step(__u32 i, void *ctx)
{
	struct wire_walk_ctx *w = ctx;
	struct conn_state *c = w->c;
	__u32 off = w->off, n = w->n;

	if (off >= n)
		return 1;
	__u32 avail = n - off;
	bool plain = c->wire == WIRE_PLAIN;
	if (c->wire_left) {
		__u32 take = c->wire_left < avail ? c->wire_left : avail;
		c->wire_left -= take;
		w->off = off + take;
		if (plain)
			w->plain_end = w->off;
		if (!c->wire_left && c->wire_end) {
			w->why = c->wire_end;
			return 1;
		}
		return 0;
	}
	/* a record header, possibly continued from the previous write */
	__u32 have = c->wire_hdr_have, hdr_at = off;
	__u8 h[8] = {};
	if (have == 0 && avail >= 5) {
		if (bpf_probe_read_user(h, 5, (void *)(w->ptr + off))) {
			w->why = WIRE_END_UNSUPPORTED;
			return 1;
		}
		off += 5;
	} else {
		for (int k = 0; k < 5; k++) {
			if (have >= 5 || off >= n)
				break;
			__u8 byte;
			if (bpf_probe_read_user(&byte, 1, (void *)(w->ptr + off))) {
				w->why = WIRE_END_UNSUPPORTED;
				return 1;
			}
			c->wire_hdr[have & 7] = byte;
			have++;
			off++;
		}
		w->off = off;
		c->wire_hdr_have = have;
		if (have < 5) {
			if (plain)
				w->plain_end = off;
			return 1;
		}
		c->wire_hdr_have = 0;
		__builtin_memcpy(h, c->wire_hdr, 5);
	}
	w->off = off;
	w->why = wire_header(w->sk, c, h, w->ptr + off, n - off);
	if (plain)
		w->plain_end = c->wire == WIRE_PLAIN ? off : hdr_at;
	return w->why ? 1 : 0;
}

/*
 * Walks n bytes of output at user address ptr, record header by record body. The bytes
 * written while the capture is in its plaintext phase are copied; encrypted records give
 * their headers only; the walk stops where the capture ends.
 */
static __noinline int wire_walk(const struct sock *sk, struct conn_state *c, __u64 ptr, __u32 n)
{
	struct wire_walk_ctx w = { .sk = sk, .c = c, .ptr = ptr, .n = n };
	bool plain_start = c->wire == WIRE_PLAIN;

	bpf_loop(WIRE_STEPS, wire_step, &w, 0);
	if (!w.why && w.off < n)
		w.why = WIRE_END_CAP; /* more records in one write than walked */
	if (plain_start && w.plain_end && (c->wire_flags & WIRE_F_TLS))
		wire_copy(sk, c, ptr, w.plain_end);
	if (w.why)
		wire_finish(sk, c, w.why == WIRE_NOT_TLS ? 0 : w.why);
	return 0;
}

/*
 * Requests, counted at the server's sends: a send after the server has read new bytes of
 * the client's stream (past the handshake's) is one exchange. rx_tail holds back the
 * client's handshake bytes that come after the capture ended (its Finished), so that a
 * send answering only them (TLS 1.3 session tickets) is not a request.
 */
static __always_inline void count_request(struct conn_state *c, __u32 copied)
{
	__s32 adv = (__s32)(copied - c->rx_mark);
	if (adv <= 0)
		return;
	if (c->rx_tail) {
		if ((__u32)adv <= c->rx_tail)
			return;
		c->rx_tail = 0;
	}
	c->requests++;
	c->rx_mark = copied;
}

/* The capture ended during this send: what the client sent so far was its handshake. */

static __always_inline void handshake_over(struct conn_state *c, __u32 copied)
{
	if (!(c->wire_flags & WIRE_F_TLS)) {
		count_request(c, copied); /* not TLS: the server answers a request */
		return;
	}
	c->rx_mark = copied;
	/* TLS 1.2 resumption: the server's Finished went before the client's, which is still
	 * to come (change_cipher_spec, and a Finished record as long as the server's) */
	c->rx_tail = c->wire_why == WIRE_END_FINISHED && copied == c->rx_first ? 6 + 5 + c->fin_len : 0;
}

/* The capture gives up on output it cannot read: the handshake is over as far as it goes. */
static __always_inline void wire_unsupported(const struct sock *sk, struct conn_state *c, __u32 copied)
{
	wire_finish(sk, c, WIRE_END_UNSUPPORTED);
	handshake_over(c, copied);
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(wire_send, const struct sock *sk, const struct msghdr *msg, const struct sk_buff *skb, int size_goal)
{
	struct conn_state *c = conn_of(sk);
	if (!c)
		return 0;
	__u32 copied = data_read(sk);
	if (c->wire == WIRE_DONE) {
		count_request(c, copied);
		return 0;
	}

	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	bool in_hs = in_handshake_here(tid);
	if (in_hs)
		handshake_io(c, sk, tid); /* links the handshake call to its connection */
	__u32 seq = BPF_CORE_READ((struct tcp_sock *)sk, write_seq);
	if (c->wire == WIRE_IDLE) {
		c->wire = WIRE_PLAIN;
		c->wire_seq = seq;
		c->wire_tgid = id >> 32;
		c->rx_first = copied;
		c->rx_flight = copied;
		/* a memory-BIO server's handshake call just returned on this thread: its flight */
		if (!in_hs) {
			struct hs_key *k = bpf_map_lookup_elem(&hs_last, &tid);
			if (k) {
				struct hs_state *st = bpf_map_lookup_elem(&hs_conns, k);
				if (st && !st->conn_sk && k->tgid == id >> 32) {
					st->conn_sk = (__u64)sk;
					st->conn_start = c->start_ns;
				}
				bpf_map_delete_elem(&hs_last, &tid);
			}
		}
	}
	if (c->wire == WIRE_SEALED && copied != c->rx_flight) {
		/* The client answered the server's TLS 1.3 flight: the handshake is over. The
		 * answer is a change_cipher_spec and a Finished as long as the server's; bytes past
		 * them are a request. */
		wire_finish(sk, c, tls13_answer(c, copied));
		c->rx_mark = c->rx_flight;
		c->rx_tail = 6 + 5 + c->fin_len;
		count_request(c, copied);
		return 0;
	}
	c->rx_flight = copied;

	__u64 left = BPF_CORE_READ(msg, msg_iter.count);
	__s32 skip = (__s32)(c->wire_seq - seq);
	if (skip < 0) {
		wire_unsupported(sk, c, copied); /* output sent by a path not seen here */
		return 0;
	}
	if ((__u64)skip >= left)
		return 0; /* already walked when this send began: the kernel calls once per chunk */
	c->wire_seq = seq + (__u32)left;

	__u8 type = BPF_CORE_READ(msg, msg_iter.iter_type);
	__u64 offset = BPF_CORE_READ(msg, msg_iter.iov_offset);
	if (type == bpf_core_enum_value(enum iter_type, ITER_UBUF)) {
		__u64 base = (__u64)BPF_CORE_READ(msg, msg_iter.ubuf);
		__u64 n = left - skip;
		wire_walk(sk, c, base + offset + skip, n > 0xffffffff ? 0xffffffff : n);
		if (c->wire == WIRE_DONE)
			handshake_over(c, copied);
		return 0;
	}
	if (type != bpf_core_enum_value(enum iter_type, ITER_IOVEC)) {
		wire_unsupported(sk, c, copied);
		return 0;
	}
	const struct iovec *iov = BPF_CORE_READ(msg, msg_iter.__iov);
	__u64 nsegs = BPF_CORE_READ(msg, msg_iter.nr_segs);
	__u64 todo = left;
	for (int i = 0; i < WIRE_SEGS; i++) {
		if (i >= nsegs || todo == 0 || c->wire == WIRE_DONE)
			break;
		struct iovec v;
		if (bpf_probe_read_kernel(&v, sizeof(v), &iov[i]))
			break;
		__u64 base = (__u64)v.iov_base, len = v.iov_len;
		if (i == 0) {
			base += offset;
			len = len > offset ? len - offset : 0;
		}
		if (len > todo)
			len = todo;
		todo -= len;
		if ((__u64)skip >= len) {
			skip -= len;
			continue;
		}
		base += skip;
		len -= skip;
		skip = 0;
		wire_walk(sk, c, base, len > 0xffffffff ? 0xffffffff : len);
	}
	if (todo && c->wire != WIRE_DONE)
		wire_finish(sk, c, WIRE_END_CAP);
	if (c->wire == WIRE_DONE)
		handshake_over(c, copied);
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
		cpu_account(c, bpf_get_current_task_btf());

	struct cpu_sample *e = bpf_ringbuf_reserve(&cpu_samples, sizeof(*e), 0);
	if (!e) {
		stat_inc(HS_STAT_SAMPLES_LOST);
		return 0;
	}
	e->tgid = tgid;
	e->tid = tid;
	e->flags = 0;
	struct hs_thread *t = bpf_map_lookup_elem(&hs_threads, &tid);
	if (t && !before_detach(tgid, t->enter_ns))
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

/*
 * The agent measures what one probe hit costs on this host: these do nothing, attached to
 * a function of the agent itself (uprobe and uretprobe), while it calls that function.
 */
SEC("uprobe")
int calib_entry(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int calib_return(struct pt_regs *ctx)
{
	return 0;
}
