// Init and shutdown: refcounting, loading the snapshot, and deciding which
// of the node's GPUs this process sees.
#define _GNU_SOURCE
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <sys/stat.h>

#include "nvmock.h"

struct nvmock_state nvmock;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;

// nvmlShutdown frees nothing: another thread may still be inside a call
// (an event wait, say) that began before it. The next init reuses what is
// unchanged, so handles stay the same across Shutdown and Init, and keeps
// one earlier generation of what it replaces.
static struct nvmock_dev *old_devs;

// A fork while another thread holds the lock must not leave the child stuck.
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }
static void in_child(void)
{
	pthread_mutex_unlock(&lock);
	nvmock.pid = getpid(); // faults scoped to a process must see the child's own
	nvmock_events_in_child();
}

__attribute__((constructor)) static void setup(void)
{
	nvmock.pid = getpid();
	pthread_atfork(before_fork, after_fork, in_child);
}

static void node_seed(char *out, size_t size)
{
	const char *n = getenv("NODE_NAME");
	out[0] = '\0';
	if (n != NULL && n[0] != '\0') {
		snprintf(out, size, "%s", n);
		return;
	}
	FILE *f = fopen("/etc/machine-id", "re");
	if (f == NULL)
		return;
	if (fgets(out, (int)size, f) == NULL)
		out[0] = '\0';
	fclose(f);
	out[strcspn(out, " \t\r\n")] = '\0';
}

// dev_filter says whether device nodes decide visibility: where the control
// node exists (a container, or a dev root given by NVMOCK_DEV_ROOT), a GPU is
// visible only if its /dev/nvidiaN exists, as with the real driver.
static int dev_filter(const char **root)
{
	const char *r = getenv("NVMOCK_DEV_ROOT");
	*root = (r != NULL && r[0] != '\0') ? r : "/dev";
	char p[4096];
	snprintf(p, sizeof p, "%s/nvidiactl", *root);
	return access(p, F_OK) == 0;
}

static int dev_node_exists(const char *root, unsigned minor)
{
	char p[4096];
	snprintf(p, sizeof p, "%s/nvidia%u", root, minor);
	return access(p, F_OK) == 0;
}

// match_entry resolves one NVMOCK_VISIBLE_DEVICES entry to a node index.
static int match_entry(const char *e, size_t n, const char (*uuids)[96], unsigned count, long *out)
{
	int digits = n > 0;
	for (size_t i = 0; i < n; i++)
		digits &= isdigit((unsigned char)e[i]) != 0;
	if (digits) {
		char buf[32];
		if (n >= sizeof buf)
			return 0;
		memcpy(buf, e, n);
		buf[n] = '\0';
		long v = strtol(buf, NULL, 10);
		if (v < 0 || (unsigned long)v >= count)
			return 0;
		*out = v;
		return 1;
	}
	if (n < 4 || strncasecmp(e, "GPU-", 4) != 0)
		return 0;
	long found = -1;
	for (unsigned i = 0; i < count; i++) {
		if (strncasecmp(uuids[i], e, n) == 0) {
			if (found >= 0)
				return -1; // ambiguous prefix
			found = i;
		}
	}
	if (found < 0)
		return 0;
	*out = found;
	return 1;
}

// env_filter marks the GPUs NVMOCK_VISIBLE_DEVICES names, in a process with
// no control node (a plain process on a laptop), where nothing else narrows
// the node. The real libnvidia-ml ignores NVIDIA_VISIBLE_DEVICES (the runtime
// acts on it by choosing device nodes), and so does the mock. Unset, empty
// or "all" keep every GPU; "none" keeps none.
static nvmlReturn_t env_filter(unsigned count, const char (*uuids)[96], unsigned char *keep)
{
	const char *v = getenv("NVMOCK_VISIBLE_DEVICES");
	if (v == NULL || v[0] == '\0' || strcmp(v, "all") == 0) {
		memset(keep, 1, count);
		return NVML_SUCCESS;
	}
	memset(keep, 0, count);
	if (strcmp(v, "none") == 0)
		return NVML_SUCCESS;
	for (const char *p = v; *p;) {
		size_t n = strcspn(p, ",");
		const char *e = p;
		size_t en = n;
		while (en > 0 && isspace((unsigned char)*e))
			e++, en--;
		while (en > 0 && isspace((unsigned char)e[en - 1]))
			en--;
		if (en > 0) {
			long idx;
			int m = match_entry(e, en, uuids, count, &idx);
			if (m <= 0) {
				nvmock_warn("NVMOCK_VISIBLE_DEVICES=%s: entry \"%.*s\" %s", v, (int)en, e,
					    m < 0 ? "matches more than one GPU; give more of the UUID"
						  : "names no GPU on this node (use indices, UUIDs or unique UUID prefixes)");
				return NVML_ERROR_UNKNOWN;
			}
			keep[idx] = 1;
		}
		p += n;
		if (*p == ',')
			p++;
	}
	return NVML_SUCCESS;
}

static nvmlReturn_t build_devices(void)
{
	const struct snap_header *h = nvmock.hdr;
	unsigned count = h->device_count;
	nvmock.node = (const void *)((const char *)h + sizeof *h);
	nvmock.nic = (const void *)((const char *)nvmock.node + (size_t)count * sizeof(struct snap_device));
	nvmock.pool = (const void *)((const char *)nvmock.nic + (size_t)h->nic_count * sizeof(struct snap_nic));

	char seed[256] = "";
	if (h->flags & SNAP_FLAG_UNSEEDED)
		node_seed(seed, sizeof seed);
	// Identities first: NVMOCK_VISIBLE_DEVICES may name UUIDs.
	char (*uuids)[96] = calloc(count ? count : 1, 96);
	char (*serials)[32] = calloc(count ? count : 1, 32);
	unsigned char *keep = calloc(count ? count : 1, 1);
	nvmlReturn_t ret = NVML_ERROR_MEMORY;
	if (uuids == NULL || serials == NULL || keep == NULL)
		goto out;
	for (unsigned i = 0; i < count; i++) {
		const struct snap_device *s = &nvmock.node[i];
		if (h->flags & SNAP_FLAG_UNSEEDED) {
			nvmock_derive_identity(h->profile, seed, i, s->serial, uuids[i], serials[i]);
		} else {
			memcpy(uuids[i], s->uuid, 96);
			memcpy(serials[i], s->serial, 32);
		}
	}
	const char *root;
	nvmock.caps_root[0] = '\0';
	nvmock.mig_monitor = 1;
	nvmock.mig_config = 1;
	if (dev_filter(&root)) {
		for (unsigned i = 0; i < count; i++)
			keep[i] = dev_node_exists(root, nvmock.node[i].minor);
		// MIG devices too: by their capability nodes (none: a container
		// given whole GPUs sees no MIG device, as with NVIDIA's runtime).
		snprintf(nvmock.caps_root, sizeof nvmock.caps_root, "%s/nvidia-caps", root);
		char cap[sizeof nvmock.caps_root + 16];
		snprintf(cap, sizeof cap, "%s/nvidia-cap2", nvmock.caps_root); // mig-minors: "monitor 2"
		nvmock.mig_monitor = access(cap, F_OK) == 0;
		snprintf(cap, sizeof cap, "%s/nvidia-cap1", nvmock.caps_root); // "config 1"
		nvmock.mig_config = access(cap, F_OK) == 0;
	} else {
		ret = env_filter(count, (const char (*)[96])uuids, keep);
		if (ret != NVML_SUCCESS)
			goto out;
	}

	// A drained GPU takes no new clients: a process that starts after
	// the drain does not see it (drain.c).
	uint64_t reach = 0;
	for (unsigned i = 0; i < count; i++) {
		if (keep[i] && i < STATE_GPUS)
			reach |= 1ull << i;
		if (keep[i] && nvmock_drained(i))
			keep[i] = 0;
	}
	unsigned n = 0;
	for (unsigned i = 0; i < count; i++)
		n += keep[i];
	ret = NVML_ERROR_MEMORY;
	struct nvmock_dev *devs = calloc(n ? n : 1, sizeof(struct nvmock_dev));
	if (devs == NULL)
		goto out;
	unsigned total = n;
	n = 0;
	for (unsigned i = 0; i < count; i++) {
		if (!keep[i])
			continue;
		struct nvmock_dev *d = &devs[n];
		d->s = &nvmock.node[i];
		d->index = n++;
		d->node_index = i;
		memcpy(d->uuid, uuids[i], 96);
		memcpy(d->serial, serials[i], 32);
	}
	if (nvmock.devs != NULL && nvmock.ndevs == total && memcmp(nvmock.devs, devs, total * sizeof *devs) == 0) {
		free(devs);
	} else {
		free(old_devs);
		old_devs = nvmock.devs;
		nvmock.devs = devs;
		nvmock.ndevs = total;
	}
	__atomic_store_n(&nvmock.reach, reach, __ATOMIC_RELEASE);
	nvmock_mig_init();
	ret = NVML_SUCCESS;
out:
	free(uuids);
	free(serials);
	free(keep);
	return ret;
}

nvmlReturn_t nvmock_init(unsigned int flags)
{
	(void)flags;
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (refcount == 0) {
		const char *t = getenv("NVMOCK_TRACE");
		nvmock.trace = t != NULL && t[0] != '\0' && strcmp(t, "0") != 0;
		ret = nvmock_load();
		if (ret == NVML_SUCCESS)
			ret = build_devices();
	}
	if (ret == NVML_SUCCESS) {
		refcount++;
		__atomic_store_n(&nvmock.ready, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&lock);
	return ret;
}

NVML_API nvmlReturn_t nvmlInit_v2(void) { return nvmock_init(0); }
NVML_API nvmlReturn_t nvmlInit(void) { return nvmock_init(0); }
NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return nvmock_init(flags); }

NVML_API nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t ret = NVML_SUCCESS;
	if (refcount == 0) {
		ret = NVML_ERROR_UNINITIALIZED;
	} else if (--refcount == 0) {
		__atomic_store_n(&nvmock.ready, 0, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&lock);
	return ret;
}
