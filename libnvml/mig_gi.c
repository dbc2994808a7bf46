// MIG GPU instances: the board's profiles and placements, and creating,
// listing and destroying instances in the node's state.
#include <stdio.h>
#include <string.h>

#include "mig.h"

nvmlReturn_t nvmock_gi_of(nvmlGpuInstance_t h, const struct nvmock_gi **out, struct mig_state *m)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	uintptr_t off = (uintptr_t)h.handle - (uintptr_t)&nvmock_gis[0][0];
	unsigned n = nvmock.ndevs < STATE_GPUS ? nvmock.ndevs : STATE_GPUS;
	if (off >= (uintptr_t)n * STATE_GIS * sizeof(struct nvmock_gi) || off % sizeof(struct nvmock_gi))
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct nvmock_gi *gi = (const struct nvmock_gi *)h.handle;
	nvmlReturn_t r = nvmock_dev_faults(gi->dev);
	if (r != NVML_SUCCESS)
		return r;
	nvmock_mig_read(gi->dev, m);
	if (m->current != NVML_DEVICE_MIG_ENABLE || m->gi_profile[gi->id] == 0)
		return NVML_ERROR_INVALID_ARGUMENT; // destroyed since
	*out = gi;
	return NVML_SUCCESS;
}

static nvmlGpuInstance_t gi_handle(const struct nvmock_dev *d, unsigned id)
{
	nvmlGpuInstance_t h = {(struct nvmlGpuInstance_st *)&nvmock_gis[d->index][id]};
	return h;
}

// From driver 550 on, the profiles, their placements and the remaining
// capacity are answered with MIG off too (NVML's change log for the first
// two; a real R580 H100 with MIG off lists every profile with all its
// instances free), so NVIDIA's DRA driver publishes the MIG devices of a
// GPU whose MIG is off and turns MIG on when a claim needs one. Before
// 550 they need MIG on, and nvidia-smi lists no profile of such a GPU.
static nvmlReturn_t profiles_readable(const struct nvmock_dev *d)
{
	// A board without MIG tables (gb200, gb300: not known) cannot enter
	// MIG mode, so it lists no profile at all.
	if (d->s->mig_current == NA32 || d->s->mig_gi_count == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	if (nvmock_driver_branch() >= 550)
		return NVML_SUCCESS;
	struct mig_state m;
	nvmock_mig_read(d, &m);
	return m.current == NVML_DEVICE_MIG_ENABLE ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

struct gi_info {
	unsigned id, slices, instances, sms, ce, dec, enc, jpeg, ofa;
	unsigned long long mib;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};

static void row_info(const struct snap_device *s, unsigned r, struct gi_info *o)
{
	*o = (struct gi_info){s->mig_gi_id[r], s->mig_gi_compute_slices[r], s->mig_gi_instances[r], s->mig_gi_sms[r],
			      s->mig_gi_copy_engines[r], s->mig_gi_decoders[r], s->mig_gi_encoders[r], s->mig_gi_jpegs[r],
			      s->mig_gi_ofas[r], s->mig_gi_memory_mib[r], ""};
	char n[32];
	nvmock_mig_name(s, r, n, sizeof n);
	snprintf(o->name, sizeof o->name, "MIG %s", n);
}

static nvmlReturn_t profile_row(nvmlDevice_t device, unsigned profile, const struct nvmock_dev **dp, int *row)
{
	DEV(device, d);
	*dp = d;
	nvmlReturn_t r = profiles_readable(d);
	if (r != NVML_SUCCESS)
		return r;
	if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	*row = nvmock_mig_row_by_enum(d->s, profile);
	return *row < 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
							  nvmlGpuInstanceProfileInfo_t *info)
{
	const struct nvmock_dev *d;
	int row;
	nvmlReturn_t r = profile_row(device, profile, &d, &row);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	struct gi_info o;
	row_info(d->s, (unsigned)row, &o);
	*info = (nvmlGpuInstanceProfileInfo_t){o.id, 0, o.slices, o.instances, o.sms, o.ce, o.dec, o.enc, o.jpeg, o.ofa, o.mib};
	return NVML_SUCCESS;
}

static nvmlReturn_t fill_v(const struct nvmock_dev *d, unsigned row, nvmlGpuInstanceProfileInfo_v2_t *info)
{
	struct gi_info o;
	row_info(d->s, row, &o);
	if (info->version == nvmlGpuInstanceProfileInfo_v2) {
		*info = (nvmlGpuInstanceProfileInfo_v2_t){nvmlGpuInstanceProfileInfo_v2, o.id, 0, o.slices, o.instances, o.sms,
							  o.ce, o.dec, o.enc, o.jpeg, o.ofa, o.mib, ""};
		memcpy(info->name, o.name, sizeof o.name);
		return NVML_SUCCESS;
	}
	if (info->version == nvmlGpuInstanceProfileInfo_v3) {
		nvmlGpuInstanceProfileInfo_v3_t *v3 = (nvmlGpuInstanceProfileInfo_v3_t *)info;
		*v3 = (nvmlGpuInstanceProfileInfo_v3_t){nvmlGpuInstanceProfileInfo_v3, o.id, o.slices, o.instances, o.sms,
							o.ce, o.dec, o.enc, o.jpeg, o.ofa, o.mib, "", 0};
		memcpy(v3->name, o.name, sizeof o.name);
		return NVML_SUCCESS;
	}
	return NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
							   nvmlGpuInstanceProfileInfo_v2_t *info)
{
	const struct nvmock_dev *d;
	int row;
	nvmlReturn_t r = profile_row(device, profile, &d, &row);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	return fill_v(d, (unsigned)row, info);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
							       nvmlGpuInstanceProfileInfo_v2_t *info)
{
	DEV(device, d);
	nvmlReturn_t r = profiles_readable(d);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	int row = nvmock_mig_row_by_id(d->s, profileId);
	if (row < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	return fill_v(d, (unsigned)row, info);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
								    nvmlGpuInstancePlacement_t *placements,
								    unsigned int *count)
{
	DEV(device, d);
	nvmlReturn_t r = profiles_readable(d);
	if (r != NVML_SUCCESS)
		return r;
	OUT(count);
	int row = nvmock_mig_row_by_id(d->s, profileId);
	if (row < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned n = 0, size = d->s->mig_gi_memory_slices[row];
	for (unsigned s = 0; s < 8; s++) {
		if (!(d->s->mig_gi_placements[row] >> s & 1))
			continue;
		if (placements != NULL)
			placements[n] = (nvmlGpuInstancePlacement_t){s, size};
		n++;
	}
	*count = n;
	return NVML_SUCCESS;
}

// The first version has no count query: its caller sizes placements by the
// profile's instance count (R450's nvml.h), which only a profile with fewer
// instances than places (1g.5gb+me, from R470) would overrun.
NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
								 nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
	DEV(device, d);
	if (placements == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlGpuInstancePlacement_t all[8];
	nvmlReturn_t r = nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, all, count);
	if (r != NVML_SUCCESS)
		return r;
	unsigned most = d->s->mig_gi_instances[nvmock_mig_row_by_id(d->s, profileId)];
	if (*count > most)
		*count = most;
	memcpy(placements, all, *count * sizeof all[0]);
	return NVML_SUCCESS;
}

// occupied is the memory slices the GPU's instances hold, a bit each.
static unsigned occupied(const struct snap_device *s, const uint32_t *profile, const uint32_t *start)
{
	unsigned mask = 0;
	for (unsigned i = 0; i < STATE_GIS; i++)
		if (profile[i] != 0 && profile[i] <= s->mig_gi_count)
			mask |= ((1u << s->mig_gi_memory_slices[profile[i] - 1]) - 1) << start[i];
	return mask;
}

static unsigned existing(const uint32_t *profile, unsigned row)
{
	unsigned n = 0;
	for (unsigned i = 0; i < STATE_GIS; i++)
		n += profile[i] == row + 1;
	return n;
}

// free_starts are the placements of row still free, a bit each.
static unsigned free_starts(const struct snap_device *s, unsigned row, const uint32_t *profile, const uint32_t *start)
{
	unsigned used = occupied(s, profile, start), size = s->mig_gi_memory_slices[row], out = 0;
	if (existing(profile, row) >= s->mig_gi_instances[row])
		return 0;
	for (unsigned p = 0; p < 8; p++)
		if ((s->mig_gi_placements[row] >> p & 1) && !(used & (((1u << size) - 1) << p)))
			out |= 1u << p;
	return out;
}

static nvmlReturn_t enabled(const struct nvmock_dev *d, struct mig_state *m)
{
	if (d->s->mig_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	nvmock_mig_read(d, m);
	return m->current == NVML_DEVICE_MIG_ENABLE ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
								unsigned int *count)
{
	DEV(device, d);
	OUT(count);
	nvmlReturn_t r = profiles_readable(d);
	if (r != NVML_SUCCESS)
		return r;
	int row = nvmock_mig_row_by_id(d->s, profileId);
	if (row < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	// As many as fit one after another, up to the profile's count; with
	// MIG off, in an empty GPU.
	struct mig_state m;
	nvmock_mig_read(d, &m);
	uint32_t prof[STATE_GIS] = {0}, start[STATE_GIS] = {0};
	if (m.current == NVML_DEVICE_MIG_ENABLE) {
		memcpy(prof, m.gi_profile, sizeof prof);
		memcpy(start, m.gi_start, sizeof start);
	}
	unsigned n = 0, f;
	while ((f = free_starts(d->s, (unsigned)row, prof, start)) != 0) {
		unsigned p = (unsigned)__builtin_ctz(f), id = nvmock_mig_gi_id(p, d->s->mig_gi_memory_slices[row]);
		prof[id] = (uint32_t)row + 1;
		start[id] = p;
		n++;
	}
	*count = n;
	return NVML_SUCCESS;
}

struct create_gi {
	int row;
	int start; // -1: the driver's choice
	unsigned id;
};

// pick_start is where the driver puts a GPU instance given no placement:
// the profile's last placement, else outward from it, the other half of
// each ever larger block of memory slices around it in turn, lowest
// first. Real drivers from R450 to R580 put seven 1g instances at 6, 4,
// 5, 0, 1, 2, 3, a 2g.10gb and then 1g ones at 4:2, 6, 0, 1, and after a
// 3g at 4:4 a 1g, a 2g and a 1g at 0, 2:2 and 1 (NVIDIA's MIG guide,
// docs/mig.md). live/mig.go picks the same.
static int pick_start(unsigned valid, unsigned free, unsigned size)
{
	if (valid == 0 || size == 0)
		return -1;
	unsigned top = 31u - (unsigned)__builtin_clz(valid);
	if (free >> top & 1)
		return (int)top;
	for (unsigned blk = size * 2; blk <= 8; blk *= 2) {
		unsigned base = top / blk * blk, half = blk / 2;
		unsigned other = top - base < half ? base + half : base;
		for (unsigned p = other; p < other + half; p++)
			if (free >> p & 1)
				return (int)p;
	}
	return -1;
}

static nvmlReturn_t create_gi(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)procs;
	struct create_gi *a = arg;
	if ((g->mig_set ? g->mig_current : d->s->mig_current) != NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned f = free_starts(d->s, (unsigned)a->row, g->gi_profile, g->gi_start);
	if (a->start >= 0)
		f &= 1u << a->start;
	if (f == 0)
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	unsigned size = d->s->mig_gi_memory_slices[a->row];
	int q = pick_start(d->s->mig_gi_placements[a->row], f, size);
	if (q < 0)
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	unsigned p = (unsigned)q;
	a->id = nvmock_mig_gi_id(p, size);
	g->gi_profile[a->id] = (uint32_t)a->row + 1;
	g->gi_start[a->id] = p;
	return NVML_SUCCESS;
}

static nvmlReturn_t create(nvmlDevice_t device, unsigned profileId, const nvmlGpuInstancePlacement_t *placement,
			   nvmlGpuInstance_t *gpuInstance)
{
	DEV(device, d);
	OUT(gpuInstance);
	if (d->s->mig_current == NA32 || d->s->mig_gi_count == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	struct create_gi a = {nvmock_mig_row_by_id(d->s, profileId), -1, 0};
	if (a.row < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (placement != NULL) {
		if (placement->start >= 8 || placement->size != d->s->mig_gi_memory_slices[a.row] ||
		    !(d->s->mig_gi_placements[a.row] >> placement->start & 1))
			return NVML_ERROR_INVALID_ARGUMENT;
		a.start = (int)placement->start;
	}
	nvmlReturn_t r = nvmock_mig_change(d, create_gi, &a);
	if (r == NVML_SUCCESS)
		*gpuInstance = gi_handle(d, a.id);
	return r;
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
						  nvmlGpuInstance_t *gpuInstance)
{
	return create(device, profileId, NULL, gpuInstance);
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
							       const nvmlGpuInstancePlacement_t *placement,
							       nvmlGpuInstance_t *gpuInstance)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (placement == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return create(device, profileId, placement, gpuInstance);
}

static nvmlReturn_t destroy_gi(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)d, (void)procs;
	unsigned id = *(unsigned *)arg;
	if (g->gi_profile[id] == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned c = 0; c < STATE_CIS; c++)
		if (g->ci_slices[id * STATE_CIS + c] != 0)
			return NVML_ERROR_IN_USE; // its compute instances go first
	g->gi_profile[id] = 0;
	g->gi_start[id] = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
	const struct nvmock_gi *gi;
	struct mig_state m;
	nvmlReturn_t r = nvmock_gi_of(gpuInstance, &gi, &m);
	if (r != NVML_SUCCESS)
		return r;
	unsigned id = gi->id;
	return nvmock_mig_change(gi->dev, destroy_gi, &id);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
						nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
	DEV(device, d);
	OUT(count);
	struct mig_state m;
	nvmlReturn_t r = enabled(d, &m);
	if (r != NVML_SUCCESS)
		return r;
	int row = nvmock_mig_row_by_id(d->s, profileId);
	if (row < 0 || gpuInstances == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	// The array holds the profile's instance count (nvml.h); *count is
	// only an output: nvidia-smi passes it unset.
	unsigned n = 0;
	for (unsigned i = 0; i < STATE_GIS; i++)
		if (m.gi_profile[i] == (uint32_t)row + 1)
			gpuInstances[n++] = gi_handle(d, i);
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
	DEV(device, d);
	OUT(gpuInstance);
	struct mig_state m;
	nvmlReturn_t r = enabled(d, &m);
	if (r != NVML_SUCCESS)
		return r;
	if (id >= STATE_GIS || m.gi_profile[id] == 0)
		return NVML_ERROR_NOT_FOUND;
	*gpuInstance = gi_handle(d, id);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
	const struct nvmock_gi *gi;
	struct mig_state m;
	nvmlReturn_t r = nvmock_gi_of(gpuInstance, &gi, &m);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	unsigned row = m.gi_profile[gi->id] - 1;
	info->device = nvmock_handle(gi->dev);
	info->id = gi->id;
	info->profileId = gi->dev->s->mig_gi_id[row];
	info->placement = (nvmlGpuInstancePlacement_t){m.gi_start[gi->id], gi->dev->s->mig_gi_memory_slices[row]};
	return NVML_SUCCESS;
}
