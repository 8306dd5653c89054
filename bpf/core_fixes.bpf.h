/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Kernel-version shims: every read of a kernel structure whose layout or meaning changed
 * between the kernels tlsprof runs on (5.10 to 6.12) is here, each resolved at load time
 * by CO-RE (libbpf-tools keeps its own in a core_fixes.bpf.h). The features read such a
 * structure only through these.
 *
 * struct iov_iter, the buffers a send or a read copies: its kind was `type`, with the
 * direction in the low bit, before 5.14 (`iter_type` after); its iovec array `iov` before
 * 6.4 (`__iov` after); a single user buffer (ITER_UBUF, `ubuf`) exists from 6.0.
 */
#pragma once

struct iov_iter___old {
	unsigned int type;
	const struct iovec *iov;
} __attribute__((preserve_access_index));

/*
 * A message's buffers as its iterator stands, read once (bpf_probe_read_kernel, as every
 * field here: plain loads where the program's msghdr is typed were tried, and Debian 12's
 * 6.1 kernel refused the fentry program with them).
 */
struct msg_bufs {
	__u64 count;             /* bytes left */
	__u64 offset;            /* into the first buffer */
	__u64 ubuf;              /* ITER_UBUF: the buffer (6.0 on) */
	__u64 nr_segs;           /* ITER_IOVEC: segments */
	const struct iovec *iov; /* ITER_IOVEC: their array */
	__u32 type;              /* enum iter_type */
};

/* The kind of buffer a message's iterator copies from or to (enum iter_type). */
static __always_inline __u32 iter_type_of(const struct msghdr *msg)
{
	if (bpf_core_field_exists(msg->msg_iter.iter_type))
		return BPF_CORE_READ(msg, msg_iter.iter_type);
	const struct iov_iter___old *it = (const void *)&msg->msg_iter;
	return BPF_CORE_READ(it, type) & ~1u; /* the low bit is the direction (READ 0, WRITE 1) */
}

/* Its iovec array, for an ITER_IOVEC iterator. */
static __always_inline const struct iovec *iter_iovecs(const struct msghdr *msg)
{
	if (bpf_core_field_exists(msg->msg_iter.__iov))
		return BPF_CORE_READ(msg, msg_iter.__iov);
	const struct iov_iter___old *it = (const void *)&msg->msg_iter;
	return BPF_CORE_READ(it, iov);
}

/* A single user buffer (6.0 on). */
static __always_inline bool iter_is_ubuf(__u32 type)
{
	return bpf_core_enum_value_exists(enum iter_type, ITER_UBUF) &&
	        type == bpf_core_enum_value(enum iter_type, ITER_UBUF);
}

/* An array of user buffers (every kernel). */
static __always_inline bool iter_is_iovec(__u32 type)
{
	return type == bpf_core_enum_value(enum iter_type, ITER_IOVEC);
}

/* A message's buffers, read once (the fields its kind does not use are 0). */
static __always_inline void msg_bufs_of(const struct msghdr *msg, struct msg_bufs *b)
{
	b->count = BPF_CORE_READ(msg, msg_iter.count);
	b->offset = BPF_CORE_READ(msg, msg_iter.iov_offset);
	b->type = iter_type_of(msg);
	b->ubuf = 0;
	b->nr_segs = 0;
	b->iov = NULL;
	if (iter_is_ubuf(b->type)) {
		b->ubuf = (__u64)BPF_CORE_READ(msg, msg_iter.ubuf);
	} else if (iter_is_iovec(b->type)) {
		b->nr_segs = BPF_CORE_READ(msg, msg_iter.nr_segs);
		b->iov = iter_iovecs(msg);
	}
}
