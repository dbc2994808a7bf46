// What a GPU is: names, ids, versions and PCI identity.
#include <stdio.h>
#include <string.h>

#include "mig.h"

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	MIGDEV(device, md)
		return nvmock_mig_get_name(&md, name, length);
	DEV(device, d);
	return nvmock_str(name, length, d->s->name);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	MIGDEV(device, md)
		return nvmock_mig_get_uuid(&md, uuid, length);
	DEV(device, d);
	return nvmock_str(uuid, length, d->uuid);
}

// The PDI call came with R580 (absent from R575's nvml.h); boards from
// Pascal on have one, and every captured board on R580 or later shows it.
NVML_API nvmlReturn_t nvmlDeviceGetPdi(nvmlDevice_t device, nvmlPdi_t *pdi)
{
	DEV(device, d);
	SINCE(580);
	OUT(pdi);
	if (pdi->version != nvmlPdi_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (d->s->architecture == NA32 || d->s->architecture < NVML_DEVICE_ARCH_PASCAL)
		return NVML_ERROR_NOT_SUPPORTED;
	pdi->value = nvmock_pdi(d->uuid);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
	DEV(device, d);
	return nvmock_str(serial, length, d->serial);
}

NVML_API nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
	DEV(device, d);
	return nvmock_str(partNumber, length, d->s->board_part_number);
}

NVML_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
	DEV(device, d);
	return nvmock_str(version, length, d->s->vbios_version);
}

NVML_API nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
	DEV(device, d);
	return nvmock_str(version, length, d->s->inforom_image);
}

NVML_API nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char *version,
						  unsigned int length)
{
	DEV(device, d);
	switch (object) {
	case NVML_INFOROM_OEM: return nvmock_str(version, length, d->s->inforom_oem);
	case NVML_INFOROM_ECC: return nvmock_str(version, length, d->s->inforom_ecc);
	case NVML_INFOROM_POWER: return nvmock_str(version, length, d->s->inforom_power);
	// The DRAM encryption object: no capture shows one (nvml.h: absent
	// objects are NOT_SUPPORTED; review).
	case NVML_INFOROM_DEN: return version == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_NOT_SUPPORTED;
	default: return NVML_ERROR_INVALID_ARGUMENT;
	}
}

NVML_API nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device)
{
	DEV(device, d);
	return d->s->inforom_image[0] ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

// The BBX (black box) object is flushed once in the mock's run: at driver
// load, which is the node's boot (as for the energy counter), one GPU after
// another, each taking its board's duration. Real boards flush their GPUs
// within seconds to minutes of each other, hours before the captures.
NVML_API nvmlReturn_t nvmlDeviceGetLastBBXFlushTime(nvmlDevice_t device, unsigned long long *timestamp,
						    unsigned long *durationUs)
{
	DEV(device, d);
	if (timestamp == NULL || durationUs == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	uint32_t us = d->s->inforom_bbx_flush_us;
	if (us == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned long long at;
	if (!nvmock_boot_time_us(&at))
		return NVML_ERROR_UNKNOWN;
	for (uint32_t i = 0; i < d->node_index; i++)
		if (nvmock.node[i].inforom_bbx_flush_us != NA32)
			at += nvmock.node[i].inforom_bbx_flush_us;
	*timestamp = at;
	*durationUs = us;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version)
{
	DEV(device, d);
	// The caller's buffer holds NVML_GSP_FIRMWARE_VERSION_BUF_SIZE bytes by contract.
	return nvmock_str(version, NVML_GSP_FIRMWARE_VERSION_BUF_SIZE, d->s->gsp_firmware);
}

NVML_API nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled, unsigned int *defaultMode)
{
	DEV(device, d);
	if (isEnabled == NULL || defaultMode == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*isEnabled = *defaultMode = d->s->gsp_firmware[0] != '\0';
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
	DEV(device, d);
	OUT(type);
	*type = (nvmlBrandType_t)d->s->brand;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
	DEV(device, d);
	return nvmock_u32(d->s->architecture, arch);
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	DEV(device, d);
	if (major == NULL || minor == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = (int)d->s->cc_major;
	*minor = (int)d->s->cc_minor;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
	DEV(device, d);
	return nvmock_u32(d->s->board_id, boardId);
}

NVML_API nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
	DEV(device, d);
	return nvmock_u32(d->s->multi_gpu_board, multiGpuBool);
}

NVML_API nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int *moduleId)
{
	DEV(device, d);
	return nvmock_u32(d->s->module_id, moduleId);
}

void nvmock_pci_info(const struct snap_device *s, nvmlPciInfo_t *pci)
{
	memset(pci, 0, sizeof *pci);
	pci->domain = s->pci_domain;
	pci->bus = s->pci_bus;
	pci->device = s->pci_device;
	pci->pciDeviceId = s->pci_device_id;
	pci->pciSubSystemId = s->pci_subsystem_id;
	snprintf(pci->busId, sizeof pci->busId, "%s", s->pci_bus_id);
	snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", s->pci_domain & 0xffff, s->pci_bus,
		 s->pci_device);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	DEV(device, d);
	OUT(pci);
	nvmock_pci_info(d->s, pci);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
	DEV(device, d);
	OUT(pci);
	if (pci->version != nvmlPciInfoExt_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	const struct snap_device *s = d->s;
	pci->domain = s->pci_domain;
	pci->bus = s->pci_bus;
	pci->device = s->pci_device;
	pci->pciDeviceId = s->pci_device_id;
	pci->pciSubSystemId = s->pci_subsystem_id;
	pci->baseClass = s->pci_base_class;
	pci->subClass = s->pci_sub_class;
	snprintf(pci->busId, sizeof pci->busId, "%s", s->pci_bus_id);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_max_gen, maxLinkGen);
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_gpu_max_gen, maxLinkGenDevice);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_max_width, maxLinkWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_gen, currLinkGen);
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
	DEV(device, d);
	return nvmock_u32(d->s->pcie_width, currLinkWidth);
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
	DEV(device, d);
	switch (counter) {
	case NVML_PCIE_UTIL_TX_BYTES: return nvmock_u32(d->s->pcie_tx_kbps, value);
	case NVML_PCIE_UTIL_RX_BYTES: return nvmock_u32(d->s->pcie_rx_kbps, value);
	default: return NVML_ERROR_INVALID_ARGUMENT;
	}
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
	DEV(device, d);
	(void)d;
	return nvmock_u32(0, value);
}

// pcie_speed gives a generation's per-lane rate in MB/s, as nvml.h's
// NVML_PCIE_LINK_MAX_SPEED_* values.
static nvmlReturn_t pcie_speed(uint32_t gen, unsigned int *out)
{
	static const unsigned speed[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
	return nvmock_u32(gen < sizeof speed / sizeof speed[0] ? speed[gen] : NA32, out);
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t device, unsigned int *maxSpeed)
{
	DEV(device, d);
	return pcie_speed(d->s->pcie_max_gen, maxSpeed);
}

NVML_API nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t device, unsigned int *pcieSpeed)
{
	DEV(device, d);
	return pcie_speed(d->s->pcie_gen, pcieSpeed);
}
