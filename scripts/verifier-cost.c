// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * What the running kernel's verifier spends on one program of a BPF object: loads that
 * program alone (the others not loaded) and prints the verifier's closing statistics line,
 * "processed N insns ...". Read-only globals may be set first (NAME=VALUE, a __u32 of
 * .rodata: conn_hash=1 takes the hash-map connection state, as the kprobe programs need).
 * scripts/verifier-cost.sh builds and runs it; it loads nothing it leaves behind.
 */
#include <bpf/btf.h>
#include <stdlib.h>

#include "one-program.h"

static int set_rodata(struct bpf_object *o, const char *name, unsigned value)
{
	struct btf *btf = bpf_object__btf(o);
	int id = btf ? btf__find_by_name_kind(btf, ".rodata", BTF_KIND_DATASEC) : -1;
	struct bpf_map *m, *ro = NULL;
	bpf_object__for_each_map(m, o) {
		/* the .rodata section's map (libbpf names it <object>.rodata), not .rodata.<suffix>'s */
		const char *n = bpf_map__name(m);
		size_t len = strlen(n);
		if (len >= 7 && !strcmp(n + len - 7, ".rodata"))
			ro = m;
	}
	if (id < 0 || !ro)
		return -1;
	const struct btf_type *t = btf__type_by_id(btf, id);
	const struct btf_var_secinfo *vs = btf_var_secinfos(t);
	size_t size;
	char *data = (char *)bpf_map__initial_value(ro, &size);
	for (int k = 0; k < btf_vlen(t); k++, vs++) {
		const struct btf_type *vt = btf__type_by_id(btf, vs->type);
		if (!strcmp(btf__name_by_offset(btf, vt->name_off), name) && vs->size == sizeof(unsigned)) {
			memcpy(data + vs->offset, &value, sizeof(value));
			return 0;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s OBJECT PROGRAM [NAME=VALUE ...]\n", argv[0]);
		return 2;
	}
	struct bpf_program *want;
	struct bpf_object *o = open_one_program(argv[0], argv[1], argv[2], &want);
	if (!o)
		return 2;
	for (int i = 3; i < argc; i++) {
		char name[64];
		unsigned value;
		if (sscanf(argv[i], "%63[^=]=%u", name, &value) != 2 || set_rodata(o, name, value)) {
			fprintf(stderr, "%s: no read-only global %s\n", argv[0], argv[i]);
			return 2;
		}
	}
	size_t size = 64 << 20; /* level 4: the statistics only, but a failure's log is long */
	char *log = calloc(1, size);
	bpf_program__set_log_buf(want, log, size);
	bpf_program__set_log_level(want, 4);
	int err = bpf_object__load(o);
	if (err) {
		/* the verifier's reason: the log's last lines */
		size_t n = strlen(log);
		fputs(log + (n > 600 ? n - 600 : 0), stderr);
	}
	char *stats = strstr(log, "processed ");
	char *end = stats ? strchr(stats, '\n') : NULL;
	if (end)
		*end = 0;
	printf("%s: %s, %s\n", argv[2], err ? "refused" : "loaded", stats ? stats : "no statistics");
	bpf_object__close(o);
	return err ? 1 : 0;
}
