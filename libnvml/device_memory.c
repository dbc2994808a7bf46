// Framebuffer and BAR1 memory, ECC and page retirement or row remapping.
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mig.h"

// mig_used is the used memory of a GPU in MIG mode: its GPU instances',
// each its processes' and the driver's idle use up to its size, as a real
// GPU's is the sum of its MIG devices'; and any process on the whole GPU.
static unsigned long long mig_used(const struct nvmock_dev *d)
{
	struct mig_state m;
	nvmock_mig_read(d, &m);
	unsigned long long on_gi[STATE_GIS] = {0}, sum = 0;
	unsigned n;
	struct live_proc *p = nvmock_live_procs(d->node_index, 3, &n);
	for (unsigned i = 0; i < n; i++) {
		if (p[i].mig_gi != 0 && p[i].mig_gi <= STATE_GIS)
			on_gi[p[i].mig_gi - 1] += p[i].used_bytes;
		else
			sum += p[i].used_bytes;
	}
	free(p);
	for (unsigned g = 0; g < STATE_GIS; g++)
		if (m.gi_profile[g] != 0 && m.gi_profile[g] <= d->s->mig_gi_count)
			sum += nvmock_mig_gi_used(d->s, m.gi_profile[g] - 1, on_gi[g]);
	return sum;
}

// used_memory is what the driver holds plus what the registered processes
// use, up to what is there.
static unsigned long long used_memory(const struct nvmock_dev *d)
{
	const struct snap_device *s = d->s;
	unsigned long long used = s->memory_used;
	if (nvmock_mig_on(d))
		used += mig_used(d);
	else if (nvmock.live != NULL)
		used += nvmock_live_proc_memory(d->node_index);
	if (used > s->memory_total - s->memory_reserved)
		used = s->memory_total - s->memory_reserved;
	return used;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	MIGDEV(device, md) {
		OUT(memory);
		nvmock_mig_memory(&md, &memory->total, &memory->used);
		memory->free = memory->total - memory->used;
		return NVML_SUCCESS;
	}
	DEV(device, d);
	OUT(memory);
	if (nvmock_mig_aggregate_denied(d))
		return NVML_ERROR_NO_PERMISSION;
	const struct snap_device *s = d->s;
	// v1 counts reserved memory as used.
	memory->total = s->memory_total;
	memory->used = s->memory_reserved + used_memory(d);
	memory->free = s->memory_total - memory->used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	MIGDEV(device, md) {
		OUT(memory);
		if (memory->version != nvmlMemory_v2)
			return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
		nvmock_mig_memory(&md, &memory->total, &memory->used);
		memory->reserved = 0;
		memory->free = memory->total - memory->used;
		return NVML_SUCCESS;
	}
	DEV(device, d);
	OUT(memory);
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (nvmock_mig_aggregate_denied(d))
		return NVML_ERROR_NO_PERMISSION;
	const struct snap_device *s = d->s;
	memory->total = s->memory_total;
	memory->reserved = s->memory_reserved;
	memory->used = used_memory(d);
	memory->free = s->memory_total - s->memory_reserved - memory->used;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
	MIGDEV(device, md) {
		OUT(bar1Memory);
		// Its memory slices' share, less 1 MiB: 32767 MiB for an A100's
		// 3g.20gb, as in NVIDIA's MIG guide, and an H100's through R570.
		// R580 gives less (an H100 1g.10gb 6185 MiB), as the profile says.
		unsigned long long t = md.s->bar1_total / 8 * md.s->mig_gi_memory_slices[md.row];
		t = t > (1ull << 20) ? t - (1ull << 20) : t;
		if (md.s->mig_gi_bar1_mib[md.row] != 0 && nvmock_driver_branch() >= 580)
			t = (unsigned long long)md.s->mig_gi_bar1_mib[md.row] << 20;
		bar1Memory->bar1Total = t;
		bar1Memory->bar1Used = 0;
		bar1Memory->bar1Free = bar1Memory->bar1Total;
		return NVML_SUCCESS;
	}
	DEV(device, d);
	OUT(bar1Memory);
	if (d->s->bar1_total == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	if (nvmock_mig_aggregate_denied(d))
		return NVML_ERROR_NO_PERMISSION;
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
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	if (set != NULL && (set->cfg_set & LIVE_CFG_ECC_PENDING) && set->ecc_pending <= NVML_FEATURE_ENABLED)
		*pending = (nvmlEnableState_t)set->ecc_pending; // a damaged word reads as unset
	return NVML_SUCCESS;
}

// nvidia-smi -e: the mode the GPU takes at its next boot (nvml.h: "The ECC
// mode changes take effect after a reboot"), node state as the other
// settings. The mock's reboot is a reinstall, which starts from the
// profile's modes again.
NVML_API nvmlReturn_t nvmlDeviceSetEccMode(nvmlDevice_t device, nvmlEnableState_t ecc)
{
	DEV(device, d);
	if (d->s->ecc_current == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (ecc != NVML_FEATURE_DISABLED && ecc != NVML_FEATURE_ENABLED)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_setting(d, LIVE_CFG_ECC_PENDING, ecc);
}

NVML_API nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
	DEV(device, d);
	OUT(defaultMode);
	return nvmock_u32(d->s->ecc_default, (unsigned int *)defaultMode);
}

// ecc_count reads the profile's counters: DRAM (device memory) and SRAM;
// the board's other memories (caches, register files) count nothing.
uint64_t nvmock_ecc_count(const struct snap_device *s, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
			  nvmlMemoryLocation_t loc)
{
	const uint32_t *c = &s->ecc_count[4 * (counter == NVML_AGGREGATE_ECC) + 2 * (type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED)];
	// Injected errors land in device memory, in both counters; a reset
	// starts the volatile ones again from zero.
	uint64_t added = 0, base[2] = {c[0], c[1]};
	struct live_gpu g;
	unsigned node = (unsigned)(s - nvmock.node);
	// Read whole: nvmock_live_read passes over a GPU with no load and no
	// faults, whose reset still zeroes the capture's volatile counts.
	if (nvmock.live != NULL && node < STATE_GPUS && nvmock_live_copy(&g, &nvmock.live_gpus[node], sizeof g)) {
		if (counter == NVML_VOLATILE_ECC && g.reset_ns != 0)
			base[0] = base[1] = 0;
		if (loc == NVML_MEMORY_LOCATION_DRAM) {
			struct live_fx fx;
			nvmock_live_fx(node, &g, nvmock_live_now(), &fx);
			int unc = type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED;
			if (counter == NVML_AGGREGATE_ECC)
				added = unc ? fx.dbe : fx.sbe;
			else
				added = unc ? fx.dbe_vol : fx.sbe_vol;
		}
	}
	switch (loc) {
	case NVML_MEMORY_LOCATION_DRAM: return base[0] + added; // also DEVICE_MEMORY
	case NVML_MEMORY_LOCATION_SRAM: return base[1];
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
	int bad = errorType >= NVML_MEMORY_ERROR_TYPE_COUNT || counterType >= NVML_ECC_COUNTER_TYPE_COUNT ||
		  locationType >= NVML_MEMORY_LOCATION_COUNT;
	// A MIG device counts its own errors, only uncorrectable volatile ones
	// outside DRAM (nvml.h); none are modelled yet.
	MIGDEV(device, md) {
		OUT(count);
		if (bad)
			return NVML_ERROR_INVALID_ARGUMENT;
		if (md.s->ecc_current != 1 || errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED ||
		    counterType != NVML_VOLATILE_ECC || locationType == NVML_MEMORY_LOCATION_DRAM)
			return NVML_ERROR_NOT_SUPPORTED;
		*count = 0;
		return NVML_SUCCESS;
	}
	DEV(device, d);
	OUT(count);
	if (bad)
		return NVML_ERROR_INVALID_ARGUMENT;
	// nvml.h: on a MIG-enabled GPU, "querying volatile errors using device
	// handles is currently not supported" (review: it answered 0).
	if (d->s->ecc_current != 1 || (counterType == NVML_VOLATILE_ECC && nvmock_mig_on(d)))
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

// clamp_uint is a count as an unsigned int can hold it.
static unsigned clamp_uint(uint64_t n) { return n > UINT_MAX ? UINT_MAX : (unsigned)n; }

// retired lists the pages uncorrectable errors retired (boards before
// Ampere), each with the time of its error in seconds, from one read of
// the live state: the pages of each active uncorrectable ECC fault in
// turn, as nvmock_live_fx counts them. Addresses are made up, one 4 KiB
// page apart.
static nvmlReturn_t retired(nvmlDevice_t device, nvmlPageRetirementCause_t cause, unsigned int *pageCount,
			    unsigned long long *addresses, unsigned long long *timestamps)
{
	DEV(device, d);
	OUT(pageCount);
	// A count of 0 asks the size; any other needs the buffer (nvml.h).
	if (cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT || (addresses == NULL && *pageCount != 0))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->retired_pages != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned n = 0;
	LIVE(d);
	if (live_)
		n = cause == NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR ? clamp_uint(fx_.dbe) : 0;
	if (addresses == NULL || *pageCount < n) {
		unsigned have = *pageCount;
		*pageCount = n;
		return n > have ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
	}
	for (unsigned i = 0; i < n; i++)
		addresses[i] = 0x1000ull * (0x10000 + i);
	*pageCount = n;
	if (timestamps == NULL || n == 0)
		return NVML_SUCCESS;
	uint64_t since;
	unsigned k = 0;
	for (unsigned i = 0; i < g_.faults && i < STATE_FAULTS; i++)
		if (g_.fault_kind[i] == LIVE_FAULT_ECC && nvmock_live_active(d->node_index, &g_, i, now_, &since))
			for (unsigned c = 0; c < g_.fault_count[i] && k < n; c++)
				timestamps[k++] = since / 1000000000ull;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
						unsigned int *pageCount, unsigned long long *addresses)
{
	return retired(device, cause, pageCount, addresses, NULL);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
						   unsigned int *pageCount, unsigned long long *addresses,
						   unsigned long long *timestamps)
{
	return retired(device, cause, pageCount, addresses, timestamps);
}

NVML_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
	DEV(device, d);
	OUT(isPending);
	if (d->s->retired_pages != 1)
		return NVML_ERROR_NOT_SUPPORTED;
	*isPending = NVML_FEATURE_DISABLED;
	LIVE(d);
	// Retired at the next reset; XID 63 records one with no new error.
	if (live_ && fx_.remap_pending)
		*isPending = NVML_FEATURE_ENABLED;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
						unsigned int *isPending, unsigned int *failureOccurred)
{
	DEV(device, d);
	if (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->remapped_rows != 1 || nvmock_mig_instances(d))
		return NVML_ERROR_NOT_SUPPORTED;
	*corrRows = *uncRows = *isPending = *failureOccurred = 0;
	// An uncorrectable error remaps its row at the next GPU reset: pending
	// until then (nvidia-smi -q "Pending: Yes").
	LIVE(d);
	if (live_) {
		*uncRows = clamp_uint(fx_.dbe);
		*isPending = fx_.remap_pending;
		*failureOccurred = fx_.remap_failed;
	}
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

// Channel and TPC repair (Ampere on, nvml.h) and the unrepairable-memory
// flag (Hopper on) came with R580 (absent from R575's nvml.h). Every
// captured board that has them shows nothing pending and its memory
// repairable (nvidia-smi -q "No"; R580.105's does not print the flag yet);
// no fault moves them.
NVML_API nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_t *repairStatus)
{
	DEV(device, d);
	SINCE(580);
	OUT(repairStatus);
	if (repairStatus->version != nvmlRepairStatus_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->s->architecture == NA32 || d->s->architecture < NVML_DEVICE_ARCH_AMPERE)
		return NVML_ERROR_NOT_SUPPORTED;
	repairStatus->bChannelRepairPending = 0;
	repairStatus->bTpcRepairPending = 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetUnrepairableMemoryFlag_v1(nvmlDevice_t device,
							     nvmlUnrepairableMemoryStatus_v1_t *unrepairableMemoryStatus)
{
	DEV(device, d);
	SINCE(580);
	OUT(unrepairableMemoryStatus);
	if (d->s->architecture == NA32 || d->s->architecture < NVML_DEVICE_ARCH_HOPPER)
		return NVML_ERROR_NOT_SUPPORTED;
	unrepairableMemoryStatus->bUnrepairableMemory = 0;
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
