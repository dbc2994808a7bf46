// nvmlInternalGetExportTable: the private table nvidia-smi 535 asks for
// right after init (id 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4); without it,
// nvidia-smi quits with "Mismatch in versions".
//
// The table starts with its size in bytes; nvidia-smi treats an entry past
// the size, or a NULL entry, as absent. A table of size 8 makes every entry
// absent, which every view accepts, but some views then differ from a real
// board: the multi-GPU `topo -m` matrix fails without entry 0xb8 (the PCIe
// path between two bus ids); --query-gpu=enforced.power.limit needs 0x360;
// `-q` needs 0x780 (T.Limit temperature: without
// it thresholds show as N/A), 0x710 (PCIe atomics), 0x730 (host's max PCIe
// generation), 0x738 (GPU part number), 0x790 (addressing mode) and 0x798
// (sparse operation mode). Each entry's arguments were read
// off its call site in the disassembly.
// That table is served only to an executable carrying "535.261.03", the
// nvidia-smi it was verified against: every call site below its size checks
// for NULL (disassembly), and the tests run every view. A slot whose meaning
// differs in another version would crash that nvidia-smi.
#define _GNU_SOURCE
#include <fcntl.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvmock.h"

// PCIe levels as nvidia-smi 535 indexes its names: PIX, PXB, PHB, NODE, SYS.
enum { SMI_PIX, SMI_PXB, SMI_PHB, SMI_NODE, SMI_SYS };

static const struct snap_device *by_bus_id(const char *bus)
{
	if (!nvmock_ready())
		return NULL;
	for (uint32_t i = 0; i < nvmock.hdr->device_count; i++)
		if (strcasecmp(nvmock.node[i].pci_bus_id, bus) == 0)
			return &nvmock.node[i];
	return NULL;
}

static int smi_pcie_path(const char *bus_a, const char *bus_b, int *level)
{
	if (bus_a == NULL || bus_b == NULL || level == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct snap_device *a = by_bus_id(bus_a), *b = by_bus_id(bus_b);
	*level = SMI_SYS; // anything not ours, such as a NIC, is across the system
	if (a != NULL && b != NULL) {
		switch (nvmock_ancestor(a, b)) {
		case NVML_TOPOLOGY_INTERNAL:
		case NVML_TOPOLOGY_SINGLE: *level = SMI_PIX; break;
		case NVML_TOPOLOGY_MULTIPLE: *level = SMI_PXB; break;
		case NVML_TOPOLOGY_HOSTBRIDGE: *level = SMI_PHB; break;
		case NVML_TOPOLOGY_NODE: *level = SMI_NODE; break;
		default: *level = SMI_SYS; break;
		}
	}
	return NVML_SUCCESS;
}

static const uint64_t table_min[1] = {sizeof table_min};
// smi_tlimit gives the GPU's margin below T.Limit, or "no T.Limit sensor"
// as boards before Ada do; nvidia-smi then shows absolute thresholds.
static int smi_tlimit(nvmlDevice_t device, unsigned int *temp)
{
	DEV(device, d);
	return nvmock_u32(d->s->temp_tlimit, temp);
}

// smi_part_number gives the GPU (chip) part number, e.g. 2330-885-A1.
static int smi_part_number(nvmlDevice_t device, char *buf, unsigned int len)
{
	DEV(device, d);
	return nvmock_str(buf, len, d->s->gpu_part_number);
}

// smi_addressing_mode gives an nvmlDeviceAddressingModeType_t: None, HMM, ATS.
static int smi_addressing_mode(nvmlDevice_t device, unsigned int *mode)
{
	DEV(device, d);
	return nvmock_u32(d->s->addressing_mode, mode);
}

// smi_sparse_mode says whether sparse operation is enabled.
static int smi_sparse_mode(nvmlDevice_t device, unsigned int *enabled)
{
	DEV(device, d);
	return nvmock_u32(d->s->sparse_mode, enabled);
}

// smi_host_max_gen gives the maximum PCIe generation of the host's side.
static int smi_host_max_gen(nvmlDevice_t device, unsigned int *gen)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_host_max_gen, gen);
}

// smi_atomics gives the PCIe atomic ops masks: {outbound, inbound}. The
// caller's struct may be larger; only these two words are written.
static int smi_atomics(nvmlDevice_t device, unsigned int caps[2])
{
	DEV(device, d);
	OUT(caps);
	if (d->s->pcie_atomics_out == NA32 && d->s->pcie_atomics_in == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	caps[0] = d->s->pcie_atomics_out == NA32 ? 0 : d->s->pcie_atomics_out;
	caps[1] = d->s->pcie_atomics_in == NA32 ? 0 : d->s->pcie_atomics_in;
	return NVML_SUCCESS;
}

// smi_enforced_limit gives the enforced power limit in mW
// (--query-gpu=enforced.power.limit).
static int smi_enforced_limit(nvmlDevice_t device, unsigned int *mw)
{
	DEV(device, d);
	return nvmock_u32(d->s->power_enforced_mw, mw);
}

static const uint64_t table_smi535[0x7a0 / 8] = {
	[0] = sizeof table_smi535,
	[0xb8 / 8] = (uint64_t)(uintptr_t)smi_pcie_path,
	[0x360 / 8] = (uint64_t)(uintptr_t)smi_enforced_limit,
	[0x710 / 8] = (uint64_t)(uintptr_t)smi_atomics,
	[0x730 / 8] = (uint64_t)(uintptr_t)smi_host_max_gen,
	[0x738 / 8] = (uint64_t)(uintptr_t)smi_part_number,
	[0x780 / 8] = (uint64_t)(uintptr_t)smi_tlimit,
	[0x790 / 8] = (uint64_t)(uintptr_t)smi_addressing_mode,
	[0x798 / 8] = (uint64_t)(uintptr_t)smi_sparse_mode,
};

static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					       0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

// is_verified_smi looks for the verified version in the calling executable.
static int is_verified_smi(void)
{
	static const char want[] = "535.261.03";
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	int found = 0;
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED) {
			found = memmem(m, (size_t)st.st_size, want, sizeof want) != NULL;
			munmap(m, (size_t)st.st_size);
		}
	}
	close(fd);
	return found;
}

NVML_API nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id)
{
	if (table == NULL || id == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memcmp(id, smi_table_id, sizeof smi_table_id) != 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*table = is_verified_smi() ? (const void *)table_smi535 : (const void *)table_min;
	return NVML_SUCCESS;
}
