// GPU reset (nvidia-smi -r, --gpu-reset), which nvidia-smi asks of the
// private table (export_table.c): the reset itself and the group of GPUs
// that must be reset together. NVML has no public reset call.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mig.h"
#include "nvmock.h"

// merge_settled folds the node-wide faults a reset settled into one slot
// each of a kind and XID, adding their counts (to the aggregate counts
// only, now): a GPU that is reset after every error would fill its 8
// slots otherwise.
static void merge_settled(struct live_gpu *g)
{
	unsigned n = g->faults < STATE_FAULTS ? g->faults : STATE_FAULTS;
	for (unsigned i = 0; i < n; i++) {
		uint32_t k = g->fault_kind[i];
		if ((k != LIVE_FAULT_ECC && k != LIVE_FAULT_SBE && k != LIVE_FAULT_XID) || g->fault_pid[i] != 0 ||
		    g->fault_trigger[i] != LIVE_TRIGGER_AT || g->fault_param[i] > g->reset_ns)
			continue;
		for (unsigned j = i + 1; j < n;) {
			if (g->fault_kind[j] != k || g->fault_xid[j] != g->fault_xid[i] || g->fault_pid[j] != 0 ||
			    g->fault_trigger[j] != LIVE_TRIGGER_AT || g->fault_param[j] > g->reset_ns) {
				j++;
				continue;
			}
			uint64_t c = (uint64_t)g->fault_count[i] + g->fault_count[j];
			g->fault_count[i] = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
			for (unsigned m = j; m + 1 < n; m++) {
				g->fault_kind[m] = g->fault_kind[m + 1];
				g->fault_trigger[m] = g->fault_trigger[m + 1];
				g->fault_xid[m] = g->fault_xid[m + 1];
				g->fault_pid[m] = g->fault_pid[m + 1];
				g->fault_count[m] = g->fault_count[m + 1];
				g->fault_id[m] = g->fault_id[m + 1];
				g->fault_param[m] = g->fault_param[m + 1];
			}
			n--;
			g->fault_kind[n] = g->fault_trigger[n] = g->fault_xid[n] = g->fault_pid[n] = 0;
			g->fault_count[n] = g->fault_id[n] = 0;
			g->fault_param[n] = 0;
		}
	}
	g->faults = n;
}

// reset ends what the driver ends at a reset: the volatile ECC counts start
// again from zero, the rows of earlier uncorrectable errors are remapped
// (pages retired), and a pending MIG mode takes effect. The driver refuses
// a GPU that a process holds, or one with MIG instances, as "In use by
// another client", and one in persistence mode: it counts as a client
// (NVSentinel's remediation failed so until it turned persistence off, and
// nvml.h answers IN_USE for it when a drain state changes). Settings made
// with nvidia-smi (clocks, power limit) are left as they are: whether a
// reset ends them was not found.
static nvmlReturn_t reset(const struct nvmock_dev *d, struct live_gpu *g, const struct live_proc *procs, void *arg)
{
	(void)arg;
	if (nvmock_persistence(d, g) == NVML_FEATURE_ENABLED || nvmock_live_procs_in(procs, d->node_index, LIVE_ANY, LIVE_ANY) > 0)
		return NVML_ERROR_IN_USE;
	for (unsigned i = 0; i < STATE_GIS; i++)
		if (g->gi_profile[i] != 0)
			return NVML_ERROR_IN_USE;
	if (g->mig_set) {
		g->mig_current = g->mig_pending;
	} else if (d->s->mig_current != NA32 && d->s->mig_pending != d->s->mig_current) {
		g->mig_set = 1; // the profile's own pending mode
		g->mig_current = g->mig_pending = d->s->mig_pending;
	}
	// Every fault up to now comes before the reset, by time and, at its
	// very time, by id (fault ids are the generation they were added at).
	g->reset_ns = nvmock_live_now();
	g->reset_fault_id = (uint32_t)__atomic_load_n(&nvmock.live->generation, __ATOMIC_RELAXED);
	merge_settled(g);
	return NVML_SUCCESS;
}

nvmlReturn_t nvmock_gpu_reset(const struct nvmock_dev *d)
{
	// A GPU off the bus does not come back from a reset (XID 79 needs a
	// reboot); DEV's lookup answers GPU_IS_LOST for it before this.
	return nvmock_live_update(d, reset, NULL);
}

// A reset group names the GPUs a reset takes with it. nvidia-smi's manual
// (-r): from Ampere on, GPUs with NVLink are reset individually (Ampere
// NVSwitch systems through Fabric Manager, which a DGX A100 runs; Hopper
// and later without it); before Ampere, a GPU's NVLink peers go with it.
// No built-in board has NVLink before Ampere: each GPU is its own group.
struct reset_group {
	unsigned n;
	char bus[][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

enum { GROUP_RESET = 1 };

// A GPU named twice is one member: nvidia-smi lists the members into as
// many buffers as the node has GPUs.
int nvmock_reset_group(void **group, const nvmlDevice_t *devices, unsigned n, unsigned kind)
{
	if (group != NULL)
		*group = NULL;
	if (group == NULL || (devices == NULL && n > 0))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (kind != GROUP_RESET)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned max = n < nvmock.ndevs ? n : nvmock.ndevs;
	struct reset_group *g = calloc(1, sizeof *g + (size_t)max * sizeof g->bus[0]);
	if (g == NULL)
		return NVML_ERROR_MEMORY;
	for (unsigned i = 0; i < n; i++) {
		const struct nvmock_dev *d = NULL;
		nvmlReturn_t r = nvmock_dev_of(devices[i], &d);
		if (r != NVML_SUCCESS) {
			free(g);
			return r;
		}
		unsigned k = 0;
		while (k < g->n && strcmp(g->bus[k], d->s->pci_bus_id) != 0)
			k++;
		if (k == g->n && g->n < max)
			snprintf(g->bus[g->n++], sizeof g->bus[0], "%s", d->s->pci_bus_id);
	}
	*group = g;
	return NVML_SUCCESS;
}

// nvidia-smi hands as many buffers as the node has GPUs, each of 32 bytes.
int nvmock_reset_group_members(void *group, char **bus, unsigned *n)
{
	struct reset_group *g = group;
	if (g == NULL || bus == NULL || n == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned i = 0; i < g->n; i++) {
		if (bus[i] == NULL)
			return NVML_ERROR_INVALID_ARGUMENT;
		snprintf(bus[i], 32, "%s", g->bus[i]);
	}
	*n = g->n;
	return NVML_SUCCESS;
}

int nvmock_reset_group_free(void *group)
{
	free(group);
	return NVML_SUCCESS;
}
