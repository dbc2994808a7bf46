// What the chip is and how it is doing: bus width, cores, bus type, power
// source, capabilities, margin temperature, dynamic P-state utilization and
// performance-policy violation time.
#include <string.h>

#include "nvmock.h"

NVML_API nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
	DEV(device, d);
	return nvmock_u32(d->s->memory_bus_width, busWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
	DEV(device, d);
	OUT(numCores);
	// nvml.h: "On MIG-enabled GPUs, querying the device's core count is
	// currently not supported" (review: it answered).
	if (nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	return nvmock_u32(d->s->gpu_cores, numCores);
}

NVML_API nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, nvmlBusType_t *type)
{
	DEV(device, d);
	return nvmock_u32(d->s->bus_type, type);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, nvmlPowerSource_t *powerSource)
{
	DEV(device, d);
	return nvmock_u32(d->s->power_source, powerSource);
}

NVML_API nvmlReturn_t nvmlDeviceGetCapabilities(nvmlDevice_t device, nvmlDeviceCapabilities_t *caps)
{
	DEV(device, d);
	OUT(caps);
	if (caps->version != nvmlDeviceCapabilities_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->s->egm == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	caps->capMask = d->s->egm == 1 ? NVML_DEV_CAP_EGM : 0;
	return NVML_SUCCESS;
}

// The margin is how far the GPU runs below its T.Limit, the same reading
// nvidia-smi prints as "GPU T.Limit Temp"; boards before Ada have no sensor.
// T.Limit stays where the capture puts it (its temperature plus its
// margin), so the margin falls as far as the GPU warms.
nvmlReturn_t nvmock_margin(const struct nvmock_dev *d, int *margin)
{
	const struct snap_device *s = d->s;
	if (s->temp_tlimit == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*margin = (int)s->temp_tlimit;
	LIVE(d);
	if (live_ && s->temp_gpu != NA32)
		*margin -= (int)nvmock_live_temp(d, &g_, &fx_, now_) - (int)s->temp_gpu;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *marginTempInfo)
{
	DEV(device, d);
	OUT(marginTempInfo);
	if (marginTempInfo->version != nvmlMarginTemperature_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	int m;
	nvmlReturn_t r = nvmock_margin(d, &m);
	if (r == NVML_SUCCESS)
		marginTempInfo->marginTemperature = m;
	return r;
}

// Dynamic P-state utilization by domain: the graphics engine's (GPU), the
// frame buffer's (memory), the video engines' (the busier of encoder and
// decoder) as the utilization getters read them, live under a load; the
// bus interface's is not modelled and reads 0, as do the switching
// thresholds.
NVML_API nvmlReturn_t nvmlDeviceGetDynamicPstatesInfo(nvmlDevice_t device, nvmlGpuDynamicPstatesInfo_t *info)
{
	DEV(device, d);
	OUT(info);
	const struct snap_device *s = d->s;
	if (s->util_gpu == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(info, 0, sizeof *info);
	unsigned enc = s->util_encoder == NA32 ? 0 : s->util_encoder;
	unsigned dec = s->util_decoder == NA32 ? 0 : s->util_decoder;
	unsigned pct[4] = {s->util_gpu, s->util_memory == NA32 ? 0 : s->util_memory, enc > dec ? enc : dec, 0};
	LIVE(d);
	if (live_) {
		for (unsigned e = 0; e < 2; e++)
			pct[e] = nvmock_live_util(d->node_index, &g_, e, now_);
		enc = nvmock_live_util(d->node_index, &g_, 2, now_);
		dec = nvmock_live_util(d->node_index, &g_, 3, now_);
		pct[2] = enc > dec ? enc : dec;
	}
	for (unsigned k = 0; k < 4; k++) {
		info->utilization[k].bIsPresent = 1;
		info->utilization[k].percentage = pct[k];
	}
	return NVML_SUCCESS;
}

// Violation times follow the live state (nvmock_live_violation); a GPU
// on its capture's readings has been held back by nothing. referenceTime
// is the node's clock in microseconds, violationTime nanoseconds (nvml.h).
NVML_API nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
						   nvmlViolationTime_t *violTime)
{
	return nvmock_violation(device, perfPolicyType, violTime);
}

// nvmock_violation is nvmlDeviceGetViolationStatus (deprecated in nvml.h)
// for the library's own callers.
nvmlReturn_t nvmock_violation(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType, nvmlViolationTime_t *violTime)
{
	DEV(device, d);
	OUT(violTime);
	// The enum skips 6 to 9 (review: they answered).
	if ((unsigned)perfPolicyType >= NVML_PERF_POLICY_COUNT ||
	    (perfPolicyType > NVML_PERF_POLICY_RELIABILITY && perfPolicyType < NVML_PERF_POLICY_TOTAL_APP_CLOCKS))
		return NVML_ERROR_INVALID_ARGUMENT;
	LIVE(d);
	// The clock itself: a time late enough to decide the faults (now_) may
	// be a call's earlier time, and the counts run on.
	uint64_t now = nvmock_live_now();
	violTime->referenceTime = now / 1000;
	violTime->violationTime = live_ ? nvmock_live_violation(d, &g_, perfPolicyType, now) : 0;
	return NVML_SUCCESS;
}
