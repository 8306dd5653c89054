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
 * A message's buffers as its iterator stands, read once: the whole struct iov_iter in one
 * bpf_probe_read_kernel, its fields then taken from that copy at their offsets in the
 * running kernel (CO-RE), not one probe-read per field (plain loads where the program's
 * msghdr is typed were tried, and Debian 12's 6.1 kernel refused the fentry program with
 * them).
 */
struct msg_bufs {
	__u64 count;             /* bytes left */
	__u64 offset;            /* into the first buffer */
	__u64 ubuf;              /* ITER_UBUF: the buffer (6.0 on) */
	__u64 nr_segs;           /* ITER_IOVEC: segments */
	const struct iovec *iov; /* ITER_IOVEC: their array */
	__u32 type;              /* enum iter_type */
};

/* The iterator's bytes (struct iov_iter: 40 bytes on 5.10 to 6.18), room to spare. */
#define ITER_COPY 64

/* A field of size `t` at the running kernel's offset of `field` in `type`, from copy `it`. */
#define ITER_FIELD(it, t, type, field) (*(const t *)((const __u8 *)(it) + bpf_core_field_offset(type, field)))

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

/* A message's buffers, read once (the fields its kind does not use are 0; all of them when
 * the iterator cannot be read). */
static __always_inline void msg_bufs_of(const struct msghdr *msg, struct msg_bufs *b)
{
	__u64 it[ITER_COPY / 8] = {};
	b->count = 0;
	b->offset = 0;
	b->type = 0;
	b->ubuf = 0;
	b->nr_segs = 0;
	b->iov = NULL;
	__u32 size = bpf_core_type_size(struct iov_iter);
	if (size > sizeof(it) || bpf_probe_read_kernel(it, size, &msg->msg_iter))
		return;
	b->count = ITER_FIELD(it, __u64, struct iov_iter, count);
	b->offset = ITER_FIELD(it, __u64, struct iov_iter, iov_offset);
	if (bpf_core_field_exists(struct iov_iter, iter_type))
		b->type = ITER_FIELD(it, __u8, struct iov_iter, iter_type);
	else /* the low bit is the direction (READ 0, WRITE 1) */
		b->type = ITER_FIELD(it, __u32, struct iov_iter___old, type) & ~1u;
	if (iter_is_ubuf(b->type)) {
		b->ubuf = ITER_FIELD(it, __u64, struct iov_iter, ubuf);
	} else if (iter_is_iovec(b->type)) {
		b->nr_segs = ITER_FIELD(it, __u64, struct iov_iter, nr_segs);
		if (bpf_core_field_exists(struct iov_iter, __iov))
			b->iov = (const struct iovec *)ITER_FIELD(it, __u64, struct iov_iter, __iov);
		else
			b->iov = (const struct iovec *)ITER_FIELD(it, __u64, struct iov_iter___old, iov);
	}
}
