// Settings and activity: persistence, compute, MIG, display and
// virtualization modes; utilization, encoder/FBC stats, processes, accounting.
#include <string.h>

#include "nvmock.h"

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

NVML_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
	DEV(device, d);
	return enable_state(d->s->persistence_mode, mode);
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

NVML_API nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
	DEV(device, d);
	return enable_state(d->s->accounting_mode, mode);
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
	DEV(device, d);
	return nvmock_u32(d->s->accounting_buffer, bufferSize);
}

NVML_API nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids)
{
	(void)pids;
	DEV(device, d);
	OUT(count);
	// Disabled accounting still answers (an empty list, as the captures'
	// drivers print); a board without accounting does not.
	if (d->s->accounting_mode == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*count = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
	DEV(device, d);
	OUT(mode);
	*mode = (nvmlComputeMode_t)d->s->compute_mode;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
	DEV(device, d);
	if (currentMode == NULL || pendingMode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->mig_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*currentMode = d->s->mig_current;
	*pendingMode = d->s->mig_pending;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	DEV(device, d);
	OUT(count);
	// nvidia-ctk treats an error here as fatal; boards without MIG say 0.
	*count = d->s->max_mig_devices;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
	DEV(device, d);
	OUT(migDevice);
	if (d->s->mig_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (index >= d->s->max_mig_devices)
		return NVML_ERROR_INVALID_ARGUMENT;
	// MIG is never enabled on the mock, so every slot is empty; go-nvlib
	// (nvidia-ctk, the device plugin) skips NOT_FOUND and fails on anything else.
	return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	DEV(device, d);
	(void)d;
	OUT(isMigDevice);
	*isMigDevice = 0;
	return NVML_SUCCESS;
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
	if (d->s->util_gpu == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	utilization->gpu = d->s->util_gpu;
	utilization->memory = d->s->util_memory == NA32 ? 0 : d->s->util_memory;
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

NVML_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
						      unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return engine_util(d->s->util_encoder, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
						      unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return engine_util(d->s->util_decoder, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
						  unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return engine_util(d->s->util_jpeg, utilization, samplingPeriodUs);
}

NVML_API nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
						  unsigned int *samplingPeriodUs)
{
	DEV(device, d);
	return engine_util(d->s->util_ofa, utilization, samplingPeriodUs);
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

// No process ever runs on a mock GPU: every process list is empty.
static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
	DEV(device, d);
	(void)d;
	OUT(infoCount);
	*infoCount = 0;
	return NVML_SUCCESS;
}

#define PROCESS_LIST(fn, type)                                                                  \
	NVML_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos)     \
	{                                                                                       \
		(void)infos;                                                                    \
		return no_processes(device, infoCount);                                         \
	}

PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)
