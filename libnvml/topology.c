// Where GPUs sit: CPU and NUMA affinity, PCIe ancestry, P2P, NVLink and the
// field values that report NVLink and memory temperature.
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include "nvmock.h"

_Static_assert(sizeof(unsigned long) == sizeof(uint64_t), "NVML's CPU and node sets are 64-bit words here");

// affinity answers a CPU set query with one of the GPU's masks, the words
// past it cleared.
static nvmlReturn_t affinity(nvmlDevice_t device, unsigned size, unsigned long *set, int socket)
{
	DEV(device, d);
	if (set == NULL || size == 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	const uint64_t *mask = socket ? d->s->cpu_affinity_socket : d->s->cpu_affinity;
	unsigned words = sizeof d->s->cpu_affinity / sizeof d->s->cpu_affinity[0];
	for (unsigned i = 0; i < size; i++)
		set[i] = i < words ? mask[i] : 0;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet)
{
	return affinity(device, cpuSetSize, cpuSet, 0);
}

// The node scope is the GPU's NUMA node's CPUs, as nvmlDeviceGetCpuAffinity
// gives; the socket scope the whole socket's, which differ where a socket
// has several NUMA nodes (a DGX A100's EPYCs in NPS4).
NVML_API nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
							  unsigned long *cpuSet, nvmlAffinityScope_t scope)
{
	if (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET)
		return nvmock_ready() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
	return affinity(device, cpuSetSize, cpuSet, scope == NVML_AFFINITY_SCOPE_SOCKET);
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize, unsigned long *nodeSet,
						  nvmlAffinityScope_t scope)
{
	DEV(device, d);
	if (nodeSet == NULL || nodeSetSize == 0 || (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->numa_node == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	uint64_t nodes = d->s->numa_near_mask;
	if (scope == NVML_AFFINITY_SCOPE_SOCKET)
		nodes |= d->s->numa_socket_mask;
	nodeSet[0] = nodes;
	for (unsigned i = 1; i < nodeSetSize; i++)
		nodeSet[i] = 0;
	return NVML_SUCCESS;
}

// The GPU's own NUMA node exists only where its memory is one (coherent
// Grace boards: a GB200's 2, 10, 18, 26); x86 nodes answer N/A.
NVML_API nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
	DEV(device, d);
	OUT(node);
	if (d->s->gpu_numa_node == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*node = d->s->gpu_numa_node;
	return NVML_SUCCESS;
}

nvmlGpuTopologyLevel_t nvmock_place_level(const struct pci_place *a, const struct pci_place *b)
{
	if (a->domain == b->domain && a->bdf == b->bdf)
		return NVML_TOPOLOGY_INTERNAL;
	// The PCIe tree's levels, as nvidia-smi names them: one switch (or
	// one bridge, above two functions of a card) between them (PIX), a
	// switch hierarchy (PXB), the host bridge (PHB).
	if (a->domain == b->domain && a->bdf >> 3 == b->bdf >> 3)
		return NVML_TOPOLOGY_SINGLE;
	if (a->leaf != NA32 && a->leaf == b->leaf)
		return NVML_TOPOLOGY_SINGLE;
	if (a->top != NA32 && a->top == b->top)
		return NVML_TOPOLOGY_MULTIPLE;
	if (a->root != NA32 && a->root == b->root)
		return NVML_TOPOLOGY_HOSTBRIDGE;
	// Not across PCI domains: a GB200 tray's NICs on one Grace, each in a
	// domain of its own, are SYS to each other (real topo -m captures). A
	// board repeated past its GPU count (--gpus) is the same tree again,
	// 0x10000 domains up: its devices are NODE to the first copy's.
	if (a->numa != NA32 && a->numa == b->numa && (a->domain & 0xffff) == (b->domain & 0xffff))
		return NVML_TOPOLOGY_NODE;
	return NVML_TOPOLOGY_SYSTEM;
}

struct pci_place nvmock_gpu_place(const struct snap_device *s)
{
	// A coherent board's GPU is in its own memory's NUMA node, which no NIC
	// shares: a GB200's GPUs are SYS to every NIC, as real trays show.
	unsigned numa = s->gpu_numa_node != NA32 ? s->gpu_numa_node : s->numa_node;
	return (struct pci_place){s->pci_domain, s->pci_bus << 8 | s->pci_device << 3, s->pcie_root,
				  s->pcie_switch_top, s->pcie_switch_leaf, numa};
}

nvmlGpuTopologyLevel_t nvmock_ancestor(const struct snap_device *a, const struct snap_device *b)
{
	struct pci_place pa = nvmock_gpu_place(a), pb = nvmock_gpu_place(b);
	return nvmock_place_level(&pa, &pb);
}

static nvmlGpuTopologyLevel_t ancestor(const struct nvmock_dev *a, const struct nvmock_dev *b)
{
	return nvmock_ancestor(a->s, b->s);
}

NVML_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
							  nvmlGpuTopologyLevel_t *pathInfo)
{
	DEV(device1, a);
	DEV(device2, b);
	OUT(pathInfo);
	*pathInfo = ancestor(a, b);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
						       unsigned int *count, nvmlDevice_t *deviceArray)
{
	DEV(device, d);
	OUT(count);
	if ((unsigned)level % 10 != 0 || (unsigned)level > NVML_TOPOLOGY_SYSTEM || (deviceArray == NULL && *count != 0))
		return NVML_ERROR_INVALID_ARGUMENT; // nvml.h: an invalid level, or a count with no array
	unsigned n = 0;
	for (unsigned i = 0; i < nvmock.ndevs; i++) {
		const struct nvmock_dev *o = &nvmock.devs[i];
		if (o == d || ancestor(d, o) > level)
			continue;
		if (deviceArray != NULL && n < *count)
			deviceArray[n] = nvmock_handle(o);
		n++;
	}
	// nvml.h: a count of 0 is set to the number; another fills that many
	// (at most), with SUCCESS: INSUFFICIENT_SIZE is not among its answers
	// (review).
	if (deviceArray != NULL && *count != 0 && *count < n)
		n = *count;
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count, nvmlDevice_t *deviceArray)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(count);
	if (cpuNumber >= 1024 || (deviceArray == NULL && *count != 0))
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned n = 0;
	for (unsigned i = 0; i < nvmock.ndevs; i++) {
		const struct nvmock_dev *o = &nvmock.devs[i];
		if (!(o->s->cpu_affinity[cpuNumber / 64] >> (cpuNumber % 64) & 1))
			continue;
		if (deviceArray != NULL && n < *count)
			deviceArray[n] = nvmock_handle(o);
		n++;
	}
	// nvml.h: a count of 0 asks the size, array or not (review); another
	// fills that many at most, with SUCCESS, as nvmlDeviceGetTopologyNearestGpus.
	if (deviceArray != NULL && *count != 0 && *count < n)
		n = *count;
	*count = n;
	return NVML_SUCCESS;
}

// mig_trains_links_off: an A100's NVLinks (and the NVSwitches' side) are
// trained off while its MIG mode is on; Hopper's and later stay active
// (NVIDIA's Fabric Manager guide, "Interoperability With Multi-Instance
// GPUs").
static int mig_trains_links_off(const struct nvmock_dev *d)
{
	return d->s->architecture == NVML_DEVICE_ARCH_AMPERE && nvmock_mig_on(d);
}

// gpu_link_peer is the node index of the GPU that direct link `link` of
// GPU `self` reaches among n, or -1 (none: the link is down). The GPUs pair
// off round-robin (the circle method, a bye for an odd count): link l is
// round l mod (rounds), where each GPU has at most one partner, so both
// ends of a link name each other, on the same link number.
static int gpu_link_peer(unsigned self, unsigned n, unsigned link)
{
	unsigned m = n + (n & 1);
	if (m < 2)
		return -1;
	unsigned rounds = m - 1, r = link % rounds, peer;
	if (self == m - 1) {
		peer = r;
	} else {
		unsigned k = (self + rounds - r) % rounds;
		peer = k == 0 ? m - 1 : (rounds - k + r) % rounds;
	}
	return peer < n ? (int)peer : -1;
}

// link_active: the board's link is up unless MIG trained it off, a fault
// took it down, or (a direct GPU link) its round has no partner.
static int link_active(const struct nvmock_dev *d, unsigned link)
{
	if (link >= d->s->nvlink_count || mig_trains_links_off(d))
		return 0;
	if (d->s->nvlink_remote == NVML_NVLINK_DEVICE_TYPE_GPU &&
	    gpu_link_peer(d->node_index, nvmock.hdr->device_count, link) < 0)
		return 0;
	LIVE(d);
	return !(live_ && (fx_.links_down >> (link & 31) & 1));
}

// p2p_status follows the modelled topology: NVLink peers (every pair on an
// NVSwitch board) do everything over NVLink; otherwise reads and writes go
// over PCIe within one CPU socket (NODE or closer), while across sockets the
// inter-socket link carries no peer traffic ("CNS"), and PCIe peers have no
// atomics. A GPU in MIG mode has no peers at all: its MIG devices talk to
// no other GPU, over NVLink or PCIe (NVIDIA's MIG and Fabric Manager
// guides).
static nvmlGpuP2PStatus_t p2p_status(const struct nvmock_dev *da, const struct nvmock_dev *db, nvmlGpuP2PCapsIndex_t i)
{
	const struct snap_device *a = da->s, *b = db->s;
	if (a == b || nvmock_mig_on(da) || nvmock_mig_on(db))
		return NVML_P2P_STATUS_NOT_SUPPORTED;
	int nvlink = a->nvlink_count && b->nvlink_count;
	if (nvlink && a->nvlink_remote == NVML_NVLINK_DEVICE_TYPE_GPU) {
		// Direct links: only GPUs a link joins are NVLink peers.
		nvlink = 0;
		for (unsigned l = 0; l < a->nvlink_count && !nvlink; l++)
			nvlink = gpu_link_peer(da->node_index, nvmock.hdr->device_count, l) == (int)db->node_index;
	}
	int pcie = nvmock_ancestor(a, b) <= NVML_TOPOLOGY_NODE;
	switch (i) {
	case NVML_P2P_CAPS_INDEX_NVLINK:
		return nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
	case NVML_P2P_CAPS_INDEX_ATOMICS:
		return nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
	case NVML_P2P_CAPS_INDEX_READ:
	case NVML_P2P_CAPS_INDEX_WRITE:
		return nvlink || pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
	case NVML_P2P_CAPS_INDEX_PCI:
		return pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED;
	default:
		return NVML_P2P_STATUS_UNKNOWN;
	}
}

NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t p2pIndex,
					     nvmlGpuP2PStatus_t *p2pStatus)
{
	DEV(device1, a);
	DEV(device2, b);
	OUT(p2pStatus);
	if ((unsigned)p2pIndex > NVML_P2P_CAPS_INDEX_UNKNOWN)
		return NVML_ERROR_INVALID_ARGUMENT;
	*p2pStatus = p2p_status(a, b, p2pIndex);
	return NVML_SUCCESS;
}

// LINK validates an NVLink index: past NVML_NVLINK_MAX_LINKS invalid, past
// the board's links not supported. The state and capability calls answer
// links past the board's but below the bound as Blackwell boards do.
#define LINK(d, link)                                              \
	do {                                                       \
		if ((link) >= NVML_NVLINK_MAX_LINKS)               \
			return NVML_ERROR_INVALID_ARGUMENT;        \
		if ((link) >= (d)->s->nvlink_count)                \
			return NVML_ERROR_NOT_SUPPORTED;           \
	} while (0)

// Past a board's links, Blackwell drivers refuse the state as invalid and
// answer the capability as for a link they have (measured on a B200 and a
// GB200, NVIDIA/TensorRT-LLM #17060, #19210); earlier boards are taken to
// do the same. go-gpuallocator skips either answer.
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
	DEV(device, d);
	OUT(isActive);
	if (d->s->nvlink_count > 0 && link >= d->s->nvlink_count)
		return NVML_ERROR_INVALID_ARGUMENT;
	LINK(d, link);
	*isActive = link_active(d, link) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
	DEV(device, d);
	OUT(version);
	LINK(d, link);
	*version = d->s->nvlink_version;
	return NVML_SUCCESS;
}

// NVLink encryption and firmware images came with R580 (absent from R575's
// nvml.h); a board answers them where its profile lists the images. v1
// asks NVLE alone.
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkInfo(nvmlDevice_t device, nvmlNvLinkInfo_t *info)
{
	DEV(device, d);
	SINCE(580);
	OUT(info);
	if (info->version != nvmlNvLinkInfo_v1 && info->version != nvmlNvLinkInfo_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	const struct snap_device *s = d->s;
	if (s->nvlink_fw_count == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	info->isNvleEnabled = s->nvlink_nvle;
	if (info->version == nvmlNvLinkInfo_v1)
		return NVML_SUCCESS;
	nvmlNvlinkFirmwareInfo_t *fw = &info->firmwareInfo;
	memset(fw, 0, sizeof *fw);
	fw->numValidEntries = s->nvlink_fw_count; // at most SNAPSHOT_MAX_NVLINK_FIRMWARE (snap_check)
	for (unsigned i = 0; i < fw->numValidEntries; i++) {
		const uint32_t *e = &s->nvlink_fw[4 * i];
		fw->firmwareVersion[i].ucodeType = (unsigned char)e[0];
		fw->firmwareVersion[i].major = e[1];
		fw->firmwareVersion[i].minor = e[2];
		fw->firmwareVersion[i].subMinor = e[3];
	}
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, nvmlNvLinkCapability_t capability,
						    unsigned int *capResult)
{
	DEV(device, d);
	OUT(capResult);
	if (link >= NVML_NVLINK_MAX_LINKS || d->s->nvlink_count == 0)
		LINK(d, link);
	if ((unsigned)capability >= NVML_NVLINK_CAP_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	*capResult = capability != NVML_NVLINK_CAP_SLI_BRIDGE && capability != NVML_NVLINK_CAP_VALID ? 1 : capability == NVML_NVLINK_CAP_VALID;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
							  nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType)
{
	DEV(device, d);
	OUT(pNvLinkDeviceType);
	LINK(d, link);
	*pNvLinkDeviceType = (nvmlIntNvLinkDeviceType_t)d->s->nvlink_remote;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
	DEV(device, d);
	OUT(pci);
	LINK(d, link);
	const struct snap_device *s = d->s;
	if (s->nvlink_remote == NVML_NVLINK_DEVICE_TYPE_GPU) {
		// Over the node's GPUs, whichever this process sees.
		int peer = gpu_link_peer(d->node_index, nvmock.hdr->device_count, link);
		if (peer < 0)
			return NVML_ERROR_NOT_SUPPORTED;
		nvmock_pci_info(&nvmock.node[peer], pci);
		return NVML_SUCCESS;
	}
	// An NVSwitch the profile places on the node; switches outside it (an
	// NVL72 tray's switch trays) are no PCI device of this node.
	uint32_t a = s->nvlink_remote_addr[link];
	if (a == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(pci, 0, sizeof *pci);
	// The switches of the GPU's own copy of the tree (profile gpus beyond
	// its bus ids: domain + 0x10000 each).
	pci->domain = a >> 16 | (s->pci_domain & 0xffff0000u);
	pci->bus = a >> 8 & 0xff;
	pci->device = a >> 3 & 0x1f;
	pci->pciDeviceId = s->nvlink_remote_device_id;
	pci->pciSubSystemId = s->nvlink_remote_device_id;
	snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", pci->domain, pci->bus, pci->device, a & 7);
	snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", pci->domain, pci->bus, pci->device,
		 a & 7);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link, nvmlNvLinkErrorCounter_t counter,
						      unsigned long long *counterValue)
{
	DEV(device, d);
	OUT(counterValue);
	LINK(d, link);
	if ((unsigned)counter >= NVML_NVLINK_ERROR_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	*counterValue = 0;
	return NVML_SUCCESS;
}

// power_field answers the power fields nvidia-smi 535 reads for -q, for the
// GPU scope, on Grace boards the module scope (GPU, CPU and memory), and on
// HBM boards the memory scope, whose average alone boards report.
// The GPU's draw, energy and limits are what the getters give: the load
// model's and the limit set with nvidia-smi -pl.
static nvmlReturn_t power_field(const struct nvmock_dev *d, nvmlFieldValue_t *v)
{
	const struct snap_device *s = d->s;
	if (v->scopeId == NVML_POWER_SCOPE_MEMORY) {
		if (v->fieldId != NVML_FI_DEV_POWER_AVERAGE || s->memory_power_average_mw == NA32)
			return NVML_ERROR_NOT_SUPPORTED;
		v->value.uiVal = s->memory_power_average_mw;
		return NVML_SUCCESS;
	}
	int module = v->scopeId == NVML_POWER_SCOPE_MODULE;
	if (v->scopeId != NVML_POWER_SCOPE_GPU && !module)
		return NVML_ERROR_NOT_SUPPORTED;
	uint32_t mw;
	switch (v->fieldId) {
	case NVML_FI_DEV_POWER_INSTANT: mw = module ? s->module_power_draw_mw : s->power_draw_mw; break;
	case NVML_FI_DEV_POWER_MIN_LIMIT: mw = module ? s->module_power_min_mw : s->power_min_mw; break;
	case NVML_FI_DEV_POWER_MAX_LIMIT: mw = module ? s->module_power_max_mw : s->power_max_mw; break;
	case NVML_FI_DEV_POWER_DEFAULT_LIMIT: mw = module ? s->module_power_default_mw : s->power_default_mw; break;
	case NVML_FI_DEV_POWER_CURRENT_LIMIT: mw = module ? s->module_power_limit_mw : nvmock_enforced_limit(d); break;
	case NVML_FI_DEV_POWER_REQUESTED_LIMIT: mw = module ? s->module_power_limit_mw : nvmock_requested_limit(d); break;
	case NVML_FI_DEV_ENERGY: {
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
		if (module)
			return NVML_ERROR_NOT_SUPPORTED;
		return nvmock_device_energy(d, &v->value.ullVal);
	}
	case NVML_FI_DEV_POWER_AVERAGE:
		// nvidia-smi shows a Grace module's draw from its average; the
		// GPU's is the board's (N/A on GA100 and Turing).
		mw = module ? s->module_power_draw_mw : s->power_average_mw;
		break;
	default: return NVML_ERROR_NOT_SUPPORTED;
	}
	if (mw == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	v->value.uiVal = mw;
	int draw = v->fieldId == NVML_FI_DEV_POWER_INSTANT || v->fieldId == NVML_FI_DEV_POWER_AVERAGE;
	if (!module && draw) {
		LIVE(d);
		if (live_)
			v->value.uiVal = nvmock_live_power(d, &g_, &fx_, now_);
	}
	return NVML_SUCCESS;
}

// memory_field answers the ECC, page retirement and row remapping fields,
// from the same readings as the getters (device_memory.c): an injected
// uncorrectable error retires a page (pending until a driver reload) or
// leaves a row remap pending.
static nvmlReturn_t memory_field(const struct nvmock_dev *d, unsigned id, nvmlFieldValue_t *v)
{
	const struct snap_device *s = d->s;
	v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
	if (id == NVML_FI_DEV_ECC_CURRENT || id == NVML_FI_DEV_ECC_PENDING) {
		if (s->ecc_current == NA32)
			return NVML_ERROR_NOT_SUPPORTED;
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = id == NVML_FI_DEV_ECC_CURRENT ? s->ecc_current : s->ecc_pending;
		return NVML_SUCCESS;
	}
	if (id >= NVML_FI_DEV_ECC_SBE_VOL_TOTAL && id <= NVML_FI_DEV_ECC_DBE_AGG_TOTAL) {
		if (s->ecc_current != 1)
			return NVML_ERROR_NOT_SUPPORTED;
		nvmlMemoryErrorType_t type = (id - NVML_FI_DEV_ECC_SBE_VOL_TOTAL) % 2 ? NVML_MEMORY_ERROR_TYPE_UNCORRECTED
									      : NVML_MEMORY_ERROR_TYPE_CORRECTED;
		nvmlEccCounterType_t counter = id >= NVML_FI_DEV_ECC_SBE_AGG_TOTAL ? NVML_AGGREGATE_ECC : NVML_VOLATILE_ECC;
		v->value.ullVal = nvmock_ecc_count(s, type, counter, NVML_MEMORY_LOCATION_DRAM) +
				  nvmock_ecc_count(s, type, counter, NVML_MEMORY_LOCATION_SRAM);
		return NVML_SUCCESS;
	}
	int retire = id == NVML_FI_DEV_RETIRED_SBE || id == NVML_FI_DEV_RETIRED_DBE || id == NVML_FI_DEV_RETIRED_PENDING ||
		     id == NVML_FI_DEV_RETIRED_PENDING_SBE || id == NVML_FI_DEV_RETIRED_PENDING_DBE;
	int remap = id >= NVML_FI_DEV_REMAPPED_COR && id <= NVML_FI_DEV_REMAPPED_FAILURE;
	if (!retire && !remap)
		return NVML_ERROR_NOT_SUPPORTED;
	if ((retire && s->retired_pages != 1) || (remap && (s->remapped_rows != 1 || nvmock_mig_instances(d))))
		return NVML_ERROR_NOT_SUPPORTED;
	struct live_fx none = {0};
	const struct live_fx *fx = &none;
	LIVE(d);
	if (live_)
		fx = &fx_;
	unsigned long long n = 0;
	switch (id) {
	// Pages retire for double-bit errors only (no SBE page is modelled),
	// pending until the next reset, as GetRetiredPagesPendingStatus has it
	// (XID 63 records one with no new error).
	case NVML_FI_DEV_RETIRED_DBE: n = fx->dbe; break;
	case NVML_FI_DEV_RETIRED_PENDING:
	case NVML_FI_DEV_RETIRED_PENDING_DBE: n = fx->remap_pending != 0; break;
	case NVML_FI_DEV_REMAPPED_UNC: n = fx->dbe; break;
	case NVML_FI_DEV_REMAPPED_PENDING: n = fx->remap_pending != 0; break;
	case NVML_FI_DEV_REMAPPED_FAILURE: n = fx->remap_failed != 0; break;
	}
	if (remap) {
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		v->value.uiVal = n > UINT_MAX ? UINT_MAX : (unsigned)n;
	} else {
		v->value.ullVal = n;
	}
	return NVML_SUCCESS;
}

// c2c_field answers the NVLink-C2C fields (nvidia-smi c2c -s, NCCL's
// GPU-CPU bandwidth): the count, and per link (scopeId) its status and
// bandwidth in MB/s; every link of the profile's is active.
static nvmlReturn_t c2c_field(const struct snap_device *s, nvmlFieldValue_t *v)
{
	if (s->c2c_mode != 1 || s->c2c_links == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (v->fieldId == NVML_FI_DEV_C2C_LINK_COUNT) {
		v->value.uiVal = s->c2c_links;
		return NVML_SUCCESS;
	}
	if (v->scopeId >= s->c2c_links)
		return NVML_ERROR_INVALID_ARGUMENT;
	v->value.uiVal = v->fieldId == NVML_FI_DEV_C2C_LINK_GET_STATUS ? 1 : s->c2c_link_mbps;
	return NVML_SUCCESS;
}

// clock_event_field answers the clock event reason counters, in ns. nvml.h
// makes them the violation times by other names (the SW power cap's is the
// power policy's field, the SW thermal slowdown's the thermal policy's),
// which CUDA 13 clients read instead of nvmlDeviceGetViolationStatus; R575
// added the SW thermal slowdown's and the two hardware slowdowns' fields.
// The thermal fault is both thermal slowdowns, as its event reasons are.
static nvmlReturn_t clock_event_field(const struct nvmock_dev *d, nvmlFieldValue_t *v)
{
	unsigned id = v->fieldId, brake = id == NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN;
	nvmlPerfPolicyType_t policy;
	if (id >= NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN) {
		if (nvmock_driver_branch() < 575)
			return NVML_ERROR_NOT_SUPPORTED;
		policy = NVML_PERF_POLICY_THERMAL;
	} else if (id == NVML_FI_DEV_PERF_POLICY_TOTAL_APP_CLOCKS) {
		policy = NVML_PERF_POLICY_TOTAL_APP_CLOCKS;
	} else if (id == NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS) {
		policy = NVML_PERF_POLICY_TOTAL_BASE_CLOCKS;
	} else {
		policy = (nvmlPerfPolicyType_t)(id - NVML_FI_DEV_PERF_POLICY_POWER); // 74..79: POWER..RELIABILITY
	}
	v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
	v->value.ullVal = 0;
	LIVE(d);
	if (live_) {
		// As nvmlDeviceGetViolationStatus: the counts run on to the clock.
		uint64_t now = nvmock_live_now();
		v->value.ullVal = brake ? nvmock_live_slowdown(d, &g_, LIVE_FAULT_POWER_BRAKE, now)
					: nvmock_live_violation(d, &g_, policy, now);
	}
	return NVML_SUCCESS;
}

static nvmlReturn_t field(const struct nvmock_dev *d, nvmlFieldValue_t *v)
{
	const struct snap_device *s = d->s;
	unsigned id = v->fieldId;
	if (id <= NVML_FI_DEV_ECC_DBE_AGG_TOTAL || (id >= NVML_FI_DEV_RETIRED_SBE && id <= NVML_FI_DEV_RETIRED_PENDING) ||
	    id == NVML_FI_DEV_RETIRED_PENDING_SBE || id == NVML_FI_DEV_RETIRED_PENDING_DBE ||
	    (id >= NVML_FI_DEV_REMAPPED_COR && id <= NVML_FI_DEV_REMAPPED_FAILURE))
		return memory_field(d, id, v);
	v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
	if (id == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) {
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
		return nvmock_device_energy(d, &v->value.ullVal);
	}
	if (id == NVML_FI_DEV_MEMORY_TEMP) {
		if (s->temp_memory == NA32)
			return NVML_ERROR_NOT_SUPPORTED;
		v->value.uiVal = s->temp_memory;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_RESET_STATUS || id == NVML_FI_DEV_DRAIN_AND_RESET_STATUS) {
		// Deprecated for the GPU recovery action from driver 570 on (the
		// A100 capture's 570 prints so); before, no reset is needed.
		if (nvmock_driver_branch() >= 570)
			return NVML_ERROR_DEPRECATED;
		v->value.uiVal = 0;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
		// From driver 570 on, where it replaces the reset status (the
		// captures' "GPU Recovery Action: None").
		if (nvmock_driver_branch() < 570)
			return NVML_ERROR_NOT_SUPPORTED;
		LIVE(d);
		v->value.uiVal = live_ ? fx_.recovery : NVML_GPU_RECOVERY_ACTION_NONE;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER || id == NVML_FI_DEV_PCIE_REPLAY_COUNTER) {
		v->value.uiVal = 0;
		return NVML_SUCCESS;
	}
	if (id >= NVML_FI_DEV_POWER_AVERAGE && id <= NVML_FI_DEV_POWER_REQUESTED_LIMIT)
		return power_field(d, v);
	if ((id >= NVML_FI_DEV_PERF_POLICY_POWER && id <= NVML_FI_DEV_PERF_POLICY_TOTAL_BASE_CLOCKS) ||
	    (id >= NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN &&
	     id <= NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN))
		return clock_event_field(d, v);
	if (id >= NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT && id <= NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT) {
		unsigned k = id - NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT;
		if (!(s->tlimit_offset_mask >> k & 1))
			return NVML_ERROR_NOT_SUPPORTED;
		v->valueType = NVML_VALUE_TYPE_SIGNED_INT;
		v->value.siVal = (int)s->tlimit_offset[k];
		return NVML_SUCCESS;
	}
	if (id >= NVML_FI_DEV_C2C_LINK_COUNT && id <= NVML_FI_DEV_C2C_LINK_GET_MAX_BW)
		return c2c_field(s, v);
	if (s->nvlink_count == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	if (id == NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT) {
		// nvidia-smi topo -m reads NV# for switch-connected pairs from
		// this: the links up, so a link down shows as NV11 on an A100.
		unsigned up = 0;
		for (unsigned l = 0; s->nvlink_remote == NVML_NVLINK_DEVICE_TYPE_SWITCH && l < s->nvlink_count; l++)
			up += link_active(d, l);
		v->value.uiVal = up;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_NVLINK_LINK_COUNT) {
		v->value.uiVal = s->nvlink_count;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON ||
	    (id >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L0 && id <= NVML_FI_DEV_NVLINK_SPEED_MBPS_L5) ||
	    (id >= NVML_FI_DEV_NVLINK_SPEED_MBPS_L6 && id <= NVML_FI_DEV_NVLINK_SPEED_MBPS_L11) ||
	    id == NVML_FI_DEV_NVLINK_GET_SPEED) {
		v->value.uiVal = s->nvlink_speed_mbps;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_NVLINK_GET_STATE) {
		// nvidia-smi nvlink -s reads the state from this.
		if (v->scopeId >= s->nvlink_count)
			return NVML_ERROR_INVALID_ARGUMENT; // as nvmlDeviceGetNvLinkState
		v->value.uiVal = link_active(d, v->scopeId) ? NVML_NVLINK_STATE_ACTIVE : NVML_NVLINK_STATE_INACTIVE;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_NVLINK_REMOTE_NVLINK_ID) {
		// Each GPU link lands on the peer's (or switch port's) link of the same number.
		if (v->scopeId >= s->nvlink_count)
			return NVML_ERROR_NOT_SUPPORTED;
		v->value.uiVal = v->scopeId;
		return NVML_SUCCESS;
	}
	if (id >= NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX && id <= NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX) {
		// KiB moved since the driver loaded (nvlink -gt): no traffic is
		// modelled, so an idle link's count. The legacy utilization
		// counters (nvlink -g) are deprecated for these and stay N/A.
		if (v->scopeId >= s->nvlink_count)
			return NVML_ERROR_NOT_SUPPORTED;
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
		v->value.ullVal = 0;
		return NVML_SUCCESS;
	}
	if (id == NVML_FI_DEV_NVLINK_GET_VERSION) {
		v->value.uiVal = s->nvlink_version;
		return NVML_SUCCESS;
	}
	// A link's error counts (nvlink -e): the data-link layer's replay,
	// recovery and CRC counters before Blackwell (nvml.h: not on Blackwell
	// and later, which it sends to the link recovery counts). Those are
	// answered from Blackwell on only: whether earlier GPUs have them is
	// not known. No error is modelled: 0, as the getter gives.
	int blackwell = s->architecture >= NVML_DEVICE_ARCH_BLACKWELL && s->architecture != NVML_DEVICE_ARCH_UNKNOWN;
	if ((id >= NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY && id <= NVML_FI_DEV_NVLINK_ERROR_DL_CRC && !blackwell) ||
	    (id >= NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS &&
	     id <= NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS && blackwell)) {
		if (v->scopeId >= s->nvlink_count)
			return NVML_ERROR_INVALID_ARGUMENT;
		v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
		v->value.ullVal = 0;
		return NVML_SUCCESS;
	}
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
	DEV(device, d);
	if (values == NULL || valuesCount < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct timeval tv;
	gettimeofday(&tv, NULL);
	for (int i = 0; i < valuesCount; i++) {
		values[i].timestamp = (long long)tv.tv_sec * 1000000 + tv.tv_usec;
		values[i].latencyUsec = 0;
		values[i].nvmlReturn = field(d, &values[i]);
		if (values[i].nvmlReturn == NVML_ERROR_NOT_SUPPORTED && nvmock.trace)
			nvmock_warn("nvmlDeviceGetFieldValues: field %u (scope %u) not supported", values[i].fieldId,
				    values[i].scopeId);
	}
	return NVML_SUCCESS;
}

static void fabric_fill(const struct snap_device *s, unsigned char uuid[16], nvmlReturn_t *status, unsigned *clique,
			nvmlGpuFabricState_t *state)
{
	memcpy(uuid, s->fabric_cluster_uuid, 16);
	*status = (nvmlReturn_t)s->fabric_status;
	*clique = s->fabric_clique;
	*state = (nvmlGpuFabricState_t)s->fabric_state;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo)
{
	DEV(device, d);
	OUT(gpuFabricInfo);
	if (d->s->fabric_state == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	fabric_fill(d->s, gpuFabricInfo->clusterUuid, &gpuFabricInfo->status, &gpuFabricInfo->cliqueId,
		    &gpuFabricInfo->state);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo)
{
	DEV(device, d);
	OUT(gpuFabricInfo);
	// v2 and v3 share their leading fields; v3 adds the health summary.
	nvmlGpuFabricInfo_v3_t *v = (nvmlGpuFabricInfo_v3_t *)gpuFabricInfo;
	if (v->version != nvmlGpuFabricInfo_v2 && v->version != nvmlGpuFabricInfo_v3)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->s->fabric_state == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	fabric_fill(d->s, v->clusterUuid, &v->status, &v->cliqueId, &v->state);
	v->healthMask = d->s->fabric_health_mask;
	if (v->version == nvmlGpuFabricInfo_v3)
		v->healthSummary = (unsigned char)d->s->fabric_health_summary;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *c2cModeInfo)
{
	DEV(device, d);
	OUT(c2cModeInfo);
	return nvmock_u32(d->s->c2c_mode, &c2cModeInfo->isC2cEnabled);
}
