/* openbench: what a preloaded shim costs a program that never opens a umad
 * device. It prints the median nanoseconds (21 runs of 5000 calls) of
 *   open("/dev/null") + close,
 *   open("") (fails at once in the kernel: the shim's share is largest),
 *   read(-1) (fails at once: the read path's fd check).
 * Preloaded after the shim, nextstub.so replaces the system calls, which
 * leaves the shim's own cost. Results are not checked, for the stub's sake. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { RUNS = 21, N = 5000 };
static volatile int sink;

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static double median(int what)
{
	double ns[RUNS];
	char c;

	for (int r = 0; r < RUNS; r++) {
		double a = now();
		for (int i = 0; i < N; i++) {
			if (what == 0)
				sink += close(open("/dev/null", O_RDONLY));
			else if (what == 1)
				sink += open("", O_RDONLY);
			else
				sink += (int)read(-1, &c, 1);
		}
		ns[r] = (now() - a) / N;
	}
	qsort(ns, RUNS, sizeof ns[0], cmp);
	return ns[RUNS / 2];
}

int main(void)
{
	printf("open+close %.1f open-enoent %.1f read-ebadf %.1f\n", median(0), median(1), median(2));
	return 0;
}
