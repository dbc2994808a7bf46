// MIG internals shared by mig*.c.
#ifndef NVMOCK_MIG_H
#define NVMOCK_MIG_H

#include "nvmock.h"

// A GPU-instance handle, and a compute-instance handle, which is also the
// MIG device's nvmlDevice_t: fixed entries per visible GPU and id, so a
// handle stays the same for the life of the library.
struct nvmock_gi {
	const struct nvmock_dev *dev;
	unsigned id;
};
struct nvmock_ci {
	const struct nvmock_dev *dev;
	unsigned gi, id;
};
extern struct nvmock_gi nvmock_gis[STATE_GPUS][STATE_GIS];
extern struct nvmock_ci nvmock_cis[STATE_GPUS][STATE_GIS][STATE_CIS];

// A GPU's MIG state as one process read it.
struct mig_state {
	int live; // read from the node's state file
	unsigned current, pending;
	uint32_t gi_profile[STATE_GIS], gi_start[STATE_GIS];
	uint32_t ci_slices[STATE_GIS * STATE_CIS], ci_start[STATE_GIS * STATE_CIS];
};

void nvmock_mig_read(const struct nvmock_dev *d, struct mig_state *m);
void nvmock_mig_clean(const struct snap_device *s, struct live_gpu *g);
// A change of node state (MIG, settings): it edits g, a copy of the
// GPU's record, and may read the node's process table, procs, as the
// writers' lock holds it.
typedef nvmlReturn_t (*live_change)(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg);
nvmlReturn_t nvmock_live_update(const struct nvmock_dev *d, live_change fn, void *arg);
nvmlReturn_t nvmock_mig_change(const struct nvmock_dev *d, live_change fn, void *arg);
int nvmock_mig_row_by_enum(const struct snap_device *s, unsigned profile);
int nvmock_mig_row_by_id(const struct snap_device *s, unsigned id);
void nvmock_mig_name(const struct snap_device *s, unsigned row, char *out, size_t len);
void nvmock_mig_ci_name(const struct snap_device *s, unsigned row, unsigned slices, char *out, size_t len);
unsigned nvmock_mig_gi_id(unsigned start, unsigned size);
unsigned nvmock_mig_ci_sms(const struct snap_device *s, unsigned row, unsigned slices);

// nvmock_mig_ci_step is where compute instances of c slices may start: at
// multiples of the power of two that holds c, as GPU instances do. A 3c in
// a 7g then sits at 0 or 4, so a 4c and a 3c, or a 1c, 2c and 3c, fill
// it, as real configurations do (at multiples of 3 neither fits). The
// writer's rule is the same (live/mig.go ciStep).
static inline unsigned nvmock_mig_ci_step(unsigned c)
{
	unsigned p = 1;
	while (p < c)
		p <<= 1;
	return p;
}

// The compute-instance profile enum of a compute instance of c slices.
static inline unsigned nvmock_mig_ci_enum(unsigned c)
{
	return c == 7 ? NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE
	       : c == 8 ? NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE
	       : c == 6 ? NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE
			: c - 1;
}

static inline unsigned nvmock_mig_ci_slices_of(unsigned profile)
{
	return profile == NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE	  ? 7
	       : profile == NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE ? 8
	       : profile == NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE ? 6
	       : profile <= NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE ? profile + 1
								  : 0;
}

// GI and CI validators: an entry of the tables whose instance exists now.
nvmlReturn_t nvmock_gi_of(nvmlGpuInstance_t h, const struct nvmock_gi **out, struct mig_state *m);
nvmlReturn_t nvmock_ci_of(nvmlComputeInstance_t h, const struct nvmock_ci **out, struct mig_state *m);

// A MIG device as one call found it.
struct mig_dev {
	const struct nvmock_ci *ci;
	const struct snap_device *s;
	unsigned row, slices;
};
nvmlReturn_t nvmock_mig_of(nvmlDevice_t h, struct mig_dev *out);
void nvmock_mig_uuid(const struct nvmock_ci *ci, char out[96]);
nvmlReturn_t nvmock_mig_get_name(const struct mig_dev *md, char *name, unsigned int length);
nvmlReturn_t nvmock_mig_get_uuid(const struct mig_dev *md, char *uuid, unsigned int length);
void nvmock_mig_memory(const struct mig_dev *md, unsigned long long *total, unsigned long long *used);
unsigned long long nvmock_mig_gi_used(const struct snap_device *s, unsigned row, unsigned long long procs);
unsigned nvmock_mig_index(const struct mig_dev *md);
nvmlReturn_t nvmock_mig_by_uuid(const char *uuid, nvmlDevice_t *device);

// MIGDEV(h, md) answers for a MIG device handle h in a getter that takes
// both kinds: it returns the validator's error, or runs the block after
// it with md filled. For a GPU handle it does nothing.
#define MIGDEV(h, md)                                              \
	struct mig_dev md;                                         \
	int md##_is = nvmock_ready() && nvmock_is_mig_handle(h);   \
	if (md##_is) {                                             \
		nvmlReturn_t r_ = nvmock_mig_of((h), &md);         \
		if (r_ != NVML_SUCCESS)                            \
			return r_;                                 \
	}                                                          \
	if (md##_is)

#endif
