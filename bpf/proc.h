/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The traced processes and their lifecycle (proc.bpf.h), shared with the agent
 * (agent/src/bpf/proc.rs). The agent fills the `traced` set; every feature asks it
 * whether a process is traced. The kernel adds to it too, so that a process started per
 * connection is traced from its first instruction, before the agent hears of it: the child
 * of a traced process (a PostgreSQL backend, nginx's new workers on reload) at its fork, and
 * a process that executes a program whose name `--comm` selects (`proc_comms`: dovecot's
 * imap-login, postfix's smtpd, an inetd service) at its exec; each with the kernel estimate
 * on (no probes yet), and reported at once, so the agent examines it without waiting for
 * its next /proc scan. An exit lets it forget the process.
 */
#ifndef TLSPROF_PROC_H
#define TLSPROF_PROC_H

/* Room in `traced` and in the other per-process maps (hs_hits, hs_detached). The agent
 * traces at most half as many processes (agent/src/agent/targets/): the rest is for the
 * entries of processes that exited and are not swept yet. */
#define PROC_TRACED_ENTRIES 8192

/* Names in proc_comms at most (--comm given more often is checked by the agent alone). */
#define PROC_COMMS 64

enum proc_ev {
	PROC_EV_FORK = 1,
	PROC_EV_EXIT = 2,
	PROC_EV_EXEC = 3,   /* a traced process executed a new program, or one selected by name */
	PROC_EV_FOUND = 4,  /* without --pid/--comm: a process not traced sent TLS on a connection
				 * it accepted (found by what its connections carry); parent: the port */
	PROC_EV_LISTEN = 5, /* a traced process started listening (parent: the port): its ports
				 * are read again now, not at the next scan */
};

/* Value of traced (key: tgid). */
struct proc_traced {
	__u64 oncpu_ns;  /* exact on-CPU time (sched.bpf.h), summed at every switch-out and at
			 * each sample while it runs; 0 when CPU attribution is off */
	__u32 exited;    /* the process exited (the agent removes the entry after its last read) */
	__u32 estimate;  /* no handshake probes: its handshakes' CPU is estimated from the kernel
			 * alone (estimate.bpf.h) */
	__u64 probed_ns; /* when its probes were attached (bpf_ktime_get_ns): a connection
			  * accepted before is estimated all the same (the probes came in the
			  * middle of it: a process forked or executed per connection) */
	__u64 exec_ns;   /* when it last executed a program (bpf_ktime_get_ns), 0 if not since
			  * traced: the agent tells an exec it examined the process after from a
			  * new one */
};

/* Key of proc_comms: a program's name as the kernel keeps it (task comm, NUL-padded). */
struct proc_comm {
	__u8 name[16];
};

struct proc_notice {
	__u32 kind;    /* PROC_EV_* */
	__u32 pid;     /* the new child (fork), the process (exec), or the exiting one (exit) */
	__u32 parent;  /* the traced parent (fork), 0 otherwise */
	__u32 seq;     /* fork, exec: the process starts counted when it was sent (requests.bpf.h
		       * req_starts), which the agent acknowledges once it has read it; else 0 */
	__u8 comm[16]; /* its name (task comm): the child's at fork is its parent's; the new
			* program's at exec; named so, a process gone before the agent read /proc */
};

#endif
