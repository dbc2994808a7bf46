// MIG devices: a compute instance seen as an nvmlDevice_t, with the few
// getters the real driver answers on one; the rest say NOT_SUPPORTED.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "mig.h"

int nvmock_is_mig_handle(nvmlDevice_t h)
{
	uintptr_t off = (uintptr_t)h.handle - (uintptr_t)&nvmock_cis[0][0][0];
	unsigned n = nvmock.ndevs < STATE_GPUS ? nvmock.ndevs : STATE_GPUS;
	return off < (uintptr_t)n * STATE_GIS * STATE_CIS * sizeof(struct nvmock_ci) && off % sizeof(struct nvmock_ci) == 0;
}

// nvmock_not_a_gpu is what a GPU's getter answers for a handle that is not
// a GPU's: Not Supported for a MIG device (a call the driver does not
// answer on one), Invalid Argument for anything else, a MIG device whose
// compute instance is gone among them (nvml.h: an invalid device).
nvmlReturn_t nvmock_not_a_gpu(nvmlDevice_t h)
{
	struct mig_dev md;
	if (!nvmock_is_mig_handle(h))
		return NVML_ERROR_INVALID_ARGUMENT;
	switch (nvmock_mig_of(h, &md)) {
	case NVML_SUCCESS:
		return NVML_ERROR_NOT_SUPPORTED;
	case NVML_ERROR_GPU_IS_LOST:
		return NVML_ERROR_GPU_IS_LOST; // its GPU's (review)
	default:
		return NVML_ERROR_INVALID_ARGUMENT;
	}
}

// nvmock_mig_of validates a MIG device handle, filling what it is.
nvmlReturn_t nvmock_mig_of(nvmlDevice_t h, struct mig_dev *out)
{
	nvmlComputeInstance_t c = {(struct nvmlComputeInstance_st *)h.handle};
	struct mig_state m;
	nvmlReturn_t r = nvmock_ci_of(c, &out->ci, &m);
	if (r != NVML_SUCCESS)
		return r;
	const struct snap_device *s = out->ci->dev->s;
	out->row = m.gi_profile[out->ci->gi] - 1;
	out->slices = m.ci_slices[out->ci->gi * STATE_CIS + out->ci->id];
	out->s = s;
	return NVML_SUCCESS;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

// nvmock_mig_uuid is a MIG device's UUID: name-based (version 5 form) on
// the parent's UUID and the two instance ids, so every process agrees.
void nvmock_mig_uuid(const struct nvmock_ci *ci, char out[96])
{
	uint64_t h = 1469598103934665603ull;
	for (const char *p = ci->dev->uuid; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	uint64_t a = mix(h ^ ((uint64_t)ci->gi << 8 | ci->id)), b = mix(a ^ 0x4d4947);
	a = (a & ~0xf000ull) | 0x5000ull;                         // version 5
	b = (b & ~(3ull << 62)) | (2ull << 62);                  // RFC 4122 variant
	snprintf(out, 96, "MIG-%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffff,
		 (unsigned)a & 0xffff, (unsigned)(b >> 48), (unsigned long long)(b & 0xffffffffffffull));
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	DEV(device, d);
	OUT(count);
	// nvidia-ctk treats an error here as fatal; boards without MIG say 0,
	// and so does one with MIG off or only pending on (nvml.h: "zero if
	// MIG is not supported or enabled"; review: it said 7).
	*count = 0;
	if (d->s->mig_current != NA32) {
		struct mig_state m;
		nvmock_mig_read(d, &m);
		if (m.current == NVML_DEVICE_MIG_ENABLE)
			*count = d->s->max_mig_devices;
	}
	return NVML_SUCCESS;
}

// nvmock_mig_visible says whether this process may use a MIG device: as
// with the real driver, whether it has the device nodes of the GPU and
// compute instance's capabilities (a container is given those of its MIG
// devices only), or the MIG monitor capability's (nvidia-cap2, which a
// MIG-capable host has, and NVIDIA_MIG_MONITOR_DEVICES=all gives a
// container), with which it sees them all. Without device nodes deciding
// (no nvidiactl: a process outside any device view) every one is.
int nvmock_mig_visible(const struct nvmock_dev *d, unsigned gi, unsigned ci)
{
	if (nvmock.mig_monitor)
		return 1;
	char p[sizeof nvmock.caps_root + 32];
	unsigned base = 3 + 135 * d->s->minor + 9 * gi; // /proc/driver/nvidia-caps/mig-minors
	snprintf(p, sizeof p, "%s/nvidia-cap%u", nvmock.caps_root, base);
	if (access(p, F_OK) != 0)
		return 0;
	snprintf(p, sizeof p, "%s/nvidia-cap%u", nvmock.caps_root, base + 1 + ci);
	return access(p, F_OK) == 0;
}

// MIG devices are numbered by GPU-instance id, then compute-instance id.
NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
	DEV(device, d);
	OUT(migDevice);
	if (d->s->mig_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (index >= d->s->max_mig_devices)
		return NVML_ERROR_INVALID_ARGUMENT;
	// go-nvlib (nvidia-ctk, the device plugin) skips NOT_FOUND and fails
	// on anything else.
	struct mig_state m;
	nvmock_mig_read(d, &m);
	if (m.current != NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_NOT_FOUND;
	unsigned n = 0;
	for (unsigned g = 0; g < STATE_GIS; g++) {
		for (unsigned c = 0; m.gi_profile[g] != 0 && c < STATE_CIS; c++) {
			if (m.ci_slices[g * STATE_CIS + c] != 0 && nvmock_mig_visible(d, g, c) && n++ == index) {
				migDevice->handle = (struct nvmlDevice_st *)&nvmock_cis[d->index][g][c];
				return NVML_SUCCESS;
			}
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(isMigDevice);
	struct mig_dev md;
	if (nvmock_is_mig_handle(device)) {
		nvmlReturn_t r = nvmock_mig_of(device, &md);
		if (r == NVML_SUCCESS)
			*isMigDevice = 1;
		return r;
	}
	DEV(device, d);
	(void)d;
	*isMigDevice = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(device);
	struct mig_dev md;
	nvmlReturn_t r = nvmock_mig_of(migDevice, &md);
	if (r != NVML_SUCCESS)
		return r;
	*device = nvmock_handle(md.ci->dev);
	return NVML_SUCCESS;
}

static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned int *id, int gi)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(id);
	if (!nvmock_is_mig_handle(device)) {
		DEV(device, d);
		(void)d;
		return NVML_ERROR_NOT_SUPPORTED;
	}
	struct mig_dev md;
	nvmlReturn_t r = nvmock_mig_of(device, &md);
	if (r == NVML_SUCCESS)
		*id = gi ? md.ci->gi : md.ci->id;
	return r;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
	return instance_id(device, id, 1);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
	return instance_id(device, id, 0);
}

NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (!nvmock_is_mig_handle(device)) {
		DEV(device, d);
		(void)d;
		return NVML_ERROR_NOT_SUPPORTED;
	}
	struct mig_dev md;
	nvmlReturn_t r = nvmock_mig_of(device, &md);
	if (r != NVML_SUCCESS)
		return r;
	OUT(attributes);
	const struct snap_device *s = md.s;
	*attributes = (nvmlDeviceAttributes_t){nvmock_mig_ci_sms(s, md.row, md.slices), s->mig_gi_copy_engines[md.row],
					       s->mig_gi_decoders[md.row], s->mig_gi_encoders[md.row],
					       s->mig_gi_jpegs[md.row], s->mig_gi_ofas[md.row],
					       s->mig_gi_compute_slices[md.row], md.slices, s->mig_gi_memory_mib[md.row]};
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
	return nvmlDeviceGetAttributes_v2(device, attributes);
}

// The getters below answer for GPUs elsewhere; these are their MIG halves.

nvmlReturn_t nvmock_mig_get_name(const struct mig_dev *md, char *name, unsigned int length)
{
	char n[48], full[NVML_DEVICE_NAME_V2_BUFFER_SIZE + 64];
	nvmock_mig_ci_name(md->s, md->row, md->slices, n, sizeof n);
	snprintf(full, sizeof full, "%s MIG %s", md->s->name, n);
	return nvmock_str(name, length, full);
}

nvmlReturn_t nvmock_mig_get_uuid(const struct mig_dev *md, char *uuid, unsigned int length)
{
	char u[96];
	nvmock_mig_uuid(md->ci, u);
	return nvmock_str(uuid, length, u);
}

// nvmock_mig_index is the MIG device's index under its GPU, the one
// nvmlDeviceGetMigDeviceHandleByIndex takes.
unsigned nvmock_mig_index(const struct mig_dev *md)
{
	struct mig_state m;
	nvmock_mig_read(md->ci->dev, &m);
	unsigned n = 0;
	for (unsigned k = 0; k < md->ci->gi * STATE_CIS + md->ci->id; k++)
		n += m.gi_profile[k / STATE_CIS] != 0 && m.ci_slices[k] != 0 &&
		     nvmock_mig_visible(md->ci->dev, k / STATE_CIS, k % STATE_CIS);
	return n;
}

// nvmock_mig_memory is a MIG device's memory: its GPU instance's, used by
// the driver (the profile's idle use) and by the processes on any of the
// instance's MIG devices, as a real one shows it.
void nvmock_mig_memory(const struct mig_dev *md, unsigned long long *total, unsigned long long *used)
{
	*total = (unsigned long long)md->s->mig_gi_memory_mib[md->row] << 20;
	*used = nvmock_mig_gi_used(md->s, md->row, nvmock_live_gi_memory(md->ci->dev->node_index, md->ci->gi));
}

// nvmock_mig_gi_used is the used memory of a GPU instance of profile row
// whose processes use procs bytes: those and the profile's idle use, up
// to its size.
unsigned long long nvmock_mig_gi_used(const struct snap_device *s, unsigned row, unsigned long long procs)
{
	unsigned long long total = (unsigned long long)s->mig_gi_memory_mib[row] << 20;
	unsigned long long used = ((unsigned long long)s->mig_gi_used_mib[row] << 20) + procs;
	return used < total ? used : total;
}

// mig_by_path finds the MIG device of the form MIG-GPU-<uuid>/<gi>/<ci>,
// which drivers before R470 printed and NVML still takes.
static nvmlReturn_t mig_by_path(const char *uuid, nvmlDevice_t *device)
{
	char gpu[96], gs[3], cs[3];
	int n = 0;
	// Ids of two digits at most: %u would wrap 4294967298 to 2.
	if (sscanf(uuid + 4, "%95[^/]/%2[0-9]/%2[0-9]%n", gpu, gs, cs, &n) != 3 || uuid[4 + n] != '\0')
		return NVML_ERROR_NOT_FOUND;
	unsigned g = (unsigned)atoi(gs), c = (unsigned)atoi(cs);
	if (g >= STATE_GIS || c >= STATE_CIS)
		return NVML_ERROR_NOT_FOUND;
	for (unsigned i = 0; i < nvmock.ndevs && i < STATE_GPUS; i++) {
		if (strcasecmp(nvmock.devs[i].uuid, gpu) != 0)
			continue;
		struct mig_state m;
		nvmock_mig_read(&nvmock.devs[i], &m);
		if (m.current != NVML_DEVICE_MIG_ENABLE || m.gi_profile[g] == 0 || m.ci_slices[g * STATE_CIS + c] == 0 ||
		    !nvmock_mig_visible(&nvmock.devs[i], g, c))
			return NVML_ERROR_NOT_FOUND;
		device->handle = (struct nvmlDevice_st *)&nvmock_cis[i][g][c];
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_FOUND;
}

// nvmock_mig_by_uuid finds the MIG device of a MIG-... UUID.
nvmlReturn_t nvmock_mig_by_uuid(const char *uuid, nvmlDevice_t *device)
{
	if (strncasecmp(uuid, "MIG-GPU-", 8) == 0)
		return mig_by_path(uuid, device);
	for (unsigned i = 0; i < nvmock.ndevs && i < STATE_GPUS; i++) {
		struct mig_state m;
		nvmock_mig_read(&nvmock.devs[i], &m);
		if (m.current != NVML_DEVICE_MIG_ENABLE)
			continue;
		for (unsigned g = 0; g < STATE_GIS; g++) {
			for (unsigned c = 0; m.gi_profile[g] != 0 && c < STATE_CIS; c++) {
				char u[96];
				if (m.ci_slices[g * STATE_CIS + c] == 0 || !nvmock_mig_visible(&nvmock.devs[i], g, c))
					continue;
				nvmock_mig_uuid(&nvmock_cis[i][g][c], u);
				if (strcasecmp(u, uuid) == 0) {
					device->handle = (struct nvmlDevice_st *)&nvmock_cis[i][g][c];
					return NVML_SUCCESS;
				}
			}
		}
	}
	return NVML_ERROR_NOT_FOUND;
}
