/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * One program of a BPF object, loaded alone: shared by scripts/verifier-cost.c and
 * bench/floor/floor.c (libbpf).
 */
#ifndef TLSPROF_ONE_PROGRAM_H
#define TLSPROF_ONE_PROGRAM_H

#include <bpf/libbpf.h>
#include <stdio.h>
#include <string.h>

/* Opens the BPF object at `path` with only its program `name` to be loaded, that program in
 * *want; NULL when the object cannot be opened or has no such program, with a line on
 * stderr that says which (`tool`: the line's prefix). */
static struct bpf_object *open_one_program(const char *tool, const char *path, const char *name,
					   struct bpf_program **want)
{
	struct bpf_object *o = bpf_object__open(path);
	if (!o) {
		fprintf(stderr, "%s: cannot open %s\n", tool, path);
		return NULL;
	}
	struct bpf_program *p;
	*want = NULL;
	bpf_object__for_each_program(p, o) {
		int me = !strcmp(bpf_program__name(p), name);
		bpf_program__set_autoload(p, me);
		if (me)
			*want = p;
	}
	if (!*want) {
		fprintf(stderr, "%s: %s has no program %s\n", tool, path, name);
		bpf_object__close(o);
		return NULL;
	}
	return o;
}

#endif
