// Event sets. No event ever fires on a mock GPU, but clients (nvidia-smi's
// default view, the device plugin's health check) need the calls to work.
#include <poll.h>
#include <stdlib.h>

#include "nvmock.h"

struct nvmlEventSet_st {
	int unused;
};

// Live sets sit in a table so a foreign handle is recognised without
// dereferencing it. The table is lock-free: a mutex held by another thread
// at fork() would stay locked forever in the child.
#define MAX_SETS 256
static struct nvmlEventSet_st *sets[MAX_SETS];

static int set_ok(nvmlEventSet_t set)
{
	for (int i = 0; i < MAX_SETS && set.handle != NULL; i++)
		if (__atomic_load_n(&sets[i], __ATOMIC_ACQUIRE) == set.handle)
			return 1;
	return 0;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(set);
	struct nvmlEventSet_st *s = malloc(sizeof *s);
	if (s == NULL)
		return NVML_ERROR_MEMORY;
	for (int i = 0; i < MAX_SETS; i++) {
		struct nvmlEventSet_st *empty = NULL;
		if (__atomic_compare_exchange_n(&sets[i], &empty, s, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			set->handle = s;
			return NVML_SUCCESS;
		}
	}
	free(s);
	return NVML_ERROR_INSUFFICIENT_RESOURCES;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	for (int i = 0; i < MAX_SETS && set.handle != NULL; i++) {
		struct nvmlEventSet_st *live = set.handle;
		if (__atomic_compare_exchange_n(&sets[i], &live, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			free(set.handle);
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
	DEV(device, d);
	OUT(eventTypes);
	*eventTypes = nvmlEventTypeXidCriticalError | nvmlEventTypeClock;
	if (d->s->ecc_current != NA32)
		*eventTypes |= nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
	DEV(device, d);
	unsigned long long supported;
	nvmlDeviceGetSupportedEventTypes(nvmock_handle(d), &supported);
	if (!set_ok(set))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (eventTypes & ~supported)
		return NVML_ERROR_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (!set_ok(set) || data == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	// Wait the full timeout as a quiet GPU would, so pollers do not spin.
	poll(NULL, 0, timeoutms > 0x7fffffffu ? 0x7fffffff : (int)timeoutms);
	return NVML_ERROR_TIMEOUT;
}

NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
	return nvmlEventSetWait_v2(set, data, timeoutms);
}
