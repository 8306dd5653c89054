/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scheduler's side of CPU attribution (types: cpu.h, proc.h; user side:
 * agent/src/cpu/profiler.rs): each traced process's exact on-CPU time, summed into its
 * `traced` entry at every context switch (one hash lookup per switch of the machine, two
 * when a traced process is involved), and the clock of threads inside a handshake call
 * (handshake.bpf.h), stopped while they are switched out.
 */
#ifndef TLSPROF_SCHED_BPF_H
#define TLSPROF_SCHED_BPF_H

/* Set by the agent at load: per-process CPU accounting (off with --sample-hz 0). */
const volatile __u32 cpu_accounting = 0;

/*
 * The scheduler's own account of a task's CPU time (what /proc/PID/schedstat shows): it
 * leaves out time the hypervisor took (steal) and, with IRQ time accounting, interrupts
 * that ran on the task's time (loopback traffic's receive side, for one).
 */
static __always_inline __u64 exec_runtime(const struct task_struct *task)
{
	return BPF_CORE_READ(task, se.sum_exec_runtime);
}

/* Adds the CPU time the traced process running here used since it was last summed. */
static __always_inline void cpu_account(struct cpu_now *c, const struct task_struct *task)
{
	struct proc_traced *p = proc_of(c->run_tgid);
	__u64 rt = exec_runtime(task);

	if (p && rt > c->run_since)
		__sync_fetch_and_add(&p->oncpu_ns, rt - c->run_since);
	c->run_since = rt;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(cpu_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u64 now = 0;
	__u32 tid;
	struct cpu_now *c = this_cpu();

	if (!c)
		return 0;
	if (c->run_tgid) {
		cpu_account(c, prev);
		c->run_tgid = 0;
	}
	__u32 tgid = BPF_CORE_READ(next, tgid);
	if (cpu_accounting && tgid && proc_of(tgid)) {
		c->run_tgid = tgid;
		c->run_since = exec_runtime(next);
	}

	if (!hs_any_active())
		return 0;
	tid = BPF_CORE_READ(prev, pid);
	struct hs_thread *t = hs_live_thread(tid);

	if (t && t->oncpu_ns) {
		now = bpf_ktime_get_ns();
		t->cpu_ns += now - t->oncpu_ns;
		t->oncpu_ns = 0;
	}
	/* a kernel-estimate window whose thread goes to sleep (it waits for the client, or for
	 * work): its burst for the connection is over, sent now rather than whenever the thread
	 * runs again (estimate.bpf.h) */
	if (t && t->est && !preempt)
		est_close(tid, t);
	tid = BPF_CORE_READ(next, pid);
	t = hs_live_thread(tid);
	if (t) {
		t->oncpu_ns = now ? now : bpf_ktime_get_ns();
		hs_set_oncpu(tid);
	} else {
		hs_set_oncpu(0);
	}
	return 0;
}

#endif
