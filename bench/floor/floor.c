// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Loads and attaches one program of floor.bpf.o (bench/attributed.py's floor arms), writes
 * "attached" on stdout, and holds it until it is sent SIGTERM or SIGINT. Root; libbpf-dev.
 *   floor OBJECT PROGRAM
 */
#include <signal.h>

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
	struct bpf_program *want;
	struct bpf_object *o = open_one_program("floor", argv[1], argv[2], &want);
	if (!o)
		return 2;
	if (bpf_object__load(o)) {
		fprintf(stderr, "floor: this kernel refused %s\n", argv[2]);
		return 1;
	}
	struct bpf_link *link = bpf_program__attach(want);
	if (!link) {
		fprintf(stderr, "floor: cannot attach %s\n", argv[2]);
		return 1;
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
	bpf_link__destroy(link);
	bpf_object__close(o);
	return 0;
}
