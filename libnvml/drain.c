// Drain states (nvidia-smi drain -p ADDRESS -q | -m 0|1). A drained GPU
// takes no new clients: the NVML processes that start after the drain do
// not see it (nvml.h; NVIDIA's device plugin issue #451: nvidia-smi shows
// one GPU less while the running plugin still lists them all), so these
// calls name the GPU by its PCI address. The drain is node state, kept
// until undrained or the node is reinstalled, as the driver keeps it
// until it unloads. Removing a drained GPU (nvmlDeviceRemoveGpu) and
// finding it again (nvmlDeviceDiscoverGpus) are not modelled.
#include <string.h>

#include "mig.h"

_Static_assert(STATE_GPUS <= 64, "nvmock.reach holds a bit a GPU");

// nvmock_drained says whether node GPU node is drained.
int nvmock_drained(unsigned node)
{
	struct live_gpu g;
	if (nvmock.live == NULL || node >= STATE_GPUS || !nvmock_live_copy(&g, &nvmock.live_gpus[node], sizeof g))
		return 0;
	return (g.cfg_set & LIVE_CFG_DRAIN) && g.drain == NVML_FEATURE_ENABLED;
}

// drain_target finds the node GPU at pciInfo's address among those this
// process may see (its device nodes, or NVMOCK_VISIBLE_DEVICES), drained
// ones included. nvidia-smi gives the address in pciInfo's numbers; other
// callers may give only its bus id.
static nvmlReturn_t drain_target(const nvmlPciInfo_t *pciInfo, struct nvmock_dev *out)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (pciInfo == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned dom = pciInfo->domain, bus = pciInfo->bus, dev = pciInfo->device, fn = 0;
	if (dom == 0 && bus == 0 && dev == 0) {
		char id[sizeof pciInfo->busId + 1] = {0}; // the caller's may lack its NUL
		memcpy(id, pciInfo->busId, sizeof pciInfo->busId);
		if (id[0] != '\0' && !nvmock_parse_bus_id(id, &dom, &bus, &dev, &fn))
			return NVML_ERROR_INVALID_ARGUMENT;
	}
	uint64_t reach = __atomic_load_n(&nvmock.reach, __ATOMIC_ACQUIRE);
	for (unsigned i = 0; i < nvmock.hdr->device_count && i < STATE_GPUS; i++) {
		const struct snap_device *s = &nvmock.node[i];
		if ((reach >> i & 1) && s->pci_domain == dom && s->pci_bus == bus && s->pci_device == dev && fn == 0) {
			// A drained GPU has no index in this process.
			*out = (struct nvmock_dev){.s = s, .index = ~0u, .node_index = i};
			return nvmock.live != NULL && nvmock_live_lost(i) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
		}
	}
	return NVML_ERROR_INVALID_ARGUMENT; // nvml.h: no such GPU
}

NVML_API nvmlReturn_t nvmlDeviceQueryDrainState(nvmlPciInfo_t *pciInfo, nvmlEnableState_t *currentState)
{
	struct nvmock_dev d;
	nvmlReturn_t r = drain_target(pciInfo, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (currentState == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*currentState = nvmock_drained(d.node_index) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

static nvmlReturn_t set_drain(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)procs;
	uint32_t state = *(const uint32_t *)arg;
	// nvml.h: persistence mode must be off to drain (IN_USE). Undraining
	// asks nothing: a process from before the drain may have turned it on
	// again, and none after can reach the GPU to turn it off.
	if (state == NVML_FEATURE_ENABLED && nvmock_persistence(d, g) == NVML_FEATURE_ENABLED)
		return NVML_ERROR_IN_USE;
	if (state == NVML_FEATURE_DISABLED) {
		g->cfg_set &= ~LIVE_CFG_DRAIN; // the board's own: not draining
		return NVML_SUCCESS;
	}
	g->cfg_set |= LIVE_CFG_DRAIN;
	g->drain = state;
	return NVML_SUCCESS;
}

// nvmlDeviceModifyDrainState: root, or a privileged container, as for the
// other settings (NO_PERMISSION otherwise).
NVML_API nvmlReturn_t nvmlDeviceModifyDrainState(nvmlPciInfo_t *pciInfo, nvmlEnableState_t newState)
{
	struct nvmock_dev d;
	nvmlReturn_t r = drain_target(pciInfo, &d);
	if (r != NVML_SUCCESS)
		return r;
	if (newState != NVML_FEATURE_DISABLED && newState != NVML_FEATURE_ENABLED)
		return NVML_ERROR_INVALID_ARGUMENT;
	uint32_t state = newState;
	return nvmock_live_update(&d, set_drain, &state);
}
