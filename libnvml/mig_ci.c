// MIG compute instances: the compute slices of a GPU instance, divided
// among compute instances that share its copy and media engines.
#include <stdio.h>
#include <string.h>

#include "mig.h"

nvmlReturn_t nvmock_ci_of(nvmlComputeInstance_t h, const struct nvmock_ci **out, struct mig_state *m)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	uintptr_t off = (uintptr_t)h.handle - (uintptr_t)&nvmock_cis[0][0][0];
	unsigned n = nvmock.ndevs < STATE_GPUS ? nvmock.ndevs : STATE_GPUS;
	if (off >= (uintptr_t)n * STATE_GIS * STATE_CIS * sizeof(struct nvmock_ci) || off % sizeof(struct nvmock_ci))
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct nvmock_ci *ci = (const struct nvmock_ci *)h.handle;
	nvmlReturn_t r = nvmock_dev_faults(ci->dev);
	if (r != NVML_SUCCESS)
		return r;
	nvmock_mig_read(ci->dev, m);
	if (m->current != NVML_DEVICE_MIG_ENABLE || m->gi_profile[ci->gi] == 0 ||
	    m->ci_slices[ci->gi * STATE_CIS + ci->id] == 0)
		return NVML_ERROR_INVALID_ARGUMENT; // destroyed since
	*out = ci;
	return NVML_SUCCESS;
}

static nvmlComputeInstance_t ci_handle(const struct nvmock_dev *d, unsigned gi, unsigned id)
{
	nvmlComputeInstance_t h = {(struct nvmlComputeInstance_st *)&nvmock_cis[d->index][gi][id]};
	return h;
}

unsigned nvmock_mig_ci_sms(const struct snap_device *s, unsigned row, unsigned slices)
{
	return slices == s->mig_gi_compute_slices[row] ? s->mig_gi_sms[row] : s->mig_ci_sms[slices & 7];
}

// nvmock_mig_ci_name is the profile name of a compute instance of c
// slices: the GPU instance's when it takes all of them, else "1c.3g.20gb";
// without "+me", as a real R580 H100's -lci and -L name those of its
// 1g.10gb+me ("MIG 1g.10gb"), while -lgi keeps it.
void nvmock_mig_ci_name(const struct snap_device *s, unsigned row, unsigned c, char *out, size_t len)
{
	char n[32];
	nvmock_mig_name(s, row, n, sizeof n);
	size_t l = strlen(n);
	if (l > 3 && strcmp(n + l - 3, "+me") == 0)
		n[l - 3] = '\0';
	if (c == s->mig_gi_compute_slices[row])
		snprintf(out, len, "%s", n);
	else
		snprintf(out, len, "%uc.%s", c, n);
}

// ci_profile checks a compute-instance profile enum against GPU instance
// gi's profile row, giving its slice count.
static nvmlReturn_t ci_profile(const struct nvmock_dev *d, unsigned row, unsigned profile, unsigned *c)
{
	if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	*c = nvmock_mig_ci_slices_of(profile);
	if (*c == 0 || !(d->s->mig_gi_ci_sizes[row] >> *c & 1))
		return NVML_ERROR_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

struct ci_info {
	unsigned id, slices, instances, sms, ce, dec, enc, jpeg, ofa;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};

static nvmlReturn_t info_of(nvmlGpuInstance_t gpuInstance, unsigned profile, unsigned eng, struct ci_info *o)
{
	const struct nvmock_gi *gi;
	struct mig_state m;
	nvmlReturn_t r = nvmock_gi_of(gpuInstance, &gi, &m);
	if (r != NVML_SUCCESS)
		return r;
	if (eng != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct snap_device *s = gi->dev->s;
	unsigned row = m.gi_profile[gi->id] - 1, c;
	r = ci_profile(gi->dev, row, profile, &c);
	if (r != NVML_SUCCESS)
		return r;
	*o = (struct ci_info){profile, c, s->mig_gi_compute_slices[row] / c, nvmock_mig_ci_sms(s, row, c),
			      s->mig_gi_copy_engines[row], s->mig_gi_decoders[row], s->mig_gi_encoders[row],
			      s->mig_gi_jpegs[row], s->mig_gi_ofas[row], ""};
	char n[48];
	nvmock_mig_ci_name(s, row, c, n, sizeof n);
	snprintf(o->name, sizeof o->name, "MIG %s", n);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
								   unsigned int engProfile,
								   nvmlComputeInstanceProfileInfo_t *info)
{
	struct ci_info o;
	nvmlReturn_t r = info_of(gpuInstance, profile, engProfile, &o);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	*info = (nvmlComputeInstanceProfileInfo_t){o.id, o.slices, o.instances, o.sms, o.ce, o.dec, o.enc, o.jpeg, o.ofa};
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
								    unsigned int engProfile,
								    nvmlComputeInstanceProfileInfo_v2_t *info)
{
	struct ci_info o;
	nvmlReturn_t r = info_of(gpuInstance, profile, engProfile, &o);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	if (info->version == nvmlComputeInstanceProfileInfo_v2) {
		*info = (nvmlComputeInstanceProfileInfo_v2_t){nvmlComputeInstanceProfileInfo_v2, o.id, o.slices, o.instances,
							      o.sms, o.ce, o.dec, o.enc, o.jpeg, o.ofa, ""};
		memcpy(info->name, o.name, sizeof o.name);
		return NVML_SUCCESS;
	}
	if (info->version == nvmlComputeInstanceProfileInfo_v3) {
		nvmlComputeInstanceProfileInfo_v3_t *v3 = (nvmlComputeInstanceProfileInfo_v3_t *)info;
		*v3 = (nvmlComputeInstanceProfileInfo_v3_t){nvmlComputeInstanceProfileInfo_v3, o.id, o.slices, o.instances,
							    o.sms, o.ce, o.dec, o.enc, o.jpeg, o.ofa, "", 0};
		memcpy(v3->name, o.name, sizeof o.name);
		return NVML_SUCCESS;
	}
	return NVML_ERROR_INVALID_ARGUMENT;
}

// used_slices is the compute slices of GPU instance gi its compute
// instances hold, a bit each.
static unsigned used_slices(const uint32_t *slices, const uint32_t *start, unsigned gi)
{
	unsigned mask = 0;
	for (unsigned c = 0; c < STATE_CIS; c++) {
		unsigned k = gi * STATE_CIS + c;
		if (slices[k] != 0)
			mask |= ((1u << slices[k]) - 1) << start[k];
	}
	return mask;
}

// free_starts are the free placements of a c-slice compute instance in a
// GPU instance of g slices.
static unsigned free_starts(unsigned g, unsigned c, unsigned used)
{
	unsigned out = 0;
	for (unsigned p = 0; p + c <= g; p += nvmock_mig_ci_step(c))
		if (!(used & (((1u << c) - 1) << p)))
			out |= 1u << p;
	return out;
}

// The GPU instance, its profile row and c for a compute-instance profile.
struct ci_ctx {
	const struct nvmock_gi *gi;
	struct mig_state m;
	unsigned row, c, g;
};

static nvmlReturn_t ctx_of(nvmlGpuInstance_t gpuInstance, unsigned profileId, struct ci_ctx *x)
{
	nvmlReturn_t r = nvmock_gi_of(gpuInstance, &x->gi, &x->m);
	if (r != NVML_SUCCESS)
		return r;
	x->row = x->m.gi_profile[x->gi->id] - 1;
	x->g = x->gi->dev->s->mig_gi_compute_slices[x->row];
	return ci_profile(x->gi->dev, x->row, profileId, &x->c);
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
									 unsigned int profileId, unsigned int *count)
{
	struct ci_ctx x;
	nvmlReturn_t r = ctx_of(gpuInstance, profileId, &x);
	if (r != NVML_SUCCESS)
		return r;
	OUT(count);
	unsigned used = used_slices(x.m.ci_slices, x.m.ci_start, x.gi->id), ids = 0, n = 0;
	for (unsigned c = 0; c < STATE_CIS; c++)
		ids += x.m.ci_slices[x.gi->id * STATE_CIS + c] != 0;
	unsigned f = free_starts(x.g, x.c, used);
	while (f != 0 && ids + n < STATE_CIS) {
		f &= f - 1;
		n++;
	}
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
									  unsigned int profileId,
									  nvmlComputeInstancePlacement_t *placements,
									  unsigned int *count)
{
	struct ci_ctx x;
	nvmlReturn_t r = ctx_of(gpuInstance, profileId, &x);
	if (r != NVML_SUCCESS)
		return r;
	OUT(count);
	unsigned n = 0;
	for (unsigned p = 0; p + x.c <= x.g; p += nvmock_mig_ci_step(x.c)) {
		if (placements != NULL)
			placements[n] = (nvmlComputeInstancePlacement_t){p, x.c};
		n++;
	}
	*count = n;
	return NVML_SUCCESS;
}

struct create_ci {
	unsigned gi, row, c, g;
	int start; // -1: the first free
	unsigned id;
};

static nvmlReturn_t create_ci(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)d, (void)procs;
	struct create_ci *a = arg;
	// Checked again under the lock: the GPU instance may have gone, and
	// another of another profile taken its id, since ctx_of read it
	// (review: a 4-slice CI was made in a 3-slice GI).
	if (g->gi_profile[a->gi] != a->row + 1)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned f = free_starts(a->g, a->c, used_slices(g->ci_slices, g->ci_start, a->gi));
	if (a->start >= 0)
		f &= 1u << a->start;
	unsigned id = 0;
	while (id < STATE_CIS && g->ci_slices[a->gi * STATE_CIS + id] != 0)
		id++;
	if (f == 0 || id == STATE_CIS)
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	a->id = id;
	g->ci_slices[a->gi * STATE_CIS + id] = a->c;
	g->ci_start[a->gi * STATE_CIS + id] = (uint32_t)__builtin_ctz(f);
	return NVML_SUCCESS;
}

static nvmlReturn_t create(nvmlGpuInstance_t gpuInstance, unsigned profileId, const nvmlComputeInstancePlacement_t *pl,
			   nvmlComputeInstance_t *out)
{
	struct ci_ctx x;
	nvmlReturn_t r = ctx_of(gpuInstance, profileId, &x);
	if (r != NVML_SUCCESS)
		return r;
	OUT(out);
	struct create_ci a = {x.gi->id, x.row, x.c, x.g, -1, 0};
	if (pl != NULL) {
		if (pl->size != x.c || pl->start % nvmock_mig_ci_step(x.c) != 0 || pl->start + x.c > x.g)
			return NVML_ERROR_INVALID_ARGUMENT;
		a.start = (int)pl->start;
	}
	r = nvmock_mig_change(x.gi->dev, create_ci, &a);
	if (r == NVML_SUCCESS)
		*out = ci_handle(x.gi->dev, x.gi->id, a.id);
	return r;
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
							   nvmlComputeInstance_t *computeInstance)
{
	return create(gpuInstance, profileId, NULL, computeInstance);
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(nvmlGpuInstance_t gpuInstance,
									unsigned int profileId,
									const nvmlComputeInstancePlacement_t *placement,
									nvmlComputeInstance_t *computeInstance)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (placement == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return create(gpuInstance, profileId, placement, computeInstance);
}

static nvmlReturn_t destroy_ci(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	const struct nvmock_ci *ci = arg;
	unsigned k = ci->gi * STATE_CIS + ci->id;
	if (g->ci_slices[k] == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (nvmock_live_procs_in(procs, d->node_index, ci->gi, ci->id) > 0)
		return NVML_ERROR_IN_USE; // a process runs on it
	g->ci_slices[k] = 0;
	g->ci_start[k] = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
	const struct nvmock_ci *ci;
	struct mig_state m;
	nvmlReturn_t r = nvmock_ci_of(computeInstance, &ci, &m);
	if (r != NVML_SUCCESS)
		return r;
	return nvmock_mig_change(ci->dev, destroy_ci, (void *)ci);
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
							 nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
	struct ci_ctx x;
	nvmlReturn_t r = ctx_of(gpuInstance, profileId, &x);
	if (r != NVML_SUCCESS)
		return r;
	if (computeInstances == NULL || count == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	// As for GPU instances, the array holds the profile's instance count.
	unsigned n = 0;
	for (unsigned c = 0; c < STATE_CIS; c++)
		if (x.m.ci_slices[x.gi->id * STATE_CIS + c] == x.c)
			computeInstances[n++] = ci_handle(x.gi->dev, x.gi->id, c);
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
							    nvmlComputeInstance_t *computeInstance)
{
	const struct nvmock_gi *gi;
	struct mig_state m;
	nvmlReturn_t r = nvmock_gi_of(gpuInstance, &gi, &m);
	if (r != NVML_SUCCESS)
		return r;
	OUT(computeInstance);
	if (id >= STATE_CIS || m.ci_slices[gi->id * STATE_CIS + id] == 0)
		return NVML_ERROR_NOT_FOUND;
	*computeInstance = ci_handle(gi->dev, gi->id, id);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
						    nvmlComputeInstanceInfo_t *info)
{
	const struct nvmock_ci *ci;
	struct mig_state m;
	nvmlReturn_t r = nvmock_ci_of(computeInstance, &ci, &m);
	if (r != NVML_SUCCESS)
		return r;
	OUT(info);
	unsigned k = ci->gi * STATE_CIS + ci->id;
	info->device = nvmock_handle(ci->dev);
	info->gpuInstance = (nvmlGpuInstance_t){(struct nvmlGpuInstance_st *)&nvmock_gis[ci->dev->index][ci->gi]};
	info->id = ci->id;
	info->profileId = nvmock_mig_ci_enum(m.ci_slices[k]);
	info->placement = (nvmlComputeInstancePlacement_t){m.ci_start[k], m.ci_slices[k]};
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
	return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}
