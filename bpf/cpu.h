/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * CPU attribution (sched.bpf.h: exact on-CPU time per traced process; sampler.bpf.h: what
 * they run): types shared with the agent (its Rust types are generated from this header:
 * agent/src/bpf/abi.rs).
 */
#ifndef TLSPROF_CPU_H
#define TLSPROF_CPU_H

#define CPU_KSTACK_MAX 48 /* kernel frames kept per sample */
#define CPU_USTACK_MAX 64 /* user frames kept per sample */

/* cpu_sample.flags */
#define CPU_SAMPLE_HANDSHAKE 1 /* the thread was inside a handshake call */
#define CPU_SAMPLE_USER 2      /* the sample interrupted user mode */

/* One perf-event sample of a traced process, through the cpu_samples ring buffer. */
struct cpu_sample {
	__u32 tgid;
	__u32 tid;
	__u32 flags;   /* CPU_SAMPLE_* */
	__u16 kdepth;  /* frames in kstack */
	__u16 udepth;  /* frames in ustack; ustack[0] is the user-mode instruction pointer */
	__u64 sp_word; /* user mode: the word at the stack pointer (a leaf function's return
			* address, unless it pushed something), 0 if unreadable */
	__u64 kstack[CPU_KSTACK_MAX];
	__u64 ustack[CPU_USTACK_MAX];
};

#endif
