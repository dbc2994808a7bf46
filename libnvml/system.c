// System queries, error strings and the private export table.
#include <stdio.h>
#include <string.h>

#include "nvmock.h"

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	return nvmock_str(version, length, nvmock.hdr->driver_version);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	return nvmock_str(version, length, nvmock.hdr->nvml_version);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(cudaDriverVersion);
	*cudaDriverVersion = (int)nvmock.hdr->cuda_version;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

NVML_API nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (name == NULL || length == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	char path[64], buf[256];
	// nvml.h: "Returned process name is cropped to provided length."
	if (nvmock_live_proc_name(pid, buf, sizeof buf)) {
		snprintf(name, length, "%s", buf);
		return NVML_SUCCESS;
	}
	snprintf(path, sizeof path, "/proc/%u/comm", pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return NVML_ERROR_NOT_FOUND;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(name, length, "%s", buf);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetHicVersion(unsigned int *hwbcCount, nvmlHwbcEntry_t *hwbcEntries)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(hwbcCount);
	OUT(hwbcEntries); // nvml.h: either NULL is INVALID_ARGUMENT (review)
	*hwbcCount = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(deviceCount);
	*deviceCount = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info)
{
	(void)index;
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(info);
	return NVML_ERROR_INVALID_ARGUMENT; // there are none
}

// The old names of the two calls above, still exported by the real library.
NVML_API nvmlReturn_t nvmlGetBlacklistDeviceCount(unsigned int *deviceCount)
{
	return nvmlGetExcludedDeviceCount(deviceCount);
}

NVML_API nvmlReturn_t nvmlGetBlacklistDeviceInfoByIndex(unsigned int index, nvmlExcludedDeviceInfo_t *info)
{
	return nvmlGetExcludedDeviceInfoByIndex(index, info);
}

NVML_API nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(unitCount);
	*unitCount = 0;
	return NVML_SUCCESS;
}

// No node has an S-class unit: every index and every unit handle is
// invalid, as nvml.h answers for those (review: they said NOT_SUPPORTED).
static nvmlReturn_t no_unit(void)
{
	return nvmock_ready() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
}

NVML_API nvmlReturn_t nvmlUnitGetHandleByIndex(unsigned int index, nvmlUnit_t *unit)
{
	(void)index, (void)unit;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitGetUnitInfo(nvmlUnit_t unit, nvmlUnitInfo_t *info)
{
	(void)unit, (void)info;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitGetLedState(nvmlUnit_t unit, nvmlLedState_t *state)
{
	(void)unit, (void)state;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitGetPsuInfo(nvmlUnit_t unit, nvmlPSUInfo_t *psu)
{
	(void)unit, (void)psu;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitGetTemperature(nvmlUnit_t unit, unsigned int type, unsigned int *temp)
{
	(void)unit, (void)type, (void)temp;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitGetFanSpeedInfo(nvmlUnit_t unit, nvmlUnitFanSpeeds_t *fanSpeeds)
{
	(void)unit, (void)fanSpeeds;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitGetDevices(nvmlUnit_t unit, unsigned int *deviceCount, nvmlDevice_t *devices)
{
	(void)unit, (void)deviceCount, (void)devices;
	return no_unit();
}

NVML_API nvmlReturn_t nvmlUnitSetLedState(nvmlUnit_t unit, nvmlLedColor_t color)
{
	(void)unit, (void)color;
	return no_unit();
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
	case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
	case NVML_ERROR_IN_USE: return "In use by another client";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	case NVML_ERROR_NO_DATA: return "No data";
	case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "ECC is not supported on vGPU";
	case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
	case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	case NVML_ERROR_DEPRECATED: return "Requested functionality has been deprecated";
	case NVML_ERROR_NOT_READY: return "System is not ready";
	case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
	case NVML_ERROR_INVALID_STATE: return "Invalid state";
	case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "Reset not supported for given device/parameters";
	default: return "Unknown Error";
	}
}
