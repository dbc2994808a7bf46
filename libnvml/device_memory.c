// Framebuffer and BAR1 memory, ECC and page retirement or row remapping.
#include <string.h>

#include "nvmock.h"

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	DEV(device, d);
	OUT(memory);
	const struct snap_device *s = d->s;
	// v1 counts reserved memory as used.
	memory->total = s->memory_total;
	memory->used = s->memory_reserved + s->memory_used;
	memory->free = s->memory_total - memory->used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	DEV(device, d);
	OUT(memory);
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	const struct snap_device *s = d->s;
	memory->total = s->memory_total;
	memory->reserved = s->memory_reserved;
	memory->used = s->memory_used;
	memory->free = s->memory_total - s->memory_reserved - s->memory_used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
	DEV(device, d);
	OUT(bar1Memory);
	if (d->s->bar1_total == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	bar1Memory->bar1Total = d->s->bar1_total;
	bar1Memory->bar1Used = d->s->bar1_used;
	bar1Memory->bar1Free = d->s->bar1_total - d->s->bar1_used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
	DEV(device, d);
	if (current == NULL || pending == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->ecc_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*current = (nvmlEnableState_t)d->s->ecc_current;
	*pending = (nvmlEnableState_t)d->s->ecc_pending;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
	DEV(device, d);
	OUT(defaultMode);
	return nvmock_u32(d->s->ecc_default, (unsigned int *)defaultMode);
}

// ecc_count reads the profile's counters: DRAM (device memory) and SRAM;
// the board's other memories (caches, register files) count nothing.
uint32_t nvmock_ecc_count(const struct snap_device *s, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
			  nvmlMemoryLocation_t loc)
{
	const uint32_t *c = &s->ecc_count[4 * (counter == NVML_AGGREGATE_ECC) + 2 * (type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)];
	switch (loc) {
	case NVML_MEMORY_LOCATION_DRAM: return c[0]; // also DEVICE_MEMORY
	case NVML_MEMORY_LOCATION_SRAM: return c[1];
	default: return 0;
	}
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
						  nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
	DEV(device, d);
	OUT(eccCounts);
	if (errorType >= NVML_MEMORY_ERROR_TYPE_COUNT || counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->ecc_current != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*eccCounts = nvmock_ecc_count(d->s, errorType, counterType, NVML_MEMORY_LOCATION_DRAM) +
		     nvmock_ecc_count(d->s, errorType, counterType, NVML_MEMORY_LOCATION_SRAM);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
						      nvmlEccCounterType_t counterType,
						      nvmlMemoryLocation_t locationType, unsigned long long *count)
{
	DEV(device, d);
	OUT(count);
	if (errorType >= NVML_MEMORY_ERROR_TYPE_COUNT || counterType >= NVML_ECC_COUNTER_TYPE_COUNT ||
	    locationType >= NVML_MEMORY_LOCATION_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->ecc_current != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*count = nvmock_ecc_count(d->s, errorType, counterType, locationType);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
	DEV(device, d);
	OUT(status);
	if (status->version != nvmlEccSramErrorStatus_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->s->ecc_current != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(status, 0, sizeof *status);
	status->version = nvmlEccSramErrorStatus_v1;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
						unsigned int *pageCount, unsigned long long *addresses)
{
	(void)addresses;
	DEV(device, d);
	OUT(pageCount);
	if (cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->retired_pages != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*pageCount = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
						   unsigned int *pageCount, unsigned long long *addresses,
						   unsigned long long *timestamps)
{
	(void)timestamps;
	return nvmlDeviceGetRetiredPages(device, cause, pageCount, addresses);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
	DEV(device, d);
	OUT(isPending);
	if (d->s->retired_pages != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*isPending = NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
						unsigned int *isPending, unsigned int *failureOccurred)
{
	DEV(device, d);
	if (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->remapped_rows != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*corrRows = *uncRows = *isPending = *failureOccurred = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device, nvmlRowRemapperHistogramValues_t *values)
{
	DEV(device, d);
	OUT(values);
	if (d->s->remapped_rows != 1 || d->s->remapper_banks == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(values, 0, sizeof *values);
	values->max = d->s->remapper_banks;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *memory)
{
	DEV(device, d);
	(void)d;
	OUT(memory);
	// Confidential computing is off: the protected region is empty.
	memory->total = memory->used = memory->free = 0;
	return NVML_SUCCESS;
}
