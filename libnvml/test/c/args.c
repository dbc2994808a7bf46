// args: what nvml.h says a call answers to arguments go-nvml never sends
// (a count with no array, a level or threshold outside its enum, the
// bus-id forms it lists), on a node of NVLink GPUs.
//
// Prints one line per check, "name: answer".
#include <stdio.h>

#include <nvml.h>

static void say(const char *what, nvmlReturn_t r)
{
	printf("%s: %s\n", what, nvmlErrorString(r));
}

int main(void)
{
	if (nvmlInit_v2() != NVML_SUCCESS)
		return 1;
	nvmlDevice_t d, h;
	nvmlDeviceGetHandleByIndex_v2(0, &d);
	char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
	nvmlPciInfo_t pci;
	nvmlDeviceGetPciInfo_v3(d, &pci);
	snprintf(bus, sizeof bus, "%x:%x:%x", pci.domain, pci.bus, pci.device);
	nvmlReturn_t r = nvmlDeviceGetHandleByPciBusId_v2(bus, &h);
	printf("handle by domain:bus:device: %s, %s\n", nvmlErrorString(r), r == NVML_SUCCESS && h.handle == d.handle ? "GPU 0" : "another");

	unsigned count = 2;
	say("nearest GPUs: a count with no array", nvmlDeviceGetTopologyNearestGpus(d, NVML_TOPOLOGY_SYSTEM, &count, NULL));
	count = 0;
	say("nearest GPUs: level 35", nvmlDeviceGetTopologyNearestGpus(d, 35, &count, NULL));
	count = 0;
	r = nvmlDeviceGetTopologyNearestGpus(d, NVML_TOPOLOGY_SYSTEM, &count, NULL);
	printf("nearest GPUs: the size: %s, %u\n", nvmlErrorString(r), count);
	nvmlDevice_t near[1];
	count = 1;
	r = nvmlDeviceGetTopologyNearestGpus(d, NVML_TOPOLOGY_SYSTEM, &count, near);
	printf("nearest GPUs: an array too small: %s, %u\n", nvmlErrorString(r), count);
	count = 2;
	say("GPU set: a count with no array", nvmlSystemGetTopologyGpuSet(0, &count, NULL));
	nvmlDevice_t set[1];
	count = 0;
	r = nvmlSystemGetTopologyGpuSet(0, &count, set);
	printf("GPU set: a count of 0 with an array: %s, %u\n", nvmlErrorString(r), count);
	count = 1;
	r = nvmlSystemGetTopologyGpuSet(0, &count, set);
	printf("GPU set: an array too small: %s, %u\n", nvmlErrorString(r), count);

	unsigned procs = 4;
	say("compute processes: a count with no array", nvmlDeviceGetComputeRunningProcesses_v3(d, &procs, NULL));
	procs = 4;
	say("graphics processes v1: a count with no array", nvmlDeviceGetGraphicsRunningProcesses(d, &procs, NULL));
	procs = 0;
	r = nvmlDeviceGetMPSComputeRunningProcesses_v3(d, &procs, NULL);
	printf("MPS processes: the size: %s, %u\n", nvmlErrorString(r), procs);

	char ver[NVML_DEVICE_INFOROM_VERSION_BUFFER_SIZE];
	say("inforom DRAM encryption object", nvmlDeviceGetInforomVersion(d, NVML_INFOROM_DEN, ver, sizeof ver));
	say("inforom object past the enum", nvmlDeviceGetInforomVersion(d, NVML_INFOROM_COUNT, ver, sizeof ver));
	nvmlUnit_t unit = {0};
	say("unit 0 of none", nvmlUnitGetHandleByIndex(0, &unit));
	nvmlUnitInfo_t ui;
	say("unit information of no unit", nvmlUnitGetUnitInfo(unit, &ui));

	count = 2;
	say("retired pages: a count with no array",
	    nvmlDeviceGetRetiredPages(d, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR, &count, NULL));

	unsigned temp;
	say("threshold past the enum", nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_COUNT, &temp));
	say("threshold acoustic max", nvmlDeviceGetTemperatureThreshold(d, NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX, &temp));

	nvmlTemperature_t tv = {.version = nvmlTemperature_v1 + 1};
	say("versioned temperature of a later version", nvmlDeviceGetTemperatureV(d, &tv));
	tv = (nvmlTemperature_t){.version = nvmlTemperature_v1, .sensorType = NVML_TEMPERATURE_COUNT};
	say("versioned temperature past the sensors", nvmlDeviceGetTemperatureV(d, &tv));
	nvmlPdi_t pdi = {.version = 0};
	say("PDI of version 0", nvmlDeviceGetPdi(d, &pdi));
	nvmlRepairStatus_t rs = {.version = 0};
	say("repair status of version 0", nvmlDeviceGetRepairStatus(d, &rs));
	say("unrepairable memory flag with no struct", nvmlDeviceGetUnrepairableMemoryFlag_v1(d, NULL));
	unsigned long long flushed;
	say("BBX flush time with no duration", nvmlDeviceGetLastBBXFlushTime(d, &flushed, NULL));
	nvmlFieldValue_t mp = {.fieldId = NVML_FI_DEV_POWER_CURRENT_LIMIT, .scopeId = NVML_POWER_SCOPE_MEMORY};
	nvmlDeviceGetFieldValues(d, 1, &mp);
	say("memory power limit", mp.nvmlReturn);
	struct {
		nvmlNvLinkInfo_v1_t info;
		unsigned canary;
	} v1 = {.info.version = nvmlNvLinkInfo_v1, .canary = 0xc0ffee};
	r = nvmlDeviceGetNvLinkInfo(d, (nvmlNvLinkInfo_t *)&v1.info);
	printf("NVLink information v1: %s, %s\n", nvmlErrorString(r), v1.canary == 0xc0ffee ? "nothing written past it" : "written past it");
	nvmlNvLinkInfo_t nli = {.version = nvmlNvLinkInfo_v2 + 1};
	say("NVLink information of a later version", nvmlDeviceGetNvLinkInfo(d, &nli));
	nli.version = nvmlNvLinkInfo_v2;
	r = nvmlDeviceGetNvLinkInfo(d, &nli);
	printf("NVLink information v2: %s, %u images\n", nvmlErrorString(r), nli.firmwareInfo.numValidEntries);

	nvmlProcessesUtilizationInfo_t pu = {.version = nvmlProcessesUtilizationInfo_v1 + 1};
	say("processes' utilization of a later version", nvmlDeviceGetProcessesUtilizationInfo(d, &pu));
	pu.version = nvmlProcessesUtilizationInfo_v1;
	say("processes' utilization, none running", nvmlDeviceGetProcessesUtilizationInfo(d, &pu));
	nvmlProcessDetailList_t pl = {.version = 0};
	say("process detail list of version 0", nvmlDeviceGetRunningProcessDetailList(d, &pl));
	pl = (nvmlProcessDetailList_t){.version = nvmlProcessDetailList_v1, .mode = NVML_PROCESS_MODE_MAX};
	say("process detail list of mode max", nvmlDeviceGetRunningProcessDetailList(d, &pl));
	pl.mode = NVML_PROCESS_MODE_ALL;
	r = nvmlDeviceGetRunningProcessDetailList(d, &pl);
	printf("process detail list, none running: %s, %u\n", nvmlErrorString(r), pl.numProcArrayEntries);
	pl.numProcArrayEntries = 3;
	say("process detail list: a count with no array", nvmlDeviceGetRunningProcessDetailList(d, &pl));

	unsigned hic = 64;
	say("HIC versions with no array", nvmlSystemGetHicVersion(&hic, NULL));
	nvmlViolationTime_t vt;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* deprecated, still called (DCGM, nvidia-smi) */
	say("violation of policy 6, none in the enum", nvmlDeviceGetViolationStatus(d, 6, &vt));
#pragma GCC diagnostic pop
	say("handle by an empty UUID", nvmlDeviceGetHandleByUUID("", &h));

	unsigned links = 0;
	nvmlFieldValue_t fv = {.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT};
	nvmlDeviceGetFieldValues(d, 1, &fv);
	links = fv.value.uiVal;
	nvmlEnableState_t st;
	unsigned cap;
	say("state of the last link", nvmlDeviceGetNvLinkState(d, links - 1, &st));
	say("state past the links", nvmlDeviceGetNvLinkState(d, links, &st));
	say("state past NVML_NVLINK_MAX_LINKS", nvmlDeviceGetNvLinkState(d, NVML_NVLINK_MAX_LINKS, &st));
	r = nvmlDeviceGetNvLinkCapability(d, links, NVML_NVLINK_CAP_P2P_SUPPORTED, &cap);
	printf("P2P capability past the links: %s, %u\n", nvmlErrorString(r), cap);
	say("capability past NVML_NVLINK_MAX_LINKS",
	    nvmlDeviceGetNvLinkCapability(d, NVML_NVLINK_MAX_LINKS, NVML_NVLINK_CAP_P2P_SUPPORTED, &cap));
	nvmlShutdown();
	return 0;
}
