// Device enumeration and lookup: count, handles by index, UUID, serial and
// PCI bus id, and the index of a handle.
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "mig.h"

// found hands out a handle, unless the GPU is lost: then, as from the
// driver, there is none ("Unable to determine the device handle ... GPU is
// lost" in nvidia-smi).
static nvmlReturn_t found(const struct nvmock_dev *d, nvmlDevice_t *device)
{
	if (nvmock.live != NULL && nvmock_live_lost(d->node_index))
		return NVML_ERROR_GPU_IS_LOST;
	*device = nvmock_handle(d);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(count);
	*count = nvmock.ndevs;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(device);
	if (index >= nvmock.ndevs)
		return NVML_ERROR_INVALID_ARGUMENT;
	return found(&nvmock.devs[index], device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (uuid == NULL || device == NULL || uuid[0] == '\0')
		return NVML_ERROR_INVALID_ARGUMENT; // nvml.h: "uuid is invalid"
	if (strncasecmp(uuid, "MIG-", 4) == 0)
		return nvmock_mig_by_uuid(uuid, device);
	for (unsigned i = 0; i < nvmock.ndevs; i++) {
		if (strcasecmp(nvmock.devs[i].uuid, uuid) == 0) {
			return found(&nvmock.devs[i], device);
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

// nvmlDeviceGetHandleByUUIDV takes a GPU's or a MIG device's UUID as text
// or as its 16 bytes.
NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (uuid == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (uuid->version != nvmlUUID_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	char s[NVML_DEVICE_UUID_ASCII_LEN + 1];
	switch (uuid->type) {
	case NVML_UUID_TYPE_ASCII:
		memcpy(s, uuid->value.str, sizeof uuid->value.str);
		s[sizeof uuid->value.str] = '\0';
		return nvmlDeviceGetHandleByUUID(s, device);
	case NVML_UUID_TYPE_BINARY: {
		const unsigned char *b = uuid->value.bytes;
		for (int mig = 0; mig < 2; mig++) {
			snprintf(s, sizeof s,
				 "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", mig ? "MIG" : "GPU",
				 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
				 b[15]);
			nvmlReturn_t r = nvmlDeviceGetHandleByUUID(s, device);
			if (r != NVML_ERROR_NOT_FOUND)
				return r;
		}
		return NVML_ERROR_NOT_FOUND;
	}
	}
	return NVML_ERROR_INVALID_ARGUMENT;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (serial == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < nvmock.ndevs; i++) {
		if (strcmp(nvmock.devs[i].serial, serial) == 0) {
			return found(&nvmock.devs[i], device);
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

// nvmock_parse_bus_id reads the forms nvml.h lists: domain:bus:device.function,
// domain:bus:device (function 0) and bus:device.function, any case.
int nvmock_parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn)
{
	unsigned a, b, c, d;
	int n = 0;
	if (sscanf(s, "%x:%x:%x.%x%n", &a, &b, &c, &d, &n) == 4 && s[n] == '\0') {
		*dom = a, *bus = b, *dev = c, *fn = d;
		return 1;
	}
	n = 0;
	if (sscanf(s, "%x:%x:%x%n", &a, &b, &c, &n) == 3 && s[n] == '\0') {
		*dom = a, *bus = b, *dev = c, *fn = 0;
		return 1;
	}
	n = 0;
	if (sscanf(s, "%x:%x.%x%n", &b, &c, &d, &n) == 3 && s[n] == '\0') {
		*dom = 0, *bus = b, *dev = c, *fn = d;
		return 1;
	}
	return 0;
}

// at finds the GPU at a PCI address: NOT_FOUND for none.
static nvmlReturn_t at(unsigned dom, unsigned bus, unsigned dev, unsigned fn, nvmlDevice_t *device)
{
	for (unsigned i = 0; i < nvmock.ndevs; i++) {
		const struct snap_device *s = nvmock.devs[i].s;
		if (s->pci_domain == dom && s->pci_bus == bus && s->pci_device == dev && fn == 0)
			return found(&nvmock.devs[i], device);
	}
	return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (pciBusId == NULL || device == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned dom, bus, dev, fn;
	if (!nvmock_parse_bus_id(pciBusId, &dom, &bus, &dev, &fn))
		return NVML_ERROR_INVALID_ARGUMENT;
	return at(dom, bus, dev, fn, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	MIGDEV(device, md) {
		OUT(index);
		*index = nvmock_mig_index(&md);
		return NVML_SUCCESS;
	}
	DEV(device, d);
	OUT(index);
	*index = d->index;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
	DEV(device, d);
	return nvmock_u32(d->s->minor, minorNumber);
}

NVML_API nvmlReturn_t nvmlDeviceOnSameBoard(nvmlDevice_t device1, nvmlDevice_t device2, int *onSameBoard)
{
	DEV(device1, a);
	DEV(device2, b);
	OUT(onSameBoard);
	*onSameBoard = a == b;
	return NVML_SUCCESS;
}
