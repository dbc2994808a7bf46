// Event sets. No event ever fires on a mock GPU, but clients (nvidia-smi's
// default view, the device plugin's health check) need the calls to work.
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>

#include "nvmock.h"

struct nvmlEventSet_st {
	int unused;
};

// Live sets are kept in a table so a foreign handle is recognised without
// dereferencing it.
#define MAX_SETS 256
static struct nvmlEventSet_st *sets[MAX_SETS];
static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;

static int set_ok(nvmlEventSet_t set)
{
	int ok = 0;
	pthread_mutex_lock(&sets_lock);
	for (int i = 0; i < MAX_SETS && set.handle != NULL; i++)
		ok |= sets[i] == set.handle;
	pthread_mutex_unlock(&sets_lock);
	return ok;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(set);
	struct nvmlEventSet_st *s = malloc(sizeof *s);
	if (s == NULL)
		return NVML_ERROR_MEMORY;
	pthread_mutex_lock(&sets_lock);
	int slot = -1;
	for (int i = 0; i < MAX_SETS && slot < 0; i++)
		if (sets[i] == NULL)
			slot = i;
	if (slot >= 0)
		sets[slot] = s;
	pthread_mutex_unlock(&sets_lock);
	if (slot < 0) {
		free(s);
		return NVML_ERROR_INSUFFICIENT_RESOURCES;
	}
	set->handle = s;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	pthread_mutex_lock(&sets_lock);
	int slot = -1;
	for (int i = 0; i < MAX_SETS && set.handle != NULL; i++)
		if (sets[i] == set.handle)
			slot = i;
	if (slot >= 0)
		sets[slot] = NULL;
	pthread_mutex_unlock(&sets_lock);
	if (slot < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	free(set.handle);
	return NVML_SUCCESS;
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
