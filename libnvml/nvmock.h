// Internal header of the mock libnvidia-ml: the state every family reads.
#ifndef NVMOCK_H
#define NVMOCK_H

#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot_gen.h"
#include "state_gen.h"

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
	const struct snap_nic *nic;     // the node's NIC functions
	const uint32_t *pool;
	struct nvmock_dev *devs; // visible devices
	unsigned ndevs;
	// The node's GPUs (by node index) this process may see (device
	// nodes, or NVMOCK_VISIBLE_DEVICES): visible, or left out as drained.
	uint64_t reach;
	int trace;
	int pid; // getpid(), kept current across fork
	// The live state (live.c); NULL: static readings.
	const struct live_header *live;
	const struct live_gpu *live_gpus;
	const struct live_event *live_events;
	const struct live_proc *live_procs;
	// Where MIG capability nodes decide which MIG devices this process
	// sees (mig_device.c); "": all of them.
	char caps_root[4096];
	// Whether this process holds the MIG monitor capability, as a host
	// does: it sees every MIG device and a MIG-mode GPU's aggregates.
	int mig_monitor;
	// Whether it holds the MIG config capability (nvidia-cap1), which the
	// driver asks of whoever makes or destroys GPU and compute instances.
	int mig_config;
};

// What the active faults do to a GPU.
struct live_fx {
	int lost, thermal, brake, remap_pending, remap_failed;
	uint32_t links_down; // bit per NVLink
	// Errors added to the counters, and of them those since the GPU's
	// last reset: 64 bits, as NVML's counters are, since each of the
	// faults' 32-bit counts may be full (review: the sum wrapped).
	uint64_t dbe, sbe, dbe_vol, sbe_vol;
	uint32_t recovery;         // nvmlDeviceGpuRecoveryAction_t
};

void nvmock_live_map(const char *snapshot);
const char *nvmock_live_path(void);
const char *nvmock_live_refused(void);
unsigned nvmock_live_refused_gpus(void);
size_t nvmock_live_size(void);
int nvmock_live_copy(void *dst, const void *src, size_t n);
uint64_t nvmock_live_now(void);
uint64_t nvmock_live_now_for(const struct live_gpu *g);
int nvmock_live_read(unsigned node, struct live_gpu *g);
int nvmock_live_active(unsigned node, const struct live_gpu *g, unsigned i, uint64_t now, uint64_t *since);
void nvmock_live_fx(unsigned node, const struct live_gpu *g, uint64_t now, struct live_fx *fx);
int nvmock_before_reset(const struct live_gpu *g, unsigned i, uint64_t since);
int nvmock_live_lost(unsigned node);
struct nvmock_dev;
nvmlReturn_t nvmock_live_check(const struct nvmock_dev *d);
unsigned nvmock_live_util(unsigned node, const struct live_gpu *g, unsigned engine, uint64_t t);
uint32_t nvmock_live_power(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx, uint64_t t);
uint32_t nvmock_live_temp(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx, uint64_t t);
uint32_t nvmock_slowdown_c(const struct snap_device *s);
nvmlReturn_t nvmock_margin(const struct nvmock_dev *d, int *margin);
unsigned long long nvmock_live_slowdown(const struct nvmock_dev *d, const struct live_gpu *g, unsigned kind, uint64_t t);
unsigned long long nvmock_live_violation(const struct nvmock_dev *d, const struct live_gpu *g, nvmlPerfPolicyType_t policy,
					 uint64_t t);
unsigned long long nvmock_live_energy(const struct nvmock_dev *d, const struct live_gpu *g, uint64_t t);
uint32_t nvmock_live_clock(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx,
			   nvmlClockType_t type, uint64_t t);
unsigned long long nvmock_live_reasons(const struct nvmock_dev *d, const struct live_gpu *g, const struct live_fx *fx,
				       uint64_t t);
uint32_t nvmock_power_limit(const struct snap_device *s, const struct live_gpu *g);
void nvmock_live_cut(const struct nvmock_dev *d, struct live_gpu *g, uint64_t now);
const struct live_gpu *nvmock_settings(const struct nvmock_dev *d, struct live_gpu *g);
uint32_t nvmock_persistence(const struct nvmock_dev *d, const struct live_gpu *g);
nvmlReturn_t nvmock_gpu_reset(const struct nvmock_dev *d);
int nvmock_reset_group(void **group, const nvmlDevice_t *devices, unsigned n, unsigned kind);
int nvmock_reset_group_members(void *group, char **bus, unsigned *n);
int nvmock_reset_group_free(void *group);
int nvmock_drained(unsigned node);
nvmlReturn_t nvmock_violation(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType, nvmlViolationTime_t *violTime);
int nvmock_pmon_samples(nvmlDevice_t device, unsigned long long since_us, unsigned *count, void *buf, unsigned engines);
nvmlReturn_t nvmock_change_setting(const struct nvmock_dev *d, uint32_t bit, uint32_t value);
nvmlReturn_t nvmock_change_pair(const struct nvmock_dev *d, uint32_t bit, uint32_t a, uint32_t b);
nvmlReturn_t nvmock_reset_setting(const struct nvmock_dev *d, uint32_t bit);
uint32_t nvmock_gfx_step(const struct snap_device *s, uint32_t c);
uint32_t nvmock_locked_clock(const struct nvmock_dev *d, const struct live_gpu *g, nvmlClockType_t type, uint32_t c);
int nvmock_idle_held(const struct nvmock_dev *d, const struct live_gpu *g);
uint32_t nvmock_enforced_limit(const struct nvmock_dev *d);
uint32_t nvmock_requested_limit(const struct nvmock_dev *d);
#define LIVE_ANY 0xffffffffu
struct live_proc *nvmock_live_procs(unsigned node, unsigned mask, unsigned *n);
struct live_proc *nvmock_live_procs_on(unsigned node, unsigned gi, unsigned ci, unsigned mask, unsigned *n);
unsigned nvmock_live_procs_in(const struct live_proc *table, unsigned node, unsigned gi, unsigned ci);
unsigned long long nvmock_live_gi_memory(unsigned node, unsigned gi);
nvmlReturn_t nvmock_procs_of(nvmlDevice_t device, unsigned mask, unsigned *count, int has_buffer, struct live_proc **p);

// The GPU and compute instance ids of a process's MIG device; 0xffffffff
// for one on a whole GPU, as NVML gives them.
static inline unsigned nvmock_proc_gi(const struct live_proc *p)
{
	return p->mig_gi != 0 ? p->mig_gi - 1 : 0xffffffffu;
}
static inline unsigned nvmock_proc_ci(const struct live_proc *p)
{
	return p->mig_gi != 0 ? p->mig_ci : 0xffffffffu;
}
unsigned long long nvmock_live_proc_memory(unsigned node);
int nvmock_live_proc_name(unsigned pid, char *out, size_t len);

extern struct nvmock_state nvmock;

// A MIG device handle (mig_device.c): calls that are only for GPUs answer
// it NOT_SUPPORTED.
int nvmock_is_mig_handle(nvmlDevice_t h);
int nvmock_mig_instances(const struct nvmock_dev *d);
nvmlReturn_t nvmock_not_a_gpu(nvmlDevice_t h);
// nvmock_events_in_child frees event sets' spin flags a thread of the
// parent held at fork (events.c).
void nvmock_events_in_child(void);
void nvmock_mig_init(void);

// nvmock_relax eases a spin wait, on x86 and arm64 CI nodes alike.
static inline void nvmock_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static inline int nvmock_ready(void)
{
	return __atomic_load_n(&nvmock.ready, __ATOMIC_ACQUIRE);
}

// nvmock_dev_faults: a GPU with faults counts the call and may refuse it
// (live.c); a call on its MIG devices and instances is the GPU's too (a
// lost GPU's answered, before: review).
static inline nvmlReturn_t nvmock_dev_faults(const struct nvmock_dev *d)
{
	if (nvmock.live_gpus != NULL && __atomic_load_n(&nvmock.live_gpus[d->node_index].faults, __ATOMIC_RELAXED) != 0)
		return nvmock_live_check(d);
	return NVML_SUCCESS;
}

// nvmock_dev_of is the one handle validator: a handle is ours only if it
// points exactly at an entry of the visible-device table.
static inline nvmlReturn_t nvmock_dev_of(nvmlDevice_t h, const struct nvmock_dev **out)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	uintptr_t off = (uintptr_t)h.handle - (uintptr_t)nvmock.devs;
	if (off >= (uintptr_t)nvmock.ndevs * sizeof(struct nvmock_dev) || off % sizeof(struct nvmock_dev)) {
		*out = NULL;
		return nvmock_not_a_gpu(h);
	}
	*out = (const struct nvmock_dev *)h.handle;
	return nvmock_dev_faults(*out);
}

static inline nvmlDevice_t nvmock_handle(const struct nvmock_dev *d)
{
	nvmlDevice_t h = {(struct nvmlDevice_st *)d};
	return h;
}

// nvmock_mig_on says whether a GPU is in MIG mode now: the live state's
// mode once set, else the snapshot's. One relaxed load each: a getter's
// answer may lag a concurrent mode change by a call, as on a real node.
static inline int nvmock_mig_on(const struct nvmock_dev *d)
{
	if (d->s->mig_current == NA32)
		return 0;
	if (nvmock.live_gpus != NULL && d->node_index < STATE_GPUS &&
	    __atomic_load_n(&nvmock.live_gpus[d->node_index].mig_set, __ATOMIC_RELAXED))
		return __atomic_load_n(&nvmock.live_gpus[d->node_index].mig_current, __ATOMIC_RELAXED) == 1;
	return d->s->mig_current == 1;
}

// nvmock_mig_aggregate_denied: the memory, BAR1 and processes of a GPU
// in MIG mode, summed over its instances, are for a caller with the MIG
// monitor capability only (nvml.h: "only if the caller has appropriate
// privileges"); a container given MIG devices reads them through their
// handles.
static inline int nvmock_mig_aggregate_denied(const struct nvmock_dev *d)
{
	return !nvmock.mig_monitor && nvmock_mig_on(d);
}

// DEV declares d for handle h, returning the validator's error.
#define DEV(h, d)                                                \
	const struct nvmock_dev *d;                              \
	do {                                                     \
		nvmlReturn_t r_ = nvmock_dev_of((h), &d);        \
		if (r_ != NVML_SUCCESS)                          \
			return r_;                               \
	} while (0)

// LIVE reads device d's live state: live_ is 0 when its readings are the
// snapshot's; else g_ holds its record, fx_ what its faults do, now_ the time.
#define LIVE(d)                                                                    \
	struct live_gpu g_;                                                        \
	struct live_fx fx_;                                                        \
	uint64_t now_ = 0;                                                         \
	int live_ = nvmock_live_read((d)->node_index, &g_);                        \
	if (live_) {                                                               \
		now_ = g_.model ? nvmock_live_now() : nvmock_live_now_for(&g_);   \
		nvmock_live_fx((d)->node_index, &g_, now_, &fx_);                   \
	}

// SINCE returns nvmock_since's answer for a call that came with branch first.
#define SINCE(first)                                             \
	do {                                                     \
		nvmlReturn_t s_ = nvmock_since(first);           \
		if (s_ != NVML_SUCCESS)                          \
			return s_;                               \
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
// nvmock_driver_branch is the node's driver branch: 580 for 580.105.08.
// Some answers changed with a branch (MIG queries with MIG off in 550, MIG
// BAR1 in 580, the reset status field in 570).
int nvmock_driver_branch(void);
nvmlReturn_t nvmock_since(int first);
nvmlReturn_t nvmock_not_supported(const char *fn);
nvmlReturn_t nvmock_not_supported_dev(const char *fn, nvmlDevice_t h);
nvmlReturn_t nvmock_init(unsigned int flags);
nvmlReturn_t nvmock_load(void);
uint64_t nvmock_pdi(const char *uuid);
void nvmock_derive_identity(const char *profile, const char *seed, unsigned index,
			    const char *serial_prefix, char uuid[96], char serial[32]);
void nvmock_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// pci_place is where a GPU or NIC function sits in the node's PCI tree.
struct pci_place {
	uint32_t domain, bdf; // bus<<8 | device<<3 | function
	uint32_t root, top, leaf, numa;
};
// nvmock_place_level is where two functions' PCIe paths meet: their device
// (another function of it) or shared switch, else the host bridge, else
// the NUMA node within one PCI domain, else the system interconnect.
nvmlGpuTopologyLevel_t nvmock_place_level(const struct pci_place *a, const struct pci_place *b);
// nvmock_ancestor is nvmock_place_level of two GPUs.
nvmlGpuTopologyLevel_t nvmock_ancestor(const struct snap_device *a, const struct snap_device *b);
// nvmock_gpu_place is a GPU's place; a coherent board's GPU is in its own
// memory's NUMA node.
struct pci_place nvmock_gpu_place(const struct snap_device *s);
uint64_t nvmock_ecc_count(const struct snap_device *s, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
			  nvmlMemoryLocation_t loc);
void nvmock_pci_info(const struct snap_device *s, nvmlPciInfo_t *pci);
int nvmock_parse_bus_id(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn);
nvmlReturn_t nvmock_energy_mj(const struct snap_device *s, unsigned long long *mj);
int nvmock_boot_time_us(unsigned long long *us);
nvmlReturn_t nvmock_device_energy(const struct nvmock_dev *d, unsigned long long *mj);

#endif
