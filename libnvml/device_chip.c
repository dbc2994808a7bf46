// What the chip is and how it is doing: bus width, cores, bus type, power
// source, capabilities, margin temperature, dynamic P-state utilization and
// performance-policy violation time.
#include <string.h>
#include <time.h>

#include "nvmock.h"

NVML_API nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
	DEV(device, d);
	return nvmock_u32(d->s->memory_bus_width, busWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
	DEV(device, d);
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
NVML_API nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *marginTempInfo)
{
	DEV(device, d);
	OUT(marginTempInfo);
	if (marginTempInfo->version != nvmlMarginTemperature_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->s->temp_tlimit == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	marginTempInfo->marginTemperature = (int)d->s->temp_tlimit;
	return NVML_SUCCESS;
}

// Dynamic P-state utilization by domain (GPU, frame buffer, video, bus):
// the board's utilization readings; the switching thresholds are not
// modelled and read 0.
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
	for (unsigned k = 0; k < 4; k++) {
		info->utilization[k].bIsPresent = 1;
		info->utilization[k].percentage = pct[k];
	}
	return NVML_SUCCESS;
}

// No modelled board has been held back by any policy: every violation time
// is zero, measured up to now.
NVML_API nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
						   nvmlViolationTime_t *violTime)
{
	DEV(device, d);
	(void)d;
	OUT(violTime);
	if ((unsigned)perfPolicyType >= NVML_PERF_POLICY_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	violTime->referenceTime = (unsigned long long)ts.tv_sec * 1000000 + (unsigned long long)ts.tv_nsec / 1000;
	violTime->violationTime = 0;
	return NVML_SUCCESS;
}
