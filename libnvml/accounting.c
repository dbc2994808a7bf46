// Per-process accounting (nvidia-smi -am, --query-accounted-apps): the
// mode is node state, set as the driver keeps it; the processes accounted
// are those registered on the GPU since it was turned on that still run.
// A process that ended leaves no record here (the driver keeps one, with
// its run time, in a circular buffer): not modelled.
#include <stdlib.h>

#include "mig.h"

// accounting is the GPU's accounting mode, and since when it is on.
static uint32_t accounting(const struct nvmock_dev *d, uint64_t *since)
{
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	*since = 0;
	if (d->s->accounting_mode == NA32)
		return NA32;
	if (nvmock_mig_on(d)) // nvml.h: disabled on a GPU in MIG mode
		return 0;
	if (set != NULL && (set->cfg_set & LIVE_CFG_ACCOUNTING)) {
		*since = set->accounting_since_ns;
		return set->accounting;
	}
	return d->s->accounting_mode;
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
	DEV(device, d);
	OUT(mode);
	uint64_t since;
	uint32_t on = accounting(d, &since);
	if (on == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*mode = on ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceSetAccountingMode(nvmlDevice_t device, nvmlEnableState_t mode)
{
	DEV(device, d);
	if (d->s->accounting_mode == NA32 || nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	if (mode != NVML_FEATURE_DISABLED && mode != NVML_FEATURE_ENABLED)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_setting(d, LIVE_CFG_ACCOUNTING, mode);
}

static nvmlReturn_t nothing(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)d, (void)g, (void)procs, (void)arg;
	return NVML_SUCCESS;
}

// Clears the records of processes that ended: there are none here, but
// the caller still needs the right to change the node (root).
NVML_API nvmlReturn_t nvmlDeviceClearAccountingPids(nvmlDevice_t device)
{
	DEV(device, d);
	if (d->s->accounting_mode == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	return nvmock_live_update(d, nothing, NULL);
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
	DEV(device, d);
	return nvmock_u32(d->s->accounting_buffer, bufferSize);
}

// accounted lists the GPU's compute and graphics processes registered
// since accounting went on (malloc'd, *n of them; NULL for none).
static struct live_proc *accounted(const struct nvmock_dev *d, uint64_t since, unsigned *n)
{
	unsigned all;
	struct live_proc *p = nvmock_live_procs(d->node_index, 3, &all);
	*n = 0;
	for (unsigned i = 0; i < all; i++)
		if (p[i].start_ns >= since)
			p[(*n)++] = p[i];
	return p;
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids)
{
	DEV(device, d);
	OUT(count);
	uint64_t since;
	uint32_t on = accounting(d, &since);
	// Disabled accounting still answers (an empty list, as the captures'
	// drivers print); a board without accounting does not.
	if (on == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned n = 0;
	struct live_proc *p = on ? accounted(d, since, &n) : NULL;
	nvmlReturn_t r = NVML_SUCCESS;
	if (*count < n || (n > 0 && pids == NULL))
		r = NVML_ERROR_INSUFFICIENT_SIZE;
	else
		for (unsigned i = 0; i < n; i++)
			pids[i] = p[i].pid;
	*count = n;
	free(p);
	return r;
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingStats(nvmlDevice_t device, unsigned int pid, nvmlAccountingStats_t *stats)
{
	DEV(device, d);
	OUT(stats);
	uint64_t since;
	uint32_t on = accounting(d, &since);
	if (on == NA32 || !on)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned n;
	struct live_proc *p = accounted(d, since, &n);
	nvmlReturn_t r = NVML_ERROR_NOT_FOUND;
	for (unsigned i = 0; i < n && r != NVML_SUCCESS; i++) {
		if (p[i].pid != pid)
			continue;
		nvmlUtilization_t u;
		int util = nvmlDeviceGetUtilizationRates(device, &u) == NVML_SUCCESS;
		// The utilization so far is the load's now: the model keeps no
		// history per process. Running: no time yet (nvml.h).
		*stats = (nvmlAccountingStats_t){
			.gpuUtilization = util ? u.gpu : (unsigned)NVML_VALUE_NOT_AVAILABLE,
			.memoryUtilization = util ? u.memory : (unsigned)NVML_VALUE_NOT_AVAILABLE,
			.maxMemoryUsage = p[i].used_bytes,
			.startTime = p[i].start_ns / 1000,
			.isRunning = 1,
		};
		r = NVML_SUCCESS;
	}
	free(p);
	return r;
}
