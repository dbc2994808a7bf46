//go:build ignore

/*
 * Part of libnvmock-umad.so: keeps every other libibverbs provider off the
 * mock HCAs.
 *
 * A program linked against a provider (perftest, UCX and NCCL's mlx5 paths
 * link libmlx5 for its direct verbs) registers it from the provider's
 * constructor, before libibverbs loads nvmock's from RDMAV_DRIVERS, and
 * libibverbs gives a device to the first provider that matches it. mlx5
 * matches a mock HCA by its PCI modalias and then "works" on /dev/null:
 * every command write succeeds with a zeroed answer (a port in state 0,
 * measured with ib_write_bw). So the shim, loaded ahead of every library,
 * takes the registration call and hands libibverbs a copy of each other
 * provider's ops whose match refuses a uverbs node with /dev/null's numbers,
 * which no real HCA has. Real HCAs still go to their own provider.
 *
 * Costs nothing to a program that loads no provider; no allocation (a
 * static table), no threads.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>
#include <sys/sysmacros.h>

#include <infiniband/driver.h>

/* As in umad.c: the oldest versions, for programs of glibc < 2.34. */
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
#endif

#define EXPORT __attribute__((visibility("default")))
#define MOCK_CDEV makedev(1, 3)

/* rdma-core ships about twenty providers; more than this many registered
 * in one process go to libibverbs unchanged. */
#define SLOTS 32

static struct verbs_device_ops copies[SLOTS];
static bool (*matches[SLOTS])(struct verbs_sysfs_dev *);
static int used;

/* The match libibverbs applies to a provider without its own function:
 * its table must have matched. */
static bool guarded(int i, struct verbs_sysfs_dev *dev)
{
	if (dev->sysfs_cdev == MOCK_CDEV)
		return false;
	return matches[i] ? matches[i](dev) : dev->match != NULL;
}

#define G(i) static bool guard##i(struct verbs_sysfs_dev *d) { return guarded(i, d); }
G(0) G(1) G(2) G(3) G(4) G(5) G(6) G(7) G(8) G(9) G(10) G(11) G(12) G(13) G(14) G(15)
G(16) G(17) G(18) G(19) G(20) G(21) G(22) G(23) G(24) G(25) G(26) G(27) G(28) G(29) G(30) G(31)
#undef G
static bool (*const guards[SLOTS])(struct verbs_sysfs_dev *) = {
	guard0, guard1, guard2, guard3, guard4, guard5, guard6, guard7,
	guard8, guard9, guard10, guard11, guard12, guard13, guard14, guard15,
	guard16, guard17, guard18, guard19, guard20, guard21, guard22, guard23,
	guard24, guard25, guard26, guard27, guard28, guard29, guard30, guard31,
};

/* driver.h's verbs_register_driver, as providers of ABI 34 call it; the
 * version script gives it libibverbs' version, so it binds exactly. */
EXPORT void verbs_register_driver(const struct verbs_device_ops *ops)
{
	static void (*next)(const struct verbs_device_ops *);
	int i;

	if (!next)
		next = (void (*)(const struct verbs_device_ops *))dlsym(RTLD_NEXT, "verbs_register_driver_34");
	if (!next) {
		/* libibverbs was dlopened without RTLD_GLOBAL (UCX, NCCL and
		 * MPI load it so), out of RTLD_NEXT's reach: ask it directly.
		 * Dropping the call would leave the program with no providers
		 * at all. */
		void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);

		if (h) {
			next = (void (*)(const struct verbs_device_ops *))dlsym(h, "verbs_register_driver_34");
			dlclose(h);
		}
	}
	if (!next)
		return; /* cannot happen: the caller linked against libibverbs */
	/* Providers register from their constructors, which the loader
	 * runs one at a time. */
	if (ops && ops->name && strcmp(ops->name, "nvmock") && used < SLOTS) {
		i = used++;
		copies[i] = *ops;
		matches[i] = ops->match_device;
		copies[i].match_device = guards[i];
		ops = &copies[i];
	}
	next(ops);
}
