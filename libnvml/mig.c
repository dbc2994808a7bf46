// MIG: the mode, the board's instance profiles, and the GPU and compute
// instances, which are node state: they live in each GPU's record of the
// live state file, so an instance made by one process is seen by all.
// Readers copy the record inside the seqlock; writers (this file, and
// package live) take the file's flock, as root on the node would need.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mig.h"

struct nvmock_gi nvmock_gis[STATE_GPUS][STATE_GIS];
struct nvmock_ci nvmock_cis[STATE_GPUS][STATE_GIS][STATE_CIS];

void nvmock_mig_init(void)
{
	for (unsigned i = 0; i < nvmock.ndevs && i < STATE_GPUS; i++) {
		for (unsigned g = 0; g < STATE_GIS; g++) {
			nvmock_gis[i][g] = (struct nvmock_gi){&nvmock.devs[i], g};
			for (unsigned c = 0; c < STATE_CIS; c++)
				nvmock_cis[i][g][c] = (struct nvmock_ci){&nvmock.devs[i], g, c};
		}
	}
}

// nvmock_mig_read fills m with the GPU's MIG state: the snapshot's modes
// and no instances when the node has no state file.
void nvmock_mig_read(const struct nvmock_dev *d, struct mig_state *m)
{
	memset(m, 0, sizeof *m);
	m->current = d->s->mig_current;
	m->pending = d->s->mig_pending;
	if (nvmock.live == NULL || d->node_index >= STATE_GPUS)
		return;
	struct live_gpu g;
	if (!nvmock_live_copy(&g, &nvmock.live_gpus[d->node_index], sizeof g))
		return;
	m->live = 1;
	if (g.mig_set && g.mig_current <= 1 && g.mig_pending <= 1) {
		m->current = g.mig_current;
		m->pending = g.mig_pending;
	}
	nvmock_mig_clean(d->s, &g);
	memcpy(m->gi_profile, g.gi_profile, sizeof m->gi_profile);
	memcpy(m->gi_start, g.gi_start, sizeof m->gi_start);
	memcpy(m->ci_slices, g.ci_slices, sizeof m->ci_slices);
	memcpy(m->ci_start, g.ci_start, sizeof m->ci_start);
}

// nvmock_mig_clean drops the instances of g the board could not have
// made: a profile row or placement not in the snapshot's table, an id that
// is not its placement's, one that overlaps another or exceeds its
// profile's count. A damaged state file then reads as fewer instances, and
// every getter may index the snapshot's tables by what is left.
void nvmock_mig_clean(const struct snap_device *s, struct live_gpu *g)
{
	unsigned rows = s->mig_gi_count < SNAPSHOT_MAX_MIG_PROFILES ? s->mig_gi_count : SNAPSHOT_MAX_MIG_PROFILES;
	unsigned used = 0, count[SNAPSHOT_MAX_MIG_PROFILES] = {0};
	for (unsigned i = 0; i < STATE_GIS; i++) {
		uint32_t p = g->gi_profile[i], st = g->gi_start[i];
		unsigned size = p != 0 && p <= rows ? s->mig_gi_memory_slices[p - 1] : 0;
		unsigned bits = size < 8 ? ((1u << size) - 1) : 0xffu;
		int ok = size != 0 && st < 8 && (s->mig_gi_placements[p - 1] >> st & 1) && nvmock_mig_gi_id(st, size) == i &&
			 !(used & bits << st) && count[p - 1] < s->mig_gi_instances[p - 1];
		if (ok) {
			used |= bits << st;
			count[p - 1]++;
		} else {
			g->gi_profile[i] = g->gi_start[i] = 0;
		}
		// Compute instances: sizes the profile holds, each where one of
		// its size may start, one over each slice.
		unsigned whole = ok ? s->mig_gi_compute_slices[p - 1] : 0, cused = 0;
		for (unsigned c = 0; c < STATE_CIS; c++) {
			uint32_t *sl = &g->ci_slices[i * STATE_CIS + c], *cs = &g->ci_start[i * STATE_CIS + c];
			unsigned n = *sl, cbits = n < 32 ? (1u << n) - 1 : 0;
			if (n != 0 && n <= whole && (s->mig_gi_ci_sizes[p - 1] >> n & 1) && *cs % nvmock_mig_ci_step(n) == 0 &&
			    (uint64_t)*cs + n <= whole && !(cused & cbits << *cs)) {
				cused |= cbits << *cs;
				continue;
			}
			*sl = *cs = 0;
		}
	}
}

int nvmock_mig_row_by_enum(const struct snap_device *s, unsigned profile)
{
	for (unsigned r = 0; r < s->mig_gi_count && r < SNAPSHOT_MAX_MIG_PROFILES; r++)
		if (s->mig_gi_nvml[r] == profile)
			return (int)r;
	return -1;
}

int nvmock_mig_row_by_id(const struct snap_device *s, unsigned id)
{
	for (unsigned r = 0; r < s->mig_gi_count && r < SNAPSHOT_MAX_MIG_PROFILES; r++)
		if (s->mig_gi_id[r] == id)
			return (int)r;
	return -1;
}

// nvmock_mig_name copies row r's name ("1g.5gb") out of the newline list.
void nvmock_mig_name(const struct snap_device *s, unsigned r, char *out, size_t len)
{
	const char *p = s->mig_gi_names, *end = s->mig_gi_names + sizeof s->mig_gi_names;
	for (unsigned i = 0; i < r && p < end; i++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		p = nl != NULL ? nl + 1 : end;
	}
	size_t n = 0;
	while (p + n < end && p[n] != '\n' && p[n] != '\0')
		n++;
	snprintf(out, len, "%.*s", (int)n, p);
}

// The GPU-instance id of a placement: one per node of the tree of memory
// slices (7g is 0, the 4-slice halves 1 and 2, then 3..6 and 7..14), as
// the real driver numbers them.
unsigned nvmock_mig_gi_id(unsigned start, unsigned size)
{
	switch (size) {
	case 8:
		return 0;
	case 4:
		return 1 + start / 4;
	case 2:
		return 3 + start / 2;
	default:
		return 7 + start;
	}
}

static void warn_state(void)
{
	static int once;
	if (__atomic_exchange_n(&once, 1, __ATOMIC_RELAXED))
		return;
	const char *refused = nvmock_live_refused();
	unsigned gpus = nvmock_live_refused_gpus();
	if (gpus != 0)
		nvmock_warn("MIG changes and settings are node state, kept in the live state file; %s was made for %u "
			    "GPUs, the snapshot has %u: reinstall the node",
			    refused, gpus, (unsigned)nvmock.hdr->device_count);
	else if (refused != NULL)
		nvmock_warn("MIG changes and settings are node state, kept in the live state file; %s is not one of "
			    "this nvmock (another version's or another node's): reinstall the node",
			    refused);
	else
		nvmock_warn("MIG changes and settings are node state, kept in the live state file; this process has none "
			    "(install the node, or run under nvmock exec)");
}

// nvmock_mig_change is nvmock_live_update for making and destroying GPU and
// compute instances, which the driver allows only a process holding the MIG
// config capability (a container given NVIDIA_MIG_CONFIG_DEVICES=all, a
// host): NO_PERMISSION without its node, as nvidia-smi's "Insufficient
// Permissions".
nvmlReturn_t nvmock_mig_change(const struct nvmock_dev *d, live_change fn, void *arg)
{
	if (!nvmock.mig_config)
		return NVML_ERROR_NO_PERMISSION;
	return nvmock_live_update(d, fn, arg);
}

// nvmock_live_update runs fn on a copy of the GPU's live record under the
// writers' lock and publishes it inside the seqlock. A state file this
// process cannot write (a container's read-only view, or not root) is
// NO_PERMISSION, as MIG changes and settings are for root on the real node.
nvmlReturn_t nvmock_live_update(const struct nvmock_dev *d, live_change fn, void *arg)
{
	const char *path = nvmock_live_path();
	if (path == NULL || d->node_index >= STATE_GPUS) {
		warn_state();
		return NVML_ERROR_NO_PERMISSION;
	}
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == EACCES || errno == EROFS || errno == EPERM ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
	nvmlReturn_t ret = NVML_ERROR_UNKNOWN;
	size_t size = nvmock_live_size();
	if (flock(fd, LOCK_EX) != 0) {
		close(fd);
		return ret;
	}
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		goto out;
	struct live_header *h = m;
	struct live_gpu *rec = (struct live_gpu *)(h + 1) + d->node_index;
	if (memcmp(h->magic, "NVMOCKLV", 8) != 0 || h->version != STATE_VERSION) {
		munmap(m, size);
		goto out;
	}
	// Under the lock no writer is inside: the record is whole. Instances
	// readers would drop are dropped here too, so changes see what they do.
	struct live_gpu g = *rec;
	nvmock_mig_clean(d->s, &g);
	const struct live_proc *procs = (const void *)((struct live_event *)((struct live_gpu *)(h + 1) + STATE_GPUS) + STATE_EVENTS);
	ret = fn(d, &g, procs, arg);
	if (ret == NVML_SUCCESS) {
		uint32_t seq = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
		if (seq & 1) {
			seq++; // a writer died inside; its lock went with it
			nvmock_warn("state %s: a writer died while changing it; its change may be partly applied", path);
		}
		__atomic_store_n(&h->seq, seq + 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_RELEASE);
		*rec = g;
		h->generation++;
		__atomic_store_n(&h->seq, seq + 2, __ATOMIC_RELEASE);
		__atomic_add_fetch(&h->wake, 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, &h->wake, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
	}
	munmap(m, size);
out:
	flock(fd, LOCK_UN);
	close(fd);
	return ret;
}

// ---- mode ----

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
	DEV(device, d);
	if (currentMode == NULL || pendingMode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->mig_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	struct mig_state m;
	nvmock_mig_read(d, &m);
	*currentMode = m.current;
	*pendingMode = m.pending;
	return NVML_SUCCESS;
}

static int has_instances(const struct live_gpu *g)
{
	for (unsigned i = 0; i < STATE_GIS; i++)
		if (g->gi_profile[i] != 0)
			return 1;
	return 0;
}

// nvmock_mig_instances says whether a GPU is in MIG mode with GPU
// instances: nvml.h's remapped-row queries are not supported then.
int nvmock_mig_instances(const struct nvmock_dev *d)
{
	if (!nvmock_mig_on(d))
		return 0;
	struct mig_state m;
	nvmock_mig_read(d, &m);
	if (m.current != NVML_DEVICE_MIG_ENABLE)
		return 0;
	for (unsigned i = 0; i < STATE_GIS; i++)
		if (m.gi_profile[i] != 0)
			return 1;
	return 0;
}

struct set_mode {
	unsigned mode;
	nvmlReturn_t activation;
};

static nvmlReturn_t set_mode(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	struct set_mode *a = arg;
	unsigned cur = g->mig_set ? g->mig_current : d->s->mig_current;
	if (a->mode == 0 && cur == 1 && has_instances(g))
		return NVML_ERROR_IN_USE; // "In use by another client"
	g->mig_set = 1;
	g->mig_pending = a->mode;
	a->activation = NVML_SUCCESS;
	// The mode changes once the GPU is idle: with processes on it the
	// change stays pending, as when the driver cannot reset a busy GPU.
	if (nvmock_live_procs_in(procs, d->node_index, LIVE_ANY, LIVE_ANY) > 0 && cur != a->mode)
		a->activation = NVML_ERROR_IN_USE;
	else
		g->mig_current = a->mode;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus)
{
	DEV(device, d);
	OUT(activationStatus);
	if (d->s->mig_current == NA32 || (mode == NVML_DEVICE_MIG_ENABLE && d->s->mig_gi_count == 0))
		return NVML_ERROR_NOT_SUPPORTED;
	if (mode != NVML_DEVICE_MIG_DISABLE && mode != NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct set_mode a = {mode, NVML_SUCCESS};
	nvmlReturn_t r = nvmock_live_update(d, set_mode, &a);
	if (r == NVML_SUCCESS)
		*activationStatus = a.activation;
	return r;
}
