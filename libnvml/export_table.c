// nvmlInternalGetExportTable: the private table nvidia-smi asks for right
// after init (id 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4); without it,
// nvidia-smi quits with "Mismatch in versions".
//
// The table starts with its size in bytes, then function pointers. Every
// call site in nvidia-smi 470.256.02, 535.261.03, 550.163.01 and 555.58.02
// (90 to 114 each, checked mechanically from the disassembly) tests the table
// pointer, requires size > offset, and tests the entry for NULL: an entry
// past the size reads as "Uninitialized", a NULL entry as "N/A" or "Not
// Supported", what a real board without the feature prints.
//
// Each release gets a table as large as its largest size check, holding the
// entries whose arguments were read off their call sites in that binary and
// confirmed by running every view against it (docs/fidelity.md lists them).
// A release is recognised by its version string in the calling executable.
// Any other caller gets the generic table. Across the four releases a slot
// has only ever been added or retired, never given another meaning (every
// offset two releases read has the same arguments and context in both),
// but for pmon's samples (0x488). So the generic table is the union of the
// four but 0x488, larger than any of them: what
// an unknown release reads past them is NULL ("N/A"), never "Uninitialized".
// Every view of the four releases works on it too (tested by forcing it with
// NVMOCK_SMI_TABLE=generic). Should an unknown release read a slot with a
// new meaning, NVMOCK_SMI_TABLE=minimal serves the size-8 table instead.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvmock.h"

// PCIe levels as nvidia-smi indexes its names: PIX, PXB, PHB, NODE, SYS.
enum { SMI_PIX, SMI_PXB, SMI_PHB, SMI_NODE, SMI_SYS };

// place_of finds the GPU or NIC function at a bus id (any case, short or
// long domain).
static int place_of(const char *bus, struct pci_place *p)
{
	unsigned dom, b, dev, fn;
	if (!nvmock_ready() || !nvmock_parse_bus_id(bus, &dom, &b, &dev, &fn))
		return 0;
	uint32_t bdf = b << 8 | dev << 3 | fn;
	for (uint32_t i = 0; i < nvmock.hdr->device_count; i++) {
		const struct snap_device *s = &nvmock.node[i];
		if (fn == 0 && s->pci_domain == dom && s->pci_bus == b && s->pci_device == dev) {
			*p = nvmock_gpu_place(s);
			return 1;
		}
	}
	for (uint32_t i = 0; i < nvmock.hdr->nic_count; i++) {
		const struct snap_nic *n = &nvmock.nic[i];
		if (n->pci_domain == dom && n->pci_bdf == bdf) {
			*p = (struct pci_place){n->pci_domain, n->pci_bdf, n->pcie_root, n->pcie_switch_top, n->pcie_switch_leaf, n->numa_node};
			return 1;
		}
	}
	return 0;
}

// 0xb8 (all): the PCIe path between two bus ids, for every cell of topo -m
// (GPUs and NICs); any error fails the whole matrix.
static int smi_pcie_path(const char *bus_a, const char *bus_b, int *level)
{
	if (bus_a == NULL || bus_b == NULL || level == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	struct pci_place a, b;
	*level = SMI_SYS; // anything not in the node's tree is across the system
	if (place_of(bus_a, &a) && place_of(bus_b, &b)) {
		switch (nvmock_place_level(&a, &b)) {
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

// 0x60 (all): parse a bus id for -i; the device matches only with function 0.
static int smi_parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn)
{
	if (s == NULL || dom == NULL || bus == NULL || dev == NULL || fn == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_parse_bus_id(s, dom, bus, dev, fn) ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

// 0x258 (all): the PCI location of the GPU at an NVML index, for -i.
static int smi_index_location(unsigned index, unsigned *dom, unsigned *bus, unsigned *dev)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (index >= nvmock.ndevs || dom == NULL || bus == NULL || dev == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct snap_device *s = nvmock.devs[index].s;
	*dom = s->pci_domain, *bus = s->pci_bus, *dev = s->pci_device;
	return NVML_SUCCESS;
}

// 0x288 (all): the PCI location of the GPU at an NVML index as text, for
// messages about a GPU that has no handle ("Unable to determine the device
// handle for GPU0000:87:00.0: GPU is lost"); without it nvidia-smi names the
// index instead. Verified by running every release against a lost GPU.
static int smi_index_bus_id(unsigned index, char *buf, unsigned len)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (index >= nvmock.ndevs || buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct snap_device *s = nvmock.devs[index].s;
	int n = snprintf(buf, len, "%04X:%02X:%02X.0", s->pci_domain, s->pci_bus, s->pci_device);
	return n < 0 || (unsigned)n >= len ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
}

// 0x240 (all): whether the device takes part in monitoring (dmon, pmon) and
// clock control; every data-center board does.
static int smi_monitoring(nvmlDevice_t device, unsigned *supported)
{
	DEV(device, d);
	(void)d;
	OUT(supported);
	*supported = 1;
	return NVML_SUCCESS;
}

// 0x360 (all): the enforced power limit in mW (--query-gpu=enforced.power.limit).
static int smi_enforced_limit(nvmlDevice_t device, unsigned int *mw)
{
	DEV(device, d);
	return nvmock_u32(nvmock_enforced_limit(d), mw);
}

// nvlink_lanes is the lanes a link of the GPU's NVLink generation has
// each way: four at 50 Gb/s (NVLink 3), two at 100 or 200 Gb/s (4, 5).
static unsigned nvlink_lanes(const struct snap_device *s)
{
	if (s->nvlink_count == 0 || s->nvlink_version < NVML_NVLINK_VERSION_3_0)
		return 0;
	return s->nvlink_version >= NVML_NVLINK_VERSION_4_0 ? 2 : 4;
}

// 0x528 (all): private field values, laid out as nvmlFieldValue_t. Ids: 1
// relaxed ordering mode (N/A on every captured board), 2 a link's lanes
// (nvlink -ec, which 470 takes as 4), 3 sublink CRC errors (not modelled),
// 4 and 5 (555) the GPU reset status nvmlDeviceGetFieldValues gives as
// fields 226 and 227.
static int smi_fields(nvmlDevice_t device, unsigned count, nvmlFieldValue_t *values)
{
	DEV(device, d);
	if (values == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < count; i++) {
		nvmlFieldValue_t *v = &values[i];
		unsigned id = v->fieldId;
		if (id == 2 && nvlink_lanes(d->s) > 0 && v->scopeId < d->s->nvlink_count) {
			memset(&v->value, 0, sizeof v->value);
			v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
			v->value.uiVal = nvlink_lanes(d->s);
			v->nvmlReturn = NVML_SUCCESS;
		} else if (id == 4 || id == 5) {
			v->fieldId = id == 4 ? NVML_FI_DEV_RESET_STATUS : NVML_FI_DEV_DRAIN_AND_RESET_STATUS;
			nvmlDeviceGetFieldValues(nvmock_handle(d), 1, v);
			v->fieldId = id;
		} else {
			v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		}
	}
	return NVML_SUCCESS;
}

// 0x678 (470): the module id; 535 on ask nvmlDeviceGetModuleId.
static int smi_module_id(nvmlDevice_t device, unsigned *id)
{
	DEV(device, d);
	return nvmock_u32(d->s->module_id, id);
}

// 0x680 (all; read by 470's nvlink -e on Ampere and later): the per-lane ECC
// correction counts of one link (bit 31: overflow). No errors are modelled.
static int smi_lane_ecc(nvmlDevice_t device, unsigned link, unsigned counter, unsigned lanes,
			unsigned long long *out)
{
	(void)counter;
	DEV(device, d);
	OUT(out);
	if (link >= d->s->nvlink_count)
		return NVML_ERROR_NOT_SUPPORTED;
	memset(out, 0, (size_t)(lanes < 8 ? lanes : 8) * sizeof *out);
	return NVML_SUCCESS;
}

// 0x698 (470): the GSP firmware version into a 64-byte buffer
// (NVML_GSP_FIRMWARE_VERSION_BUF_SIZE); 535 on ask the public call.
static int smi_gsp_version(nvmlDevice_t device, char *buf)
{
	DEV(device, d);
	return nvmock_str(buf, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, d->s->gsp_firmware);
}

// 0x6a8, 0x6b0, 0x6b8 (535 on): compute, MPS and graphics processes, in
// 0x1020-byte records {pid, pad, used bytes, GI id, CI id, 8 bytes, name}.
// Without this, --query-compute-apps prints a row of N/A per GPU where an
// idle board prints none.
struct smi_process {
	uint32_t pid, pad;
	uint64_t used;
	uint32_t gi, ci;
	uint64_t unknown;
	char name[0x1000];
};
_Static_assert(sizeof(struct smi_process) == 0x1020, "nvidia-smi process record");

static int smi_processes_of(nvmlDevice_t device, unsigned mask, unsigned *count, struct smi_process *records)
{
	struct live_proc *p;
	nvmlReturn_t r = nvmock_procs_of(device, mask, count, records != NULL, &p);
	if (r != NVML_SUCCESS)
		return r;
	for (unsigned i = 0; i < *count; i++) {
		memset(&records[i], 0, sizeof records[i]);
		records[i].pid = p[i].pid;
		records[i].used = p[i].used_bytes;
		records[i].gi = nvmock_proc_gi(&p[i]);
		records[i].ci = nvmock_proc_ci(&p[i]);
		snprintf(records[i].name, sizeof records[i].name, "%.*s", (int)sizeof p[i].name, p[i].name);
	}
	free(p);
	return NVML_SUCCESS;
}

static int smi_compute(nvmlDevice_t device, unsigned *count, struct smi_process *records)
{
	return smi_processes_of(device, 1, count, records);
}

static int smi_mps(nvmlDevice_t device, unsigned *count, struct smi_process *records)
{
	return smi_processes_of(device, 0, count, records);
}

static int smi_graphics(nvmlDevice_t device, unsigned *count, struct smi_process *records)
{
	return smi_processes_of(device, 2, count, records);
}

// 0x6f8 (535 on): the NUMA nodes nearest the GPU (topo -C), the shape of
// nvmlDeviceGetMemoryAffinity.
static int smi_numa_nodes(nvmlDevice_t device, unsigned size, unsigned long *set, unsigned scope)
{
	return nvmlDeviceGetMemoryAffinity(device, size, set, (nvmlAffinityScope_t)scope);
}

// 0x788 (535): the GPU's own NUMA node (topo -m "GPU NUMA ID"); later
// releases ask nvmlDeviceGetNumaNodeId.
static int smi_numa_id(nvmlDevice_t device, unsigned *node)
{
	return nvmlDeviceGetNumaNodeId(device, node);
}

// 0x710 (535 on): the PCIe atomic ops masks {outbound, inbound}, 8 bytes.
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

// 0x730 (535 on): the maximum PCIe generation of the host's side.
static int smi_host_max_gen(nvmlDevice_t device, unsigned int *gen)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_host_max_gen, gen);
}

// 0x738 (535 on): the GPU (chip) part number, e.g. 2330-885-A1.
static int smi_part_number(nvmlDevice_t device, char *buf, unsigned int len)
{
	DEV(device, d);
	return nvmock_str(buf, len, d->s->gpu_part_number);
}

// 0x780 (535 on): the margin below T.Limit, or "no T.Limit sensor" as boards
// before Ada answer; nvidia-smi then shows absolute thresholds.
static int smi_tlimit(nvmlDevice_t device, unsigned int *temp)
{
	DEV(device, d);
	OUT(temp);
	int m;
	nvmlReturn_t r = nvmock_margin(d, &m);
	if (r == NVML_SUCCESS)
		*temp = (unsigned)m;
	return r;
}

// 0x790 (535 on): the addressing mode: None, HMM, ATS.
static int smi_addressing_mode(nvmlDevice_t device, unsigned int *mode)
{
	DEV(device, d);
	return nvmock_u32(d->s->addressing_mode, mode);
}

// 0x798 (535) and 0x7c8 (550, 555): whether sparse operation is enabled.
static int smi_sparse_mode(nvmlDevice_t device, unsigned int *enabled)
{
	DEV(device, d);
	return nvmock_u32(d->s->sparse_mode, enabled);
}

// 0x7d8 (555): nvidia-smi -pm sets the persistence mode here, not through
// nvmlDeviceSetPersistenceMode (found by filling the table with probes).
// The third argument points to an unsigned that nvidia-smi passes
// uninitialized and reads back after success: 0 prints "Legacy persistence
// mode", anything else "persistence mode via daemon". No daemon runs here.
static int smi_set_persistence(nvmlDevice_t device, unsigned int mode, unsigned int *via_daemon)
{
	int r = nvmlDeviceSetPersistenceMode(device, (nvmlEnableState_t)mode);
	if (r == NVML_SUCCESS && via_daemon)
		*via_daemon = 0;
	return r;
}

// 0xa0 (all four): whether the GPU is the primary (console) GPU, which
// nvidia-smi -r refuses to reset; without an answer it resets none ("could
// not be determined"). A data-centre board never is: the server's console
// is its BMC's.
static int smi_is_primary(nvmlDevice_t device, unsigned int *primary)
{
	DEV(device, d);
	(void)d;
	if (!primary)
		return NVML_ERROR_INVALID_ARGUMENT;
	*primary = 0;
	return NVML_SUCCESS;
}

// nvidia-smi -r (all four releases; read off 550's call sites, the others
// match): 0x548 the fabric state, asked once before any reset (a failure
// prints "fabric state could not be determined", then goes on); 0x5b0,
// 0x5b8 and 0x5c0 make, list and free the group of GPUs a reset takes
// with it (device_reset.c; the last argument 1 for a reset, 2 for another
// operation not modelled); 0x540 resets several GPUs at once, with a
// result each. A fabric state of 1 has nvidia-smi choose per GPU between
// 0x540 and a reset of one (0x68) by an RM control (0x100), 0x628 and the
// architecture; with any other state every GPU goes through 0x540. The
// mock answers 0, so 0x68, 0x100 and 0x628 stay unserved; which state a
// real node gives is not known.
static int smi_fabric_state(unsigned int *state)
{
	if (state == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*state = 0;
	return NVML_SUCCESS;
}

// 0x540: a GPU that cannot be reset fails the call with UNKNOWN and its own
// error in results, which nvidia-smi lists under "The following GPUs could
// not be reset" (exit 255); each GPU is reset on its own, so the others
// are. The last argument says whether NVSwitches were reset too (no mock
// node resets one).
static int smi_reset_gpus(unsigned int n, const nvmlDevice_t *devices, nvmlReturn_t *results, unsigned int *switches)
{
	if (devices == NULL || results == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (switches != NULL)
		*switches = 0;
	int ret = NVML_SUCCESS;
	for (unsigned i = 0; i < n; i++) {
		const struct nvmock_dev *d;
		results[i] = nvmock_dev_of(devices[i], &d);
		if (results[i] == NVML_SUCCESS)
			results[i] = nvmock_gpu_reset(d);
		if (results[i] != NVML_SUCCESS)
			ret = NVML_ERROR_UNKNOWN;
	}
	return ret;
}

// 0x208 (470): the architecture, as nvmlDeviceGetArchitecture gives it;
// nvidia-smi -r asks it of every GPU ("Cannot detect chip architecture").
static int smi_architecture(nvmlDevice_t device, unsigned int *arch)
{
	return nvmlDeviceGetArchitecture(device, (nvmlDeviceArchitecture_t *)arch);
}

// 0x600 and 0x608 (all four): nvidia-smi compute-policy. Set takes
// {type, value}, get fills {count, {type, value}[32]}; the one type is 0,
// the timeslice (0 default, 1 short, 2 medium, 3 long), which the DRA
// driver sets for its time-slicing config. Found by filling the table
// with probes; the layouts read off each release's call sites. The
// setting is node state, as the driver keeps it.
enum { SMI_POLICY_TIMESLICE = 0, SMI_TIMESLICE_LONG = 3, SMI_POLICIES = 32 };

struct smi_policy {
	uint32_t type, value;
};

struct smi_policies {
	uint32_t count;
	struct smi_policy policy[SMI_POLICIES];
};
_Static_assert(sizeof(struct smi_policies) == 0x104, "nvidia-smi compute policies");

static int smi_set_policy(nvmlDevice_t device, const struct smi_policy *p)
{
	DEV(device, d);
	if (p == NULL || p->type != SMI_POLICY_TIMESLICE || p->value > SMI_TIMESLICE_LONG)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_setting(d, LIVE_CFG_TIMESLICE, p->value);
}

static int smi_get_policies(nvmlDevice_t device, struct smi_policies *out)
{
	DEV(device, d);
	OUT(out);
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	memset(out, 0, sizeof *out);
	out->count = 1;
	out->policy[0].type = SMI_POLICY_TIMESLICE;
	out->policy[0].value = set != NULL && (set->cfg_set & LIVE_CFG_TIMESLICE) ? set->timeslice : 0;
	return NVML_SUCCESS;
}

// 0x450 (all four): the thermal violation time, as
// nvmlDeviceGetViolationStatus gives it: dmon -s v prints tviol 1 while
// it grows between samples (470, 535 and 555 also while the GPU is at its
// slowdown temperature).
static int smi_thermal_violation(nvmlDevice_t device, nvmlViolationTime_t *t)
{
	return nvmock_violation(device, NVML_PERF_POLICY_THERMAL, t);
}

// 0x488 (all four): pmon's samples, 100 ms each: the time, then per engine
// {util %, ?, pid, 68 bytes} (0x50 bytes); 470 and 535 have four engines
// (sm, mem, enc, dec), 550 and 555 six (jpg, ofa). Arguments: device, a
// time in µs (pmon's clock at its whole second, less its interval), an
// int pmon never reads, the count (in: 100), the samples. Read off each
// release's call site.
static int smi_pmon4(nvmlDevice_t device, unsigned long long since_us, unsigned *unread, unsigned *count, void *samples)
{
	(void)unread;
	return nvmock_pmon_samples(device, since_us, count, samples, 4);
}

static int smi_pmon6(nvmlDevice_t device, unsigned long long since_us, unsigned *unread, unsigned *count, void *samples)
{
	(void)unread;
	return nvmock_pmon_samples(device, since_us, count, samples, 6);
}

#define E(off, fn) [(off) / 8] = (uint64_t)(uintptr_t)(fn)

// Entries by the releases that read them (each table is as large as its
// release's largest size check, plus the entry).
#define ALL_FOUR                                                                                   \
	E(0x60, smi_parse_bus_id), E(0xa0, smi_is_primary), E(0xb8, smi_pcie_path), E(0x240, smi_monitoring),                \
		E(0x258, smi_index_location), E(0x288, smi_index_bus_id), E(0x360, smi_enforced_limit),                    \
		E(0x450, smi_thermal_violation), E(0x528, smi_fields),                                                     \
		E(0x540, smi_reset_gpus), E(0x548, smi_fabric_state), E(0x5b0, nvmock_reset_group),               \
		E(0x5b8, nvmock_reset_group_members), E(0x5c0, nvmock_reset_group_free), E(0x600, smi_set_policy), \
		E(0x608, smi_get_policies), E(0x680, smi_lane_ecc)
#define ONLY_470 E(0x208, smi_architecture), E(0x678, smi_module_id), E(0x698, smi_gsp_version)
#define SINCE_535                                                                                  \
	E(0x6a8, smi_compute), E(0x6b0, smi_mps), E(0x6b8, smi_graphics), E(0x6f8, smi_numa_nodes), \
		E(0x710, smi_atomics), E(0x730, smi_host_max_gen), E(0x738, smi_part_number),           \
		E(0x780, smi_tlimit), E(0x790, smi_addressing_mode)
#define ONLY_535 E(0x788, smi_numa_id), E(0x798, smi_sparse_mode)
#define SINCE_550 E(0x7c8, smi_sparse_mode)
#define ONLY_555 E(0x7d8, smi_set_persistence)

// pmon's samples grew two engines in 550: the one slot whose meaning
// changed, so the generic table leaves it out (pmon then prints "-").
#define PMON_4 E(0x488, smi_pmon4)
#define PMON_6 E(0x488, smi_pmon6)

static const uint64_t table_470[0x6a0 / 8] = {[0] = sizeof table_470, ALL_FOUR, ONLY_470, PMON_4};
static const uint64_t table_535[0x7a8 / 8] = {[0] = sizeof table_535, ALL_FOUR, SINCE_535, ONLY_535, PMON_4};
static const uint64_t table_550[0x7d8 / 8] = {[0] = sizeof table_550, ALL_FOUR, SINCE_535, SINCE_550, PMON_6};
static const uint64_t table_555[0x7e0 / 8] = {[0] = sizeof table_555, ALL_FOUR, SINCE_535, SINCE_550, ONLY_555, PMON_6};
static const uint64_t table_generic[0x800 / 8] = {
	[0] = sizeof table_generic, ALL_FOUR, ONLY_470, SINCE_535, ONLY_535, SINCE_550, ONLY_555,
};
static const uint64_t table_minimal[1] = {sizeof table_minimal};

static const struct {
	const char *version;
	const uint64_t *table;
} verified[] = {
	{"470.256.02", table_470},
	{"535.261.03", table_535},
	{"550.163.01", table_550},
	{"555.58.02", table_555},
};

static const unsigned char smi_table_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					       0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

// caller_table finds the verified release's version string in the calling
// executable (each carries only its own); anything else gets the generic
// table.
static const uint64_t *caller_table(void)
{
	const char *force = getenv("NVMOCK_SMI_TABLE");
	if (force != NULL && strcmp(force, "generic") == 0)
		return table_generic;
	if (force != NULL && strcmp(force, "minimal") == 0)
		return table_minimal;
	const uint64_t *t = table_generic;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return t;
	struct stat st;
	if (fstat(fd, &st) == 0 && st.st_size > 0) {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m != MAP_FAILED) {
			for (size_t i = 0; i < sizeof verified / sizeof verified[0]; i++) {
				const char *v = verified[i].version;
				if (memmem(m, (size_t)st.st_size, v, strlen(v) + 1) != NULL) {
					t = verified[i].table;
					break;
				}
			}
			munmap(m, (size_t)st.st_size);
		}
	}
	close(fd);
	return t;
}

NVML_API nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id)
{
	// nvidia-smi asks again from several helpers; the executable does not
	// change, so the answer is decided once (a racing first call decides
	// the same).
	static const uint64_t *chosen;
	if (table == NULL || id == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memcmp(id, smi_table_id, sizeof smi_table_id) != 0)
		return NVML_ERROR_NOT_SUPPORTED;
	const uint64_t *t = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
	if (t == NULL) {
		t = caller_table();
		__atomic_store_n(&chosen, t, __ATOMIC_RELEASE);
	}
	*table = t;
	return NVML_SUCCESS;
}
