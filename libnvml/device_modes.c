// Settings and activity: persistence, compute, display and
// virtualization modes; utilization, encoder/FBC stats, processes.
#include <stdlib.h>
#include <string.h>

#include "mig.h"

static nvmlReturn_t enable_state(uint32_t v, nvmlEnableState_t *out)
{
	OUT(out);
	if (v == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (v == DEP32)
		return NVML_ERROR_DEPRECATED;
	*out = v ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

// nvmock_settings is the GPU's live record when a setter changed something there
// (cfg_set), else NULL: the snapshot's values hold.
const struct live_gpu *nvmock_settings(const struct nvmock_dev *d, struct live_gpu *g)
{
	if (nvmock.live == NULL || d->node_index >= STATE_GPUS ||
	    !nvmock_live_copy(g, &nvmock.live_gpus[d->node_index], sizeof *g) || g->cfg_set == 0)
		return NULL;
	return g;
}

// nvmock_persistence is the persistence mode in force: the one a setter
// left in the GPU's live record g (NULL: none), else the snapshot's.
uint32_t nvmock_persistence(const struct nvmock_dev *d, const struct live_gpu *g)
{
	if (g != NULL && (g->cfg_set & LIVE_CFG_PERSISTENCE) && d->s->persistence_mode != NA32)
		return g->persistence;
	return d->s->persistence_mode;
}

NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
	DEV(device, d);
	struct live_gpu g;
	return enable_state(nvmock_persistence(d, nvmock_settings(d, &g)), mode);
}

struct setting {
	uint32_t bit, value, value2;
	int clear; // back to the board's own
};

static nvmlReturn_t set_setting(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)procs;
	const struct setting *s = arg;
	if (s->clear) {
		g->cfg_set &= ~s->bit;
		return NVML_SUCCESS;
	}
	if (s->bit == LIVE_CFG_POWER_LIMIT)
		nvmock_live_cut(d, g, nvmock_live_now()); // the readings so far keep the old limit
	if (s->bit == LIVE_CFG_ECC_PENDING && s->value == d->s->ecc_pending) {
		g->cfg_set &= ~s->bit; // back to the profile's: nothing left to show
		return NVML_SUCCESS;
	}
	if (s->bit == LIVE_CFG_ACCOUNTING) {
		// Turning it on starts the record; off clears it (nvml.h).
		uint32_t was = g->cfg_set & s->bit ? g->accounting : d->s->accounting_mode == 1;
		if (s->value != was)
			g->accounting_since_ns = s->value ? nvmock_live_now() : 0;
		g->cfg_set |= s->bit;
		g->accounting = s->value;
		return NVML_SUCCESS;
	}
	g->cfg_set |= s->bit;
	if (s->bit == LIVE_CFG_PERSISTENCE)
		g->persistence = s->value;
	else if (s->bit == LIVE_CFG_COMPUTE_MODE)
		g->compute_mode = s->value;
	else if (s->bit == LIVE_CFG_GPM_STREAM)
		g->gpm_stream = s->value;
	else if (s->bit == LIVE_CFG_ECC_PENDING)
		g->ecc_pending = s->value;
	else if (s->bit == LIVE_CFG_TIMESLICE)
		g->timeslice = s->value;
	else if (s->bit == LIVE_CFG_GPU_LOCKED)
		g->gpu_locked_min = s->value, g->gpu_locked_max = s->value2;
	else if (s->bit == LIVE_CFG_MEM_LOCKED)
		g->mem_locked_min = s->value, g->mem_locked_max = s->value2;
	else if (s->bit == LIVE_CFG_APP_CLOCKS)
		g->app_clock_mem = s->value, g->app_clock_gfx = s->value2;
	else
		g->power_limit_mw = s->value;
	return NVML_SUCCESS;
}

// nvmock_change_setting stores a setting as node state, as the driver keeps it
// until it unloads: every process sees it, and a reinstall that resets the
// node, like a reboot, ends it. Root changes it, and so does a privileged
// container, which nvmock's plugin gives the state writable; a user, or a
// container with the state read-only, gets NO_PERMISSION, as a real one
// without CAP_SYS_ADMIN does ("Insufficient Permissions").
nvmlReturn_t nvmock_change_setting(const struct nvmock_dev *d, uint32_t bit, uint32_t value)
{
	struct setting s = {bit, value, 0, 0};
	return nvmock_live_update(d, set_setting, &s);
}

// nvmock_change_pair stores a setting of two values (a clock range or pair).
nvmlReturn_t nvmock_change_pair(const struct nvmock_dev *d, uint32_t bit, uint32_t a, uint32_t b)
{
	struct setting s = {bit, a, b, 0};
	return nvmock_live_update(d, set_setting, &s);
}

// nvmock_reset_setting gives a setting back to the board, as nvidia-smi's
// resets do.
nvmlReturn_t nvmock_reset_setting(const struct nvmock_dev *d, uint32_t bit)
{
	struct setting s = {bit, 0, 0, 1};
	return nvmock_live_update(d, set_setting, &s);
}

NVML_API nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
	DEV(device, d);
	if (d->s->persistence_mode == NA32 || d->s->persistence_mode == DEP32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (mode != NVML_FEATURE_DISABLED && mode != NVML_FEATURE_ENABLED)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_setting(d, LIVE_CFG_PERSISTENCE, mode);
}

NVML_API nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
	DEV(device, d);
	return enable_state(d->s->display_mode, display);
}

NVML_API nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
	DEV(device, d);
	return enable_state(d->s->display_active, isActive);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
	// A MIG device has a mode of its own (nvml.h), which the library does
	// not let anything set: the default.
	MIGDEV(device, md) {
		OUT(mode);
		*mode = NVML_COMPUTEMODE_DEFAULT;
		return NVML_SUCCESS;
	}
	DEV(device, d);
	OUT(mode);
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	*mode = (nvmlComputeMode_t)(set != NULL && (set->cfg_set & LIVE_CFG_COMPUTE_MODE) ? set->compute_mode : d->s->compute_mode);
	return NVML_SUCCESS;
}

// nvidia-smi -c EXCLUSIVE_PROCESS, as NVIDIA's device plugin runs it for
// MPS. EXCLUSIVE_THREAD has been gone since CUDA 8 (nvml.h: "Support
// Removed").
NVML_API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode)
{
	MIGDEV(device, md) {
		return nvmock_not_supported(__func__); // a MIG device's own mode: not modelled
	}
	DEV(device, d);
	if ((unsigned)mode >= NVML_COMPUTEMODE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
		return NVML_ERROR_NOT_SUPPORTED;
	// A GPU in MIG mode takes a mode only through its MIG devices' handles
	// (nvml.h), which the library does not model; real nvidia-smi then says
	// "not supported on a MIG-enabled device", as it does here.
	if (mode != NVML_COMPUTEMODE_DEFAULT && nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	return nvmock_change_setting(d, LIVE_CFG_COMPUTE_MODE, mode);
}

NVML_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *pVirtualMode)
{
	DEV(device, d);
	return nvmock_u32(d->s->virtualization_mode, pVirtualMode);
}

NVML_API nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode)
{
	DEV(device, d);
	OUT(mode);
	if (mode->version != nvmlDeviceAddressingMode_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	return nvmock_u32(d->s->addressing_mode, &mode->value);
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	DEV(device, d);
	OUT(utilization);
	// A GPU in MIG mode has no utilization of its own (nvidia-smi: N/A).
	if (d->s->util_gpu == NA32 || nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	utilization->gpu = d->s->util_gpu;
	utilization->memory = d->s->util_memory == NA32 ? 0 : d->s->util_memory;
	LIVE(d);
	if (live_) {
		utilization->gpu = nvmock_live_util(d->node_index, &g_, 0, now_);
		utilization->memory = nvmock_live_util(d->node_index, &g_, 1, now_);
	}
	return NVML_SUCCESS;
}

static nvmlReturn_t engine_util(uint32_t v, unsigned int *utilization, unsigned int *period)
{
	if (utilization == NULL || period == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (v == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*utilization = v;
	*period = 1000000; // 1 s, a typical sampling period in microseconds
	return NVML_SUCCESS;
}

// A GPU in MIG mode has no encoder, decoder, JPEG or OFA utilization
// either (nvidia-smi dmon -h: "not currently supported" there).
static uint32_t media_v(const struct nvmock_dev *d, uint32_t v)
{
	return nvmock_mig_on(d) ? NA32 : v;
}

// media_util is the encoder (2) or decoder (3) utilization, live or not.
static nvmlReturn_t media_util(const struct nvmock_dev *d, unsigned engine, uint32_t v, unsigned int *utilization,
			       unsigned int *period)
{
	nvmlReturn_t r = engine_util(media_v(d, v), utilization, period);
	if (r != NVML_SUCCESS)
		return r;
	LIVE(d);
	if (live_)
		*utilization = nvmock_live_util(d->node_index, &g_, engine, now_);
	*period = 1000000; // 1 s, a typical sampling period in microseconds
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
						      unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return media_util(d, 2, d->s->util_encoder, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
						      unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return media_util(d, 3, d->s->util_decoder, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
						  unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return engine_util(media_v(d, d->s->util_jpeg), utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
						  unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return engine_util(media_v(d, d->s->util_ofa), utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount,
						unsigned int *averageFps, unsigned int *averageLatency)
{
	DEV(device, d);
	if (sessionCount == NULL || averageFps == NULL || averageLatency == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->util_encoder == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*sessionCount = *averageFps = *averageLatency = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEncoderSessions(nvmlDevice_t device, unsigned int *sessionCount,
						   nvmlEncoderSessionInfo_t *sessionInfos)
{
	(void)sessionInfos;
	DEV(device, d);
	(void)d;
	OUT(sessionCount);
	*sessionCount = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, nvmlFBCStats_t *fbcStats)
{
	DEV(device, d);
	(void)d;
	OUT(fbcStats);
	memset(fbcStats, 0, sizeof *fbcStats);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetFBCSessions(nvmlDevice_t device, unsigned int *sessionCount,
					       nvmlFBCSessionInfo_t *sessionInfo)
{
	(void)sessionInfo;
	DEV(device, d);
	(void)d;
	OUT(sessionCount);
	*sessionCount = 0;
	return NVML_SUCCESS;
}

// nvmock_procs_of reads the registered processes (nvmock ctl proc, the
// NRI plugin) a list call asks of device, of a type in mask (compute 1,
// graphics 2; MPS clients are never registered), into *p, *count of them
// (malloc'd; the caller frees). A GPU in MIG mode lists those of all its
// MIG devices, as the driver gives a privileged caller, a MIG device its
// own. A buffer too short for them (in *count, or none) is
// INSUFFICIENT_SIZE with the count, as from the driver.
nvmlReturn_t nvmock_procs_of(nvmlDevice_t device, unsigned mask, unsigned *count, int has_buffer, struct live_proc **p)
{
	unsigned node, gi = LIVE_ANY, ci = LIVE_ANY;
	MIGDEV(device, md) {
		node = md.ci->dev->node_index, gi = md.ci->gi, ci = md.ci->id;
	} else {
		DEV(device, d);
		node = d->node_index;
		if (nvmock_mig_aggregate_denied(d))
			return NVML_ERROR_NO_PERMISSION;
	}
	OUT(count);
	if (!has_buffer && *count != 0) // nvml.h: only the size query may pass no array (review)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned n;
	*p = nvmock_live_procs_on(node, gi, ci, mask, &n);
	if (n > *count || (n > 0 && !has_buffer)) {
		*count = n;
		free(*p);
		*p = NULL;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	return NVML_SUCCESS;
}

#define PROCESS_LIST(fn, type, mask, v1)                                                        \
	NVML_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos)     \
	{                                                                                       \
		struct live_proc *p;                                                            \
		nvmlReturn_t r = nvmock_procs_of(device, mask, infoCount, infos != NULL, &p);   \
		if (r != NVML_SUCCESS)                                                          \
			return r;                                                               \
		for (unsigned i = 0; i < *infoCount; i++) {                                     \
			memset(&infos[i], 0, sizeof infos[i]);                                  \
			infos[i].pid = p[i].pid;                                                \
			infos[i].usedGpuMemory = p[i].used_bytes;                               \
			PROCESS_IDS_##v1(infos[i], p[i]);                                       \
		}                                                                               \
		free(p);                                                                        \
		return NVML_SUCCESS;                                                            \
	}
#define PROCESS_IDS_1(x, q)
#define PROCESS_IDS_2(x, q) ((x).gpuInstanceId = nvmock_proc_gi(&(q)), (x).computeInstanceId = nvmock_proc_ci(&(q)))

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, 1, 1)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 1, 2)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, 1, 2)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, 2, 1)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, 2, 2)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t, 2, 2)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, 0, 1)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 0, 2)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t, 0, 2)

// nvmlDeviceGetRunningProcessDetailList is the lists above in one call, by
// mode; all is compute and graphics (MPS clients are never registered).
NVML_API nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t *plist)
{
	static const unsigned masks[NVML_PROCESS_MODE_MAX] = {1, 2, 0, 3};
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (plist == NULL || plist->version != nvmlProcessDetailList_v1 || plist->mode >= NVML_PROCESS_MODE_MAX)
		return NVML_ERROR_INVALID_ARGUMENT; // nvml.h: so for a bad version too
	struct live_proc *p;
	nvmlReturn_t r = nvmock_procs_of(device, masks[plist->mode], &plist->numProcArrayEntries, plist->procArray != NULL, &p);
	if (r != NVML_SUCCESS)
		return r;
	for (unsigned i = 0; i < plist->numProcArrayEntries; i++)
		plist->procArray[i] = (nvmlProcessDetail_v1_t){.pid = p[i].pid, .usedGpuMemory = p[i].used_bytes,
			.gpuInstanceId = nvmock_proc_gi(&p[i]), .computeInstanceId = nvmock_proc_ci(&p[i])};
	free(p);
	return NVML_SUCCESS;
}
