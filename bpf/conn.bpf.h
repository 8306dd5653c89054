/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Connection lifecycle and TIME_WAIT (types: conn.h; user side: agent/src/bpf/conn.rs,
 * agent/src/conns/churn.rs), per connection accepted on a listening port of a traced
 * process (conn_ports, kept by the agent). State changes run in softirq context, where the
 * current task is not the server: a connection belongs to the port it was accepted on.
 *
 * - accepted: SYN_RECV -> ESTABLISHED on a watched port creates the connection's socket-
 *   local storage (freed with the socket) and counts the port's accepted connections;
 * - who closed: the first transition out of ESTABLISHED says who sent the first FIN
 *   (FIN_WAIT1: the server, CLOSE_WAIT: the client); the client's FIN first makes it
 *   "client" whatever follows; otherwise a reset (tcp_receive_reset/tcp_send_reset, or a
 *   socket aborted from ESTABLISHED: unread data, SO_LINGER 0, the kernel sends its reset
 *   right after) makes it "reset", and the server's FIN first "server";
 * - TIME_WAIT (conn_closed): the server's full socket goes FIN_WAIT2 -> CLOSE or
 *   CLOSING -> CLOSE when the kernel replaces it with a timewait socket. With the peer's
 *   FIN already received (SOCK_DONE) or from CLOSING, that socket is in TIME_WAIT; an
 *   orphaned socket whose FIN was acknowledged before the peer's FIN came is handed over
 *   in FIN_WAIT2 and reaches TIME_WAIT only if that FIN follows: the agent finds out
 *   through sock_diag.
 * One event per connection, at close. Requests per connection: requests.bpf.h. Each
 * connection gets an identity at accept (conn_life.id) that every event about it carries.
 */
#ifndef TLSPROF_CONN_BPF_H
#define TLSPROF_CONN_BPF_H

#include "conn.h"

/*
 * The watched ports (CONN_PORTS_ENTRIES, conn.h), filled by the agent; entries are
 * allocated as ports are added, not all at load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CONN_PORTS_ENTRIES);
	__type(key, struct conn_port);
	__type(value, struct conn_port_stats);
} conn_ports SEC(".maps");

/* A socket's key in conn_ports: its network namespace and local port. */
static __always_inline struct conn_port conn_port_of(const struct sock *sk)
{
	struct conn_port p = {
		.netns = BPF_CORE_READ(sk, __sk_common.skc_net.net, ns.inum),
		.port = BPF_CORE_READ(sk, __sk_common.skc_num),
	};
	return p;
}

/* The conn_ports entry of a connection's port; NULL where the port is no longer watched. */
static __always_inline struct conn_port_stats *conn_port_stats(const struct conn_life *life)
{
	struct conn_port p = { .netns = life->netns, .port = life->port };
	return bpf_map_lookup_elem(&conn_ports, &p);
}

/*
 * The port numbers watched in any namespace, kept by the agent beside conn_ports: CONN_NUM_TCP
 * (a listening port of conn_ports) and CONN_NUM_UDP (a UDP port a traced process bound:
 * quic.bpf.h). A first test that costs one array load, for programs that run per packet of
 * sockets that are mostly not watched (hello_skb.bpf.h, quic.bpf.h): one load whatever the
 * socket's protocol; conn_ports decides.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} conn_port_nums SEC(".maps");

/* What conn_port_nums says of a port number: CONN_NUM_* bits, 0 if none. */
static __always_inline __u8 conn_port_kinds(__u32 port)
{
	__u8 *on = bpf_map_lookup_elem(&conn_port_nums, &port);
	return on ? *on : 0;
}

static __always_inline bool conn_port_maybe(__u32 port)
{
	return conn_port_kinds(port) & CONN_NUM_TCP;
}

/*
 * The port numbers some socket listens on in the namespaces of the traced processes and the
 * agent's own (1: listened on), kept by the agent from the same dumps: a connection whose
 * local port is one was accepted from a listener (conn_adopt), where an outbound one has an
 * ephemeral port. A traced process's new listener is set here at once (conn_state_changed):
 * the connections it accepts before the agent has read it and watches the port (a server
 * that starts under load, an agent slow to drain) are taken on at their first send.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} conn_listen_nums SEC(".maps");

/*
 * Each connection's state lives in socket-local storage (freed with the socket), or, where
 * the kernel does not let tracing programs use it (before 5.11) or a hook cannot pass it a
 * typed socket (raw tracepoints, kprobes), in a hash keyed by the socket's address, from
 * which it is deleted when the socket closes. The agent chooses at load (conn_hash).
 */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct conn_state);
} conn_store SEC(".maps");

/* Connections tracked at once in hash mode; beyond, new ones are not (conn_storage_full).
 * The agent sets the size at load from the host's memory (agent/src/bpf/sizes.rs). */
#define CONN_HASH_ENTRIES (256 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, CONN_HASH_ENTRIES);
	__type(key, __u64);
	__type(value, struct conn_state);
} conn_hash_store SEC(".maps");

/* Set by the agent at load: keep connections in conn_hash_store, not in socket storage. */
const volatile __u32 conn_hash = 0;

#define CONN_RINGBUF_BYTES (512 * 1024)

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, CONN_RINGBUF_BYTES);
} conn_events SEC(".maps");

#define AF_INET 2
#define AF_INET6 10

/* The state of a watched connection, NULL for any other socket. */
static __always_inline struct conn_state *conn_of(const struct sock *sk)
{
	if (conn_hash) {
		__u64 key = (__u64)sk;
		return bpf_map_lookup_elem(&conn_hash_store, &key);
	}
	return bpf_sk_storage_get(&conn_store, (struct sock *)sk, 0, 0);
}

/* Starts tracking a connection; false when there is no room. */
static __always_inline bool conn_create(const struct sock *sk, const struct conn_state *init)
{
	if (conn_hash) {
		__u64 key = (__u64)sk;
		/* BPF_ANY: a stale entry of a socket that once had this address is replaced */
		return bpf_map_update_elem(&conn_hash_store, &key, init, BPF_ANY) == 0;
	}
	return bpf_sk_storage_get(&conn_store, (struct sock *)sk, (void *)init, BPF_SK_STORAGE_GET_F_CREATE);
}

static __always_inline void conn_forget(const struct sock *sk)
{
	if (conn_hash) {
		__u64 key = (__u64)sk;
		bpf_map_delete_elem(&conn_hash_store, &key);
		return;
	}
	bpf_sk_storage_delete(&conn_store, (struct sock *)sk);
}

/*
 * Connection identities (conn_life.id): this CPU's count of connections accepted, with the
 * CPU in the top 16 bits, so no two CPUs hand out the same. Not a shared atomic counter:
 * fetching an atomic add's result needs 5.12 (BPF_FETCH), and the 5.10 kernels load this
 * object too. Only accepts bump this CPU's count, one at a time: a second accept could take
 * the same number only by interrupting the first between the count's load and its store on
 * the same CPU (kprobes never nest; recent kernels do not nest a tracepoint program in
 * itself either), a window of two instructions.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} conn_ids SEC(".maps");

/* A new connection's identity; 0 (no identity) if the array cannot be read. */
static __always_inline __u64 conn_new_id(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&conn_ids, &zero);
	if (!n)
		return 0;
	__u64 seq = *n + 1;
	*n = seq;
	return (__u64)bpf_get_smp_processor_id() << 48 | (seq & ((1ULL << 48) - 1));
}

/* A connection's state from its start, established now on the port `p` (its identity is
 * the caller's to mint or take over). */
static __always_inline void conn_init(struct conn_state *c, struct conn_port p)
{
	c->life.start_ns = bpf_ktime_get_ns();
	c->life.netns = p.netns;
	c->life.port = p.port;
	c->life.states = CONN_STATE_BIT(TCP_ESTABLISHED);
}

/* A connection's first data, seen on its listening socket `listener` before accept
 * (hello_skb.bpf.h): where its port is watched, its identity in `life`, minted here as at
 * accept (conn_accepted takes it over), and true; else `life` untouched, and false. */
static __always_inline bool conn_early(const struct sock *listener, struct conn_life *life)
{
	struct conn_port p = conn_port_of(listener);
	if (!bpf_map_lookup_elem(&conn_ports, &p))
		return false;
	__u64 id = conn_new_id();
	if (!id)
		return false;
	life->id = id;
	life->netns = p.netns;
	life->port = p.port;
	return true;
}

static __always_inline void conn_accepted(const struct sock *sk)
{
	struct conn_port p = conn_port_of(sk);
	struct conn_port_stats *ps = bpf_map_lookup_elem(&conn_ports, &p);
	if (!ps)
		return;
	struct conn_state init = {};
	conn_init(&init, p);
	__u32 start = data_read(sk);
	/* its first data may have been walked on the listening socket already, under an
	 * identity taken then (hello_skb.bpf.h) */
	init.life.id = hello_early_take(sk, start, &init.hello);
	if (!init.life.id) {
		init.life.id = conn_new_id();
		hello_accepted(&init.hello, start);
	}
	if (!init.life.id)
		return;
	req_accepted(&init.req, ps->slot, start);
	if (!conn_create(sk, &init)) {
		stat_inc(STAT_CONN_STORAGE_FULL);
		return;
	}
	__sync_fetch_and_add(&ps->accepted, 1);
}

/*
 * A connection a traced process serves on a port no one watched when it was accepted: a
 * program executed per connection by a parent that is not traced (an inetd service,
 * dovecot's imap-login under --comm), handed the accepted socket. Taken on at the
 * process's first read or send on it (`tx`: the bytes it had sent before; `rx`: read
 * before, its start at a read, the client's first message missed at a send: `late`;
 * `any`: by a process not traced, whose first send begins TLS or a greeting of a protocol
 * that can start TLS later, when tlsprof runs without a selector),
 * as far as it goes from there: its accept time is now, and its ClientHello, which came
 * before, is not read. Only a socket whose local port a listener has (conn_listen_nums:
 * accepted from it, where an outbound connection has an ephemeral port) and still at its
 * start; NULL for any other.
 */
static __always_inline struct conn_state *conn_adopt(const struct sock *sk, __u64 rx, __u64 tx, bool any)
{
	if (tx)
		return NULL; /* the connection is under way: not its start */
	if (BPF_CORE_READ(sk, __sk_common.skc_state) != TCP_ESTABLISHED ||
	    BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return NULL;
	__u32 port = BPF_CORE_READ(sk, __sk_common.skc_num);
	__u8 *listened = bpf_map_lookup_elem(&conn_listen_nums, &port);
	if (!listened || !*listened)
		return NULL;
	/* `any`: a process not traced yet, whose first send looks like TLS (proc_find) */
	struct proc_traced *p = proc_of(bpf_get_current_pid_tgid() >> 32);
	if (!any && (!p || p->exited))
		return NULL;
	struct conn_state init = {};
	conn_init(&init, conn_port_of(sk));
	init.life.id = conn_new_id();
	init.life.late = rx != 0;
	init.life.adopted = 1;
	if (!init.life.id)
		return NULL;
	req_accepted(&init.req, 0, data_read(sk));
	if (!conn_create(sk, &init)) {
		stat_inc(STAT_CONN_STORAGE_FULL);
		return NULL;
	}
	return conn_of(sk);
}

/* The connection's full socket closed: who closed it, and did it enter TIME_WAIT. One
 * closed before its server sent TLS is counted on its port by what it was
 * (conn_port_stats.untls, hello_untls), whose TLS may be known only later: the agent
 * counts them once it is. */
static __always_inline void conn_closed(const struct sock *sk, struct conn_state *c, int oldstate)
{
	__u8 by, tw = CONN_TW_NO;

	if (c->life.first_fin == CONN_BY_CLIENT) {
		/* The client ended it. A reset may follow: a server that answers the client's FIN
		 * with its own close_notify gets one from a client socket that is gone. */
		by = CONN_BY_CLIENT;
	} else if (c->life.reset) {
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

	if (!c->life.tls && (hello_begun(c) || !wire_spoke_plaintext(c))) {
		/* closed before the server's TLS: a handshake the client began (after a STARTTLS
		 * preamble too), or a connection whose server said nothing in the clear (a session
		 * that stayed plaintext on a STARTTLS port is neither) */
		struct conn_port_stats *ps = conn_port_stats(&c->life);
		if (ps) {
			/* the client's data: tcp bytes_received counts its FIN too */
			__u64 rx = BPF_CORE_READ((const struct tcp_sock *)sk, bytes_received);
			bool received = rx > (fin_received(sk) ? 1 : 0);
			__u8 kind = hello_untls(c, received, by);
			if (kind < HELLO_UNTLS_KINDS)
				__sync_fetch_and_add(&ps->untls[kind], 1);
		}
	}

	struct conn_event *e = bpf_ringbuf_reserve(&conn_events, sizeof(*e), 0);
	if (!e) {
		stat_inc(STAT_CONN_EVENTS_LOST);
		return;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->conn_id = c->life.id;
	e->duration_ns = bpf_ktime_get_ns() - c->life.start_ns;
	e->start_ns = c->life.start_ns;
	e->netns = c->life.netns;
	e->port = c->life.port;
	e->requests = req_count(c);
	e->closed_by = by;
	e->time_wait = tw;
	e->tls = c->life.tls;
	e->adopted = c->life.adopted;
	e->dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	e->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (e->family == AF_INET6) {
		BPF_CORE_READ_INTO(&e->saddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&e->daddr, sk, __sk_common.skc_v6_daddr);
	} else {
		BPF_CORE_READ_INTO((__u32 *)e->saddr, sk, __sk_common.skc_rcv_saddr);
		BPF_CORE_READ_INTO((__u32 *)e->daddr, sk, __sk_common.skc_daddr);
	}
	bpf_ringbuf_submit(e, RB_LAZY(&conn_events, CONN_RINGBUF_BYTES));
}

/*
 * How many times a TCP socket of the machine started or stopped listening: the agent reads
 * the listening sockets again (sock_diag) only when this moved, instead of at every scan
 * (on a host with much memory each such dump walks hash tables of 100,000s of buckets).
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} listen_changes SEC(".maps");

/* This state change, unless the hook's other program took it already (true: it is this
 * program's to handle); a change out of a state whose entry neither took is counted. */
static __always_inline bool conn_state_take(struct conn_state *c, int oldstate, int newstate)
{
	__u32 bit = CONN_STATE_BIT(newstate);
	if (c->life.states & bit)
		return false;
	if (!(c->life.states & CONN_STATE_BIT(oldstate)))
		stat_inc(STAT_CONN_STATE_MISSED);
	c->life.states |= bit;
	return true;
}

static __always_inline int conn_state_changed(const struct sock *sk, int oldstate, int newstate)
{
	if (newstate == TCP_LISTEN || oldstate == TCP_LISTEN) {
		/* a socket started or stopped listening; not a connection cloned from a listener
		 * at its accept (LISTEN -> SYN_RECV), which would make every scan with a new
		 * connection read the listeners again */
		if (newstate == TCP_LISTEN || newstate == TCP_CLOSE) {
			__u32 zero = 0;
			__u64 *n = bpf_map_lookup_elem(&listen_changes, &zero);
			if (n)
				__sync_fetch_and_add(n, 1);
		}
		if (newstate != TCP_LISTEN)
			return 0;
		__u32 port = BPF_CORE_READ(sk, __sk_common.skc_num);
		if (proc_listened(port)) {
			/* the agent's next reading of the listeners keeps it or clears it
			 * (Kernel::listened) */
			__u8 one = 1;
			bpf_map_update_elem(&conn_listen_nums, &port, &one, BPF_ANY);
		}
		return 0;
	}
	struct conn_state *c = conn_of(sk);
	if (oldstate == TCP_SYN_RECV && newstate == TCP_ESTABLISHED) {
		/* the hook's other program took it; unless what is found is the state of a socket
		 * that had this address and whose close came to neither (hash mode): replaced */
		if (c && !(c->life.states & ~CONN_STATE_BIT(TCP_ESTABLISHED)))
			return 0;
		if (c)
			stat_inc(STAT_CONN_STATE_MISSED);
		conn_accepted(sk);
		return 0;
	}
	if (!c || !conn_state_take(c, oldstate, newstate))
		return 0;
	if (oldstate == TCP_ESTABLISHED && !c->life.first_fin) {
		if (newstate == TCP_FIN_WAIT1)
			c->life.first_fin = CONN_BY_SERVER;
		else if (newstate == TCP_CLOSE_WAIT)
			c->life.first_fin = CONN_BY_CLIENT;
	}
	if (newstate != TCP_CLOSE)
		return 0;
	wire_closed(sk, c);
	conn_closed(sk, c, oldstate);
	conn_forget(sk);
	return 0;
}

/*
 * The hook has two programs, each taking every state change the other has not: the kernel
 * does not run a program where it runs already on the CPU, it counts the run missed
 * (recursion_misses). A state change comes in a program's middle from an interrupt (a
 * client's reset or FIN in softirq while the server's own close is in the program) and,
 * on a kernel that lets a tracepoint program's task be preempted (not shown), from any task
 * that runs on the CPU meanwhile: measured here (bench/lost_ends.py under contention: 3-7
 * connections of 20,000 in half the runs, consecutive on one CPU), all their later state
 * changes skipped by the one program while it counted no run missed. Which of the two took
 * a change is kept per connection (conn_state_take): a socket's state changes come one at
 * a time under its lock, and it enters each state once. Only a change that came while both
 * programs were in their middles on that CPU is lost; the next change of that connection
 * counts it (conn_state_missed).
 */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conn_state_change, const struct sock *sk, const int oldstate, const int newstate)
{
	return conn_state_changed(sk, oldstate, newstate);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(conn_state_change_twin, const struct sock *sk, const int oldstate, const int newstate)
{
	return conn_state_changed(sk, oldstate, newstate);
}

/* A raw tracepoint's arguments, read as plain words (not through the CO-RE-relocated
 * bpf_raw_tracepoint_args, whose flexible array the loader cannot relocate). */
#define RAW_ARG(ctx, i) (((const __u64 *)(ctx))[i])

SEC("raw_tp/inet_sock_set_state")
int conn_state_change_raw(void *ctx)
{
	return conn_state_changed((const struct sock *)RAW_ARG(ctx, 0), (int)RAW_ARG(ctx, 1), (int)RAW_ARG(ctx, 2));
}

SEC("raw_tp/inet_sock_set_state")
int conn_state_change_twin_raw(void *ctx)
{
	return conn_state_changed((const struct sock *)RAW_ARG(ctx, 0), (int)RAW_ARG(ctx, 1), (int)RAW_ARG(ctx, 2));
}

/* The connection carries TLS, and so does its port. */
static __always_inline void conn_mark_tls(struct conn_state *c)
{
	if (c->life.tls)
		return;
	c->life.tls = 1;
	struct conn_port_stats *ps = conn_port_stats(&c->life);
	if (ps)
		ps->flags |= CONN_PORT_TLS;
}

/* A handshake call read or wrote this connection: links the call to it (handshake.bpf.h),
 * and the connection is TLS, unless the thread's open window is the kernel estimate's.
 * (A function of its own. The send capture's walk follows it, and after a call the caller's
 * state is one whichever way the call went. Inlined, its branches reached the bounded walk
 * as one more state to verify the walk from: with hs_threads' kept entries Linux 6.1 stopped
 * the kprobe send program at a million instructions (6.18: 694,000 against 651,000, as
 * scripts/verifier-cost.sh counts them); as a function, 6.1 loads it. hs_thread_end stays
 * inlined: as a function too, it made Linux 5.10's verifier run on past 200 s over the
 * fentry send program.) */
static __noinline int conn_handshake_io(struct conn_state *c, __u32 tid)
{
	if (hs_link_io(tid, c->life.id, c->life.start_ns))
		conn_mark_tls(c);
	return 0;
}

#endif
