// inputs reads everything a client reads, for a snapshot and live state
// that may be damaged: every function of the torture table (torture_gen.c)
// on every GPU and MIG device handle, and then by hand what needs sized
// buffers: processes, events, and the MIG instances and their handles.
// It checks no answer: the sanitizers, a crash or a hang are the failure.
//
// Usage: inputs   (the snapshot and state come from the environment)
// Prints "inputs: refused: <init error>" or "inputs: N handles read".
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torture.h"

#define MAX_ARGS 8
#define BUF_SIZE (64u << 10)

static unsigned char *buf[MAX_ARGS];
static int dirty[MAX_ARGS];
static nvmlDevice_t cur_dev;
static uint32_t cur_val;

void *arg_ptr(const struct mode *m, int i)
{
	(void)m;
	if (i < 0 || i >= MAX_ARGS)
		abort();
	dirty[i] = 1;
	return buf[i];
}

void arg_val(const struct mode *m, int i, void *p, size_t size, bool is_device_handle)
{
	(void)m, (void)i;
	memset(p, 0, size);
	if (is_device_handle)
		memcpy(p, &cur_dev, sizeof cur_dev);
	else
		memcpy(p, &cur_val, size < sizeof cur_val ? size : sizeof cur_val);
}

void check_ret(const char *name, nvmlReturn_t ret)
{
	(void)name, (void)ret;
}

void check_str(const char *name, const char *s)
{
	(void)name, (void)s;
}

// table calls every function of the table with handle h and small scalars.
static void table(nvmlDevice_t h)
{
	static const struct mode m = {"inputs", "", PTR_SCRATCH, VAL_ZERO, DEV_VALID, 0, EXPECT_ANY};
	cur_dev = h;
	for (uint32_t v = 0; v < 2; v++) {
		cur_val = v;
		for (const struct call *c = calls; c->name != NULL; c++) {
			for (int i = 0; i < MAX_ARGS; i++)
				if (dirty[i])
					memset(buf[i], 0, BUF_SIZE), dirty[i] = 0;
			c->fn(&m);
		}
	}
}

// procs lists processes with a buffer of exactly the size asked for.
static void procs(nvmlDevice_t h)
{
	nvmlReturn_t (*fns[])(nvmlDevice_t, unsigned *, nvmlProcessInfo_t *) = {
		nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetGraphicsRunningProcesses_v3,
		nvmlDeviceGetMPSComputeRunningProcesses_v3};
	for (unsigned f = 0; f < sizeof fns / sizeof fns[0]; f++) {
		unsigned n = 0;
		if (fns[f](h, &n, NULL) != NVML_ERROR_INSUFFICIENT_SIZE || n == 0)
			continue;
		nvmlProcessInfo_t *p = malloc(n * sizeof *p);
		if (fns[f](h, &n, p) == NVML_SUCCESS)
			for (unsigned i = 0; i < n; i++) {
				char name[64];
				nvmlSystemGetProcessName(p[i].pid, name, sizeof name);
			}
		free(p);
	}
	unsigned n = 0;
	if (nvmlDeviceGetProcessUtilization(h, NULL, &n, 0) == NVML_ERROR_INSUFFICIENT_SIZE && n > 0) {
		nvmlProcessUtilizationSample_t *s = malloc(n * sizeof *s);
		nvmlDeviceGetProcessUtilization(h, s, &n, 0);
		free(s);
	}
}

// events registers everything on every GPU and takes what comes.
static void events(nvmlDevice_t *gpus, unsigned n)
{
	nvmlEventSet_t set;
	if (nvmlEventSetCreate(&set) != NVML_SUCCESS)
		return;
	for (unsigned i = 0; i < n; i++) {
		unsigned long long types = 0;
		if (nvmlDeviceGetSupportedEventTypes(gpus[i], &types) == NVML_SUCCESS)
			nvmlDeviceRegisterEvents(gpus[i], types, set);
	}
	nvmlEventData_t e;
	for (int k = 0; k < 300 && nvmlEventSetWait_v2(set, &e, k < 3 ? 5 : 0) == NVML_SUCCESS; k++) {
		unsigned idx;
		nvmlDeviceGetIndex(e.device, &idx);
	}
	nvmlEventSetFree(set);
}

static void mig_device(nvmlDevice_t m)
{
	char s[256];
	unsigned u;
	nvmlMemory_t mem;
	nvmlDeviceAttributes_t a;
	nvmlDevice_t parent;
	nvmlDeviceGetName(m, s, sizeof s);
	nvmlDeviceGetUUID(m, s, sizeof s);
	nvmlDeviceGetMemoryInfo(m, &mem);
	nvmlDeviceGetAttributes_v2(m, &a);
	nvmlDeviceGetGpuInstanceId(m, &u);
	nvmlDeviceGetComputeInstanceId(m, &u);
	nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, &parent);
	nvmlDeviceIsMigDeviceHandle(m, &u);
	nvmlDeviceGetIndex(m, &u);
	if (nvmlDeviceGetUUID(m, s, sizeof s) == NVML_SUCCESS)
		nvmlDeviceGetHandleByUUID(s, &parent);
	procs(m);
}

// compute walks a GPU instance's compute instances as nvidia-smi mig -lci.
static void compute(nvmlGpuInstance_t gi)
{
	nvmlGpuInstanceInfo_t info;
	nvmlGpuInstanceGetInfo(gi, &info);
	for (unsigned p = 0; p < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; p++) {
		nvmlComputeInstanceProfileInfo_v2_t pi = {.version = nvmlComputeInstanceProfileInfo_v2};
		if (nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, p, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &pi) !=
		    NVML_SUCCESS)
			continue;
		unsigned n = 0;
		nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, p, &n);
		if (nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, p, NULL, &n) == NVML_SUCCESS && n > 0) {
			nvmlComputeInstancePlacement_t *pl = malloc(n * sizeof *pl);
			nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, p, pl, &n);
			free(pl);
		}
		// The array holds the profile's instance count (nvml.h).
		nvmlComputeInstance_t *cis = malloc(pi.instanceCount * sizeof *cis + 1);
		if (nvmlGpuInstanceGetComputeInstances(gi, p, cis, &n) == NVML_SUCCESS)
			for (unsigned i = 0; i < n && i < pi.instanceCount; i++) {
				nvmlComputeInstanceInfo_t ci;
				nvmlComputeInstanceGetInfo_v2(cis[i], &ci);
			}
		free(cis);
	}
	for (unsigned id = 0; id < 10; id++) {
		nvmlComputeInstance_t ci;
		nvmlComputeInstanceInfo_t info2;
		if (nvmlGpuInstanceGetComputeInstanceById(gi, id, &ci) == NVML_SUCCESS)
			nvmlComputeInstanceGetInfo_v2(ci, &info2);
	}
}

// mig walks a GPU's MIG state as nvidia-smi mig -lgip, -lgi and -L do.
static unsigned mig(nvmlDevice_t h)
{
	unsigned cur, pend, max = 0, seen = 0;
	nvmlDeviceGetMigMode(h, &cur, &pend);
	for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
		nvmlGpuInstanceProfileInfo_v2_t pi = {.version = nvmlGpuInstanceProfileInfo_v2};
		if (nvmlDeviceGetGpuInstanceProfileInfoV(h, p, &pi) != NVML_SUCCESS)
			continue;
		unsigned n = 0;
		nvmlDeviceGetGpuInstanceRemainingCapacity(h, pi.id, &n);
		if (nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, pi.id, NULL, &n) == NVML_SUCCESS && n > 0) {
			nvmlGpuInstancePlacement_t *pl = malloc(n * sizeof *pl);
			nvmlDeviceGetGpuInstancePossiblePlacements_v2(h, pi.id, pl, &n);
			free(pl);
		}
		nvmlGpuInstance_t *gis = malloc(pi.instanceCount * sizeof *gis + 1);
		if (nvmlDeviceGetGpuInstances(h, pi.id, gis, &n) == NVML_SUCCESS)
			for (unsigned i = 0; i < n && i < pi.instanceCount; i++)
				compute(gis[i]);
		free(gis);
	}
	for (unsigned id = 0; id < 16; id++) {
		nvmlGpuInstance_t gi;
		if (nvmlDeviceGetGpuInstanceById(h, id, &gi) == NVML_SUCCESS)
			compute(gi);
	}
	nvmlDeviceGetMaxMigDeviceCount(h, &max);
	for (unsigned i = 0; i < max && i < 64; i++) {
		nvmlDevice_t m;
		if (nvmlDeviceGetMigDeviceHandleByIndex(h, i, &m) != NVML_SUCCESS)
			continue;
		mig_device(m);
		table(m);
		seen++;
	}
	return seen;
}

int main(void)
{
	for (int i = 0; i < MAX_ARGS; i++)
		buf[i] = calloc(1, BUF_SIZE);
	nvmlReturn_t r = nvmlInit_v2();
	if (r != NVML_SUCCESS) {
		printf("inputs: refused: %s\n", nvmlErrorString(r));
		return 0;
	}
	unsigned n = 0, handles = 0;
	nvmlDeviceGetCount_v2(&n);
	nvmlDevice_t gpus[64] = {{0}};
	for (unsigned i = 0; i < n && i < 64; i++) {
		nvmlReturn_t hr = nvmlDeviceGetHandleByIndex_v2(i, &gpus[i]);
		if (hr != NVML_SUCCESS) {
			printf("inputs: GPU %u: %s\n", i, nvmlErrorString(hr));
			continue;
		}
		procs(gpus[i]);
		unsigned m = mig(gpus[i]);
		printf("inputs: GPU %u: %u MIG devices\n", i, m);
		handles += 1 + m;
		table(gpus[i]);
	}
	events(gpus, n < 64 ? n : 64);
	nvmlShutdown();
	for (int i = 0; i < MAX_ARGS; i++)
		free(buf[i]);
	printf("inputs: %u handles read\n", handles);
	return 0;
}
