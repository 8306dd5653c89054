/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Calibration (user side: agent/src/bpf/calib.rs, agent/src/agent/duty.rs): the agent
 * measures what the trap of one probe hit costs on this host, attaching these to functions
 * of its own (uprobe and uretprobe) while it calls them. They do nothing: the handshake
 * probes' programs time their own run time where they run (handshake.bpf.h, HS_HIT), cold
 * caches and all, and the budget adds it to the traps' cost measured here.
 */
#ifndef TLSPROF_CALIB_BPF_H
#define TLSPROF_CALIB_BPF_H

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

#endif
