// Finding, mapping and checking the snapshot file.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvmock.h"

// The default node (8 x A100-SXM4-40GB), embedded at build time; its
// identities are derived at init from the node it runs on.
extern const unsigned char nvmock_default_snapshot[] __attribute__((visibility("hidden")));
extern const unsigned char nvmock_default_snapshot_end[] __attribute__((visibility("hidden")));
__asm__(".section .rodata\n"
	".balign 8\n"
	"nvmock_default_snapshot:\n"
	".incbin \"" NVMOCK_DEFAULT_SNAPSHOT "\"\n"
	"nvmock_default_snapshot_end:\n"
	".previous\n");

// The mapped snapshot, and the one an earlier init mapped: a thread may
// still be inside a call that began before nvmlShutdown, so an init that
// maps anew keeps the previous generation and unmaps the one before it.
static void *map_addr, *old_addr;
static size_t map_len, old_len;
static struct stat map_st;
static char map_path[PATH_MAX];

static void retire_map(void)
{
	if (old_addr != NULL)
		munmap(old_addr, old_len);
	old_addr = map_addr;
	old_len = map_len;
	map_addr = NULL;
	map_len = 0;
	map_path[0] = '\0';
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

// mig_ok checks the MIG profile table the MIG getters index and shift by:
// at most 8 rows of 8 memory slices, 8 compute slices and 8 placements.
static int mig_ok(const struct snap_device *d)
{
	if (d->mig_gi_count > SNAPSHOT_MAX_MIG_PROFILES)
		return 0;
	for (uint32_t r = 0; r < d->mig_gi_count; r++)
		if (d->mig_gi_memory_slices[r] - 1 >= 8 || d->mig_gi_compute_slices[r] - 1 >= 8 ||
		    d->mig_gi_placements[r] > 0xff || d->mig_gi_ci_sizes[r] > 0x1ff || d->mig_gi_instances[r] > 8)
			return 0;
	return 1;
}

// snap_check validates everything the getters trust, so they need no checks.
static const char *snap_check(const unsigned char *p, size_t len)
{
	const struct snap_header *h = (const void *)p;
	if (len < sizeof h->magic || memcmp(h->magic, "NVMOCKSS", 8) != 0)
		return "not an nvmock snapshot (bad magic)";
	if (len < sizeof *h)
		return "truncated: shorter than its header";
	if (h->version != SNAPSHOT_VERSION)
		return "wrong snapshot version; recompile it with this nvmock (nvmock profile compile)";
	if (h->header_size != sizeof *h || h->device_size != sizeof(struct snap_device) ||
	    h->nic_size != sizeof(struct snap_nic))
		return "record sizes do not match this library";
	uint64_t want = sizeof *h + (uint64_t)h->device_count * sizeof(struct snap_device) +
			(uint64_t)h->nic_count * sizeof(struct snap_nic) + (uint64_t)h->pool_count * 4;
	if (len != want)
		return "file size does not match its header (truncated or padded)";
	if (memchr(h->driver_version, 0, sizeof h->driver_version) == NULL ||
	    memchr(h->nvml_version, 0, sizeof h->nvml_version) == NULL ||
	    memchr(h->profile, 0, sizeof h->profile) == NULL)
		return "header string is not terminated";
	const struct snap_device *d = (const void *)(p + sizeof *h);
	for (uint32_t i = 0; i < h->device_count; i++) {
		for (const struct snap_string *s = snap_device_strings; s->len; s++)
			if (memchr((const char *)&d[i] + s->off, 0, s->len) == NULL)
				return "device string is not terminated";
		if (d[i].supported_mem_count > SNAPSHOT_MAX_MEM_CLOCKS ||
		    (uint64_t)d[i].supported_mem_first + d[i].supported_mem_count > h->pool_count)
			return "supported clocks out of range";
		for (uint32_t k = 0; k < d[i].supported_mem_count; k++)
			if ((uint64_t)d[i].supported_gfx_first[k] + d[i].supported_gfx_count[k] > h->pool_count)
				return "supported clocks out of range";
		if (!mig_ok(&d[i]))
			return "MIG profile table out of range";
		if (d[i].nvlink_fw_count > SNAPSHOT_MAX_NVLINK_FIRMWARE)
			return "NVLink firmware list out of range";
	}
	return NULL;
}

// snapshot_path finds the file: NVMOCK_SNAPSHOT, else <driver root>/etc/nvmock/snapshot
// next to this library. It returns 0 when there is none (use the default),
// with out the path looked at, or "".
static int snapshot_path(char *out, size_t size, int *explicit)
{
	out[0] = '\0';
	const char *env = getenv("NVMOCK_SNAPSHOT");
	*explicit = env != NULL && env[0] != '\0';
	if (*explicit) {
		snprintf(out, size, "%s", env);
		return 1;
	}
	Dl_info info;
	if (dladdr((void *)&snap_check, &info) == 0 || info.dli_fname == NULL)
		return 0;
	// Resolve the path: the loader may spell it ".../usr/bin/../lib64" (an
	// RPATH of $ORIGIN/../lib64) or reach it through symlinks.
	char dir[PATH_MAX];
	if (realpath(info.dli_fname, dir) == NULL)
		snprintf(dir, sizeof dir, "%s", info.dli_fname);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		return 0;
	*slash = '\0';
	static const char *const libdirs[] = {"/usr/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib", "/lib64", NULL};
	for (const char *const *l = libdirs; *l; l++) {
		size_t dl = strlen(dir), ll = strlen(*l);
		if (dl >= ll && strcmp(dir + dl - ll, *l) == 0) {
			dir[dl - ll] = '\0';
			snprintf(out, size, "%s/etc/nvmock/snapshot", dir);
			return access(out, F_OK) == 0; // absent: use the default
		}
	}
	return 0;
}

nvmlReturn_t nvmock_load(void)
{
	char path[PATH_MAX];
	int explicit;
	if (!snapshot_path(path, sizeof path, &explicit)) {
		const unsigned char *p = nvmock_default_snapshot;
		size_t len = (size_t)(nvmock_default_snapshot_end - nvmock_default_snapshot);
		const char *bad = snap_check(p, len);
		if (bad != NULL) {
			nvmock_warn("built-in snapshot: %s", bad);
			return NVML_ERROR_UNKNOWN;
		}
		// Given GPU nodes (a container) but not the node's snapshot: the
		// built-in board is not this node's, which would pass unnoticed.
		static int warned;
		const char *root = getenv("NVMOCK_DEV_ROOT");
		char ctl[PATH_MAX];
		snprintf(ctl, sizeof ctl, "%s/nvidiactl", root != NULL && root[0] != '\0' ? root : "/dev");
		if (!warned && path[0] != '\0' && access(ctl, F_OK) == 0) {
			warned = 1;
			nvmock_warn("no snapshot at %s: showing the built-in %s board, not this node's GPUs (a container "
				    "nvmock's NRI plugin did not equip: opt its namespace in)",
				    path, ((const struct snap_header *)p)->profile);
		}
		if (map_addr != NULL)
			retire_map();
		nvmock.hdr = (const void *)p;
		nvmock_live_map(NULL);
		return NVML_SUCCESS;
	}
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		nvmock_warn("snapshot %s%s: %s", path, explicit ? " (NVMOCK_SNAPSHOT)" : "", strerror(errno));
		return NVML_ERROR_UNKNOWN;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
		nvmock_warn("snapshot %s: not a regular, non-empty file", path);
		close(fd);
		return NVML_ERROR_UNKNOWN;
	}
	// The file mapped at an earlier init, unchanged: keep it (and the
	// handles built on it).
	if (map_addr != NULL && strcmp(path, map_path) == 0 && same_file(&st, &map_st)) {
		close(fd);
		nvmock.hdr = map_addr;
		nvmock_live_map(path);
		return NVML_SUCCESS;
	}
	// No profile compiles to more (nvmock profile compile refuses to);
	// a larger file is not ours, and mapping it would cost every process.
	if (st.st_size > SNAPSHOT_MAX_BYTES) {
		nvmock_warn("snapshot %s: %lld bytes, over the limit of %d; recompile it with nvmock profile compile",
			    path, (long long)st.st_size, SNAPSHOT_MAX_BYTES);
		close(fd);
		return NVML_ERROR_UNKNOWN;
	}
	void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		nvmock_warn("snapshot %s: mmap: %s", path, strerror(errno));
		return NVML_ERROR_UNKNOWN;
	}
	const char *bad = snap_check(m, (size_t)st.st_size);
	if (bad != NULL) {
		nvmock_warn("snapshot %s: %s", path, bad);
		munmap(m, (size_t)st.st_size);
		return NVML_ERROR_UNKNOWN;
	}
	retire_map();
	map_addr = m;
	map_len = (size_t)st.st_size;
	map_st = st;
	snprintf(map_path, sizeof map_path, "%s", path);
	nvmock.hdr = m;
	nvmock_live_map(path);
	return NVML_SUCCESS;
}
