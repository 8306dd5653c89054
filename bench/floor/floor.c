// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Loads and attaches one program of floor.bpf.o (bench/attributed.py's floor arms), or every
 * program whose name begins with PREFIX, writes "attached" on stdout, and holds them until
 * it is sent SIGTERM or SIGINT. Root; libbpf-dev.
 *   floor OBJECT PROGRAM
 *   floor OBJECT PREFIX*
 */
#include <signal.h>
#include <stdbool.h>

#include "one-program.h" /* scripts/: bench/attributed.py builds with -I scripts */

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s OBJECT PROGRAM\n", argv[0]);
		return 2;
	}
	size_t len = strlen(argv[2]);
	bool prefix = len > 0 && argv[2][len - 1] == '*';
	struct bpf_program *want, *p;
	struct bpf_object *o;
	if (prefix) {
		o = bpf_object__open(argv[1]);
		if (!o) {
			fprintf(stderr, "floor: cannot open %s\n", argv[1]);
			return 2;
		}
		bpf_object__for_each_program(p, o) bpf_program__set_autoload(p, !strncmp(bpf_program__name(p), argv[2], len - 1));
	} else {
		o = open_one_program("floor", argv[1], argv[2], &want);
		if (!o)
			return 2;
	}
	if (bpf_object__load(o)) {
		fprintf(stderr, "floor: this kernel refused %s\n", argv[2]);
		return 1;
	}
	struct bpf_link *links[16];
	int n = 0;
	bpf_object__for_each_program(p, o) {
		if (!bpf_program__autoload(p))
			continue;
		if (n == 16 || !(links[n] = bpf_program__attach(p))) {
			fprintf(stderr, "floor: cannot attach %s\n", bpf_program__name(p));
			return 1;
		}
		n++;
	}
	/* blocked until sigsuspend waits, so that a signal between the check and the wait is not lost */
	sigset_t block, wait;
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &wait);
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	printf("attached\n");
	fflush(stdout);
	while (!stop)
		sigsuspend(&wait);
	while (n > 0)
		bpf_link__destroy(links[--n]);
	bpf_object__close(o);
	return 0;
}
