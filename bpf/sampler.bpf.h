/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The CPU sampler (types: cpu.h; user side: agent/src/cpu/): a software cpu-clock perf
 * event per CPU runs cpu_sample, which keeps the samples of traced processes.
 */
#ifndef TLSPROF_SAMPLER_BPF_H
#define TLSPROF_SAMPLER_BPF_H

#include "cpu.h"

/*
 * Whether a sample interrupted user code, from the register that holds the privilege
 * level in the registers the perf event saved: x86-64's CS (its low two bits, 3 is user),
 * arm64's PSTATE (its mode bits, PSR_MODE_MASK; EL0, user, is 0).
 */
#if defined(__TARGET_ARCH_arm64)
#define SAMPLE_MODE_REG pstate
#define SAMPLE_IN_USER(mode) (((mode)&0xf) == 0)
#else
#define SAMPLE_MODE_REG cs
#define SAMPLE_IN_USER(mode) (((mode)&3) == 3)
#endif

/* Resized by the agent to the number of CPUs and the sampling frequency. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} cpu_samples SEC(".maps");

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
	if (!proc_of(tgid))
		return 0;
	struct cpu_now *c = this_cpu();
	if (c && c->run_tgid == tgid)
		cpu_account(c, (const struct task_struct *)bpf_get_current_task());

	struct cpu_sample *e = bpf_ringbuf_reserve(&cpu_samples, sizeof(*e), 0);
	if (!e) {
		stat_inc(STAT_SAMPLES_LOST);
		return 0;
	}
	e->tgid = tgid;
	e->tid = tid;
	e->flags = 0;
	struct hs_thread *t = hs_thread_of(tid);
	if (t && !t->est && !hs_before_detach(tgid, t->enter_ns))
		e->flags |= CPU_SAMPLE_HANDSHAKE;
	/* ctx fields are read directly (the verifier rewrites them), whole: no narrowed load */
	__u64 mode = *(volatile __u64 *)&ctx->regs.SAMPLE_MODE_REG;
	e->sp_word = 0;
	if (SAMPLE_IN_USER(mode)) {
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

#endif
