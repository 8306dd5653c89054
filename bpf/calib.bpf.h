/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Calibration (user side: agent/src/bpf/uprobes.rs, agent/src/agent/duty.rs): the agent
 * measures what one probe hit costs on this host: these do nothing, attached to a function
 * of the agent itself (uprobe and uretprobe), while it calls that function.
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
