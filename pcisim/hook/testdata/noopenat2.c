/*
 * noopenat2 runs a program as on a kernel older than 5.6: openat2 fails
 * with ENOSYS (a seccomp filter), so the hook's fallback path runs.
 *
 *   noopenat2 PROGRAM [ARG...]
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

int main(int argc, char **argv)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat2, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
	if (argc < 2 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
		fprintf(stderr, "noopenat2: %s\n", argc < 2 ? "usage: noopenat2 PROGRAM [ARG...]" : strerror(errno));
		return 2;
	}
	execv(argv[1], argv + 1);
	fprintf(stderr, "noopenat2: %s: %s\n", argv[1], strerror(errno));
	return 2;
}
