// Internal header of the mock libnvidia-ml: the state every family reads.
#ifndef NVMOCK_H
#define NVMOCK_H

#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot_gen.h"

#define NVML_API __attribute__((visibility("default")))
#define NVML_DEFAULT __attribute__((visibility("default"), weak))

#define NA32 0xffffffffu  // not supported by the board
#define DEP32 0xfffffffeu // deprecated by the driver
#define SNAP_FLAG_UNSEEDED 1u

// One visible GPU; a device handle points at one of these.
struct nvmock_dev {
	const struct snap_device *s;
	unsigned index;      // visible index
	unsigned node_index; // index on the node
	char uuid[96];
	char serial[32];
};

struct nvmock_state {
	int ready; // read without the lock by every getter
	const struct snap_header *hdr;
	const struct snap_device *node; // all devices of the node
	const uint32_t *pool;
	struct nvmock_dev *devs; // visible devices
	unsigned ndevs;
	int trace;
};

extern struct nvmock_state nvmock;

static inline int nvmock_ready(void)
{
	return __atomic_load_n(&nvmock.ready, __ATOMIC_ACQUIRE);
}

// nvmock_dev_of is the one handle validator: a handle is ours only if it
// points exactly at an entry of the visible-device table.
static inline nvmlReturn_t nvmock_dev_of(nvmlDevice_t h, const struct nvmock_dev **out)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	uintptr_t off = (uintptr_t)h.handle - (uintptr_t)nvmock.devs;
	if (off >= (uintptr_t)nvmock.ndevs * sizeof(struct nvmock_dev) || off % sizeof(struct nvmock_dev))
		return NVML_ERROR_INVALID_ARGUMENT;
	*out = (const struct nvmock_dev *)h.handle;
	return NVML_SUCCESS;
}

static inline nvmlDevice_t nvmock_handle(const struct nvmock_dev *d)
{
	nvmlDevice_t h = {(struct nvmlDevice_st *)d};
	return h;
}

// DEV declares d for handle h, returning the validator's error.
#define DEV(h, d)                                                \
	const struct nvmock_dev *d;                              \
	do {                                                     \
		nvmlReturn_t r_ = nvmock_dev_of((h), &d);        \
		if (r_ != NVML_SUCCESS)                          \
			return r_;                               \
	} while (0)

// OUT checks an output pointer.
#define OUT(p)                                                   \
	do {                                                     \
		if ((p) == NULL)                                 \
			return NVML_ERROR_INVALID_ARGUMENT;      \
	} while (0)

// A u32 getter: NA means the board does not support it.
static inline nvmlReturn_t nvmock_u32(uint32_t v, unsigned int *out)
{
	if (out == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (v == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (v == DEP32)
		return NVML_ERROR_DEPRECATED;
	*out = v;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmock_str(char *dst, unsigned int len, const char *src);
nvmlReturn_t nvmock_not_supported(const char *fn);
nvmlReturn_t nvmock_not_supported_dev(const char *fn, nvmlDevice_t h);
nvmlReturn_t nvmock_init(unsigned int flags);
nvmlReturn_t nvmock_load(void);
void nvmock_unload(void);
void nvmock_derive_identity(const char *profile, const char *seed, unsigned index,
			    const char *serial_prefix, char uuid[96], char serial[32]);
void nvmock_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// nvmock_ancestor is where two GPUs' PCIe paths meet: their shared switch
// (at the profile's level), else the NUMA node's host bridges, else the
// system interconnect.
nvmlGpuTopologyLevel_t nvmock_ancestor(const struct snap_device *a, const struct snap_device *b);
uint32_t nvmock_ecc_count(const struct snap_device *s, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
			  nvmlMemoryLocation_t loc);
void nvmock_pci_info(const struct snap_device *s, nvmlPciInfo_t *pci);
int nvmock_parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn);
nvmlReturn_t nvmock_energy_mj(const struct snap_device *s, unsigned long long *mj);

#endif
