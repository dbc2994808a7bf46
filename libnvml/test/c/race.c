// race: many threads of one process using the library at once, as the
// device plugin (go-nvml from several goroutines) and monitors do, for
// ThreadSanitizer to watch. Return codes are not checked: races, crashes
// and deadlocks are what this finds.
//
//   race SECONDS
//
// Prints "race: N calls in M threads: ..." and exits 0; a thread still busy
// 30 s after the end is a deadlock: it says so and exits 3.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nvml.h>

// nvmlDeviceGetTemperature is deprecated in newer headers, but it is what
// go-nvml programs and nvidia-smi of today call.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static int seconds;
// What the run did, to show it reached the paths it means to.
static unsigned long long total_calls, events_got, gis_made, cis_made, mig_read;

// Each call made counts once; the sum shows the run did work.
#define CALL(x) ((void)(x), n++)

static double mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int running(double end) { return mono() < end; }

static nvmlDevice_t any_device(unsigned *seed)
{
	nvmlDevice_t h = {NULL};
	unsigned count = 0;
	nvmlDeviceGetCount_v2(&count);
	if (count > 0)
		nvmlDeviceGetHandleByIndex_v2((unsigned)rand_r(seed) % count, &h);
	return h;
}

// readings is what a monitor or the device plugin asks of one GPU.
static unsigned long readings(nvmlDevice_t h, unsigned *seed)
{
	unsigned long n = 0;
	char s[96];
	unsigned v, w;
	unsigned long long ull;
	nvmlDevice_t other;
	CALL(nvmlDeviceGetName(h, s, sizeof s));
	if (nvmlDeviceGetUUID(h, s, sizeof s) == NVML_SUCCESS)
		CALL(nvmlDeviceGetHandleByUUID(s, &other));
	nvmlPciInfo_t pci;
	if (nvmlDeviceGetPciInfo_v3(h, &pci) == NVML_SUCCESS)
		CALL(nvmlDeviceGetHandleByPciBusId_v2(pci.busIdLegacy, &other));
	nvmlMemory_t mem;
	CALL(nvmlDeviceGetMemoryInfo(h, &mem));
	nvmlMemory_v2_t mem2 = {.version = nvmlMemory_v2};
	CALL(nvmlDeviceGetMemoryInfo_v2(h, &mem2));
	CALL(nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &v));
	CALL(nvmlDeviceGetPowerUsage(h, &v));
	CALL(nvmlDeviceGetTotalEnergyConsumption(h, &ull));
	nvmlUtilization_t u;
	CALL(nvmlDeviceGetUtilizationRates(h, &u));
	CALL(nvmlDeviceGetEncoderUtilization(h, &v, &w));
	CALL(nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM, &v));
	CALL(nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM, &v));
	CALL(nvmlDeviceGetCurrentClocksEventReasons(h, &ull));
	CALL(nvmlDeviceGetPerformanceState(h, (nvmlPstates_t *)&v));
	nvmlProcessInfo_t procs[8];
	v = 8;
	CALL(nvmlDeviceGetComputeRunningProcesses_v3(h, &v, procs));
	if (v > 0 && v <= 8)
		CALL(nvmlSystemGetProcessName(procs[0].pid, s, sizeof s));
	nvmlProcessUtilizationSample_t pu[8];
	v = 8;
	CALL(nvmlDeviceGetProcessUtilization(h, pu, &v, 0));
	nvmlSample_t samples[16];
	nvmlValueType_t vt;
	v = 16;
	CALL(nvmlDeviceGetSamples(h, NVML_GPU_UTILIZATION_SAMPLES, 0, &vt, &v, samples));
	CALL(nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &ull));
	CALL(nvmlDeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC, &ull));
	CALL(nvmlDeviceGetRetiredPagesPendingStatus(h, (nvmlEnableState_t *)&v));
	CALL(nvmlDeviceGetRemappedRows(h, &v, &w, &v, &w));
	nvmlEnableState_t active;
	CALL(nvmlDeviceGetNvLinkState(h, (unsigned)rand_r(seed) % 12, &active));
	nvmlFieldValue_t f[2] = {{.fieldId = NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL}, {.fieldId = NVML_FI_DEV_ECC_DBE_VOL_TOTAL}};
	CALL(nvmlDeviceGetFieldValues(h, 2, f));
	nvmlDevice_t peer = any_device(seed);
	nvmlGpuTopologyLevel_t level;
	CALL(nvmlDeviceGetTopologyCommonAncestor(h, peer, &level));
	nvmlGpuP2PStatus_t p2p;
	CALL(nvmlDeviceGetP2PStatus(h, peer, NVML_P2P_CAPS_INDEX_NVLINK, &p2p));
	unsigned long cpus[4];
	CALL(nvmlDeviceGetCpuAffinity(h, 4, cpus));
	nvmlDevice_t near[8];
	v = 8;
	CALL(nvmlDeviceGetTopologyNearestGpus(h, NVML_TOPOLOGY_NODE, &v, near));
	CALL(nvmlDeviceGetMigMode(h, &v, &w));
	CALL(nvmlDeviceGetPowerManagementLimit(h, &v));
	return n;
}

// mig_devices reads every MIG device of a GPU, as nvidia-ctk and the
// device plugin enumerate them.
static unsigned long mig_devices(nvmlDevice_t h)
{
	unsigned long n = 0;
	unsigned max = 0;
	CALL(nvmlDeviceGetMaxMigDeviceCount(h, &max));
	for (unsigned i = 0; i < max && i < 8; i++) {
		nvmlDevice_t m, parent;
		if (nvmlDeviceGetMigDeviceHandleByIndex(h, i, &m) != NVML_SUCCESS)
			continue;
		char s[96];
		unsigned v;
		nvmlMemory_t mem;
		nvmlDeviceAttributes_t attr;
		CALL(nvmlDeviceGetName(m, s, sizeof s));
		if (nvmlDeviceGetUUID(m, s, sizeof s) == NVML_SUCCESS)
			CALL(nvmlDeviceGetHandleByUUID(s, &m));
		CALL(nvmlDeviceGetMemoryInfo(m, &mem));
		CALL(nvmlDeviceGetGpuInstanceId(m, &v));
		CALL(nvmlDeviceGetComputeInstanceId(m, &v));
		CALL(nvmlDeviceGetAttributes_v2(m, &attr));
		CALL(nvmlDeviceIsMigDeviceHandle(m, &v));
		CALL(nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, &parent));
		__atomic_add_fetch(&mig_read, 1, __ATOMIC_RELAXED);
	}
	return n;
}

static void *reader(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	unsigned long n = 0;
	double end = mono() + seconds;
	while (running(end)) {
		nvmlDevice_t h = any_device(&seed);
		n += readings(h, &seed);
		n += mig_devices(h);
	}
	__atomic_add_fetch(&total_calls, n, __ATOMIC_RELAXED);
	return NULL;
}

// One set every events thread also waits on, as NVML is thread-safe
// for calls on one set; the pairs threads register GPUs on it meanwhile.
static nvmlEventSet_t shared;

// events waits as the device plugin's health check does, on a set of its
// own, made anew now and then, and on the shared one.
static void *events(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	unsigned long n = 0;
	double end = mono() + seconds;
	while (running(end)) {
		for (int k = 0; k < 5 && running(end); k++) {
			nvmlEventData_t d;
			if (nvmlEventSetWait_v2(shared, &d, (unsigned)rand_r(&seed) % 20) == NVML_SUCCESS)
				__atomic_add_fetch(&events_got, 1, __ATOMIC_RELAXED);
			n++;
		}
		nvmlEventSet_t set;
		if (nvmlEventSetCreate(&set) != NVML_SUCCESS)
			continue;
		unsigned count = 0;
		nvmlDeviceGetCount_v2(&count);
		for (unsigned i = 0; i < count; i++) {
			nvmlDevice_t h;
			unsigned long long types = 0;
			if (nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS)
				continue;
			CALL(nvmlDeviceGetSupportedEventTypes(h, &types));
			CALL(nvmlDeviceRegisterEvents(h, types & ~(unsigned long long)nvmlEventTypeClock, set));
		}
		for (int k = 0; k < 20 && running(end); k++) {
			nvmlEventData_t d;
			if (nvmlEventSetWait_v2(set, &d, (unsigned)rand_r(&seed) % 20) == NVML_SUCCESS)
				__atomic_add_fetch(&events_got, 1, __ATOMIC_RELAXED);
			n++;
		}
		CALL(nvmlEventSetFree(set));
	}
	__atomic_add_fetch(&total_calls, n, __ATOMIC_RELAXED);
	return NULL;
}

// mig makes and destroys GPU and compute instances on GPUs 0 to 3, two
// threads on each GPU, as nvidia-smi mig and the MIG manager do.
static void *mig(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	unsigned long n = 0;
	double end = mono() + seconds;
	while (running(end)) {
		nvmlDevice_t h;
		if (nvmlDeviceGetHandleByIndex_v2((unsigned)rand_r(&seed) % 4, &h) != NVML_SUCCESS)
			continue;
		nvmlReturn_t activation;
		CALL(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_ENABLE, &activation));
		nvmlGpuInstanceProfileInfo_t gp;
		if (nvmlDeviceGetGpuInstanceProfileInfo(h, NVML_GPU_INSTANCE_PROFILE_1_SLICE, &gp) != NVML_SUCCESS)
			continue;
		unsigned left = 0;
		CALL(nvmlDeviceGetGpuInstanceRemainingCapacity(h, gp.id, &left));
		nvmlGpuInstance_t gi;
		if (nvmlDeviceCreateGpuInstance(h, gp.id, &gi) == NVML_SUCCESS) {
			__atomic_add_fetch(&gis_made, 1, __ATOMIC_RELAXED);
			nvmlGpuInstanceInfo_t info;
			CALL(nvmlGpuInstanceGetInfo(gi, &info));
			nvmlComputeInstanceProfileInfo_t cp;
			nvmlComputeInstance_t ci;
			if (nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
									 NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp) == NVML_SUCCESS &&
			    nvmlGpuInstanceCreateComputeInstance(gi, cp.id, &ci) == NVML_SUCCESS) {
				__atomic_add_fetch(&cis_made, 1, __ATOMIC_RELAXED);
				nvmlComputeInstanceInfo_t cinfo;
				CALL(nvmlComputeInstanceGetInfo_v2(ci, &cinfo));
				n += mig_devices(h);
				CALL(nvmlComputeInstanceDestroy(ci));
			}
			CALL(nvmlGpuInstanceDestroy(gi));
		}
		nvmlGpuInstance_t gis[8];
		unsigned count = 0;
		CALL(nvmlDeviceGetGpuInstances(h, gp.id, gis, &count));
		// Now and then the mode goes off, where no instance is left.
		if (rand_r(&seed) % 8 == 0)
			CALL(nvmlDeviceSetMigMode(h, NVML_DEVICE_MIG_DISABLE, &activation));
	}
	__atomic_add_fetch(&total_calls, n, __ATOMIC_RELAXED);
	return NULL;
}

// pairs inits and shuts down around a few calls, as go-nvml programs that
// call nvml.Init and defer nvml.Shutdown in each goroutine do.
static void *pairs(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	unsigned long n = 0;
	double end = mono() + seconds;
	while (running(end)) {
		if (nvmlInit_v2() != NVML_SUCCESS)
			continue;
		nvmlDevice_t h = any_device(&seed);
		char s[96];
		unsigned v;
		CALL(nvmlDeviceGetName(h, s, sizeof s));
		CALL(nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &v));
		CALL(nvmlSystemGetDriverVersion(s, sizeof s));
		CALL(nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, shared));
		// A setting now and then: writes the live state as nvidia-smi -pl.
		if (rand_r(&seed) % 16 == 0 && nvmlDeviceGetPowerManagementLimit(h, &v) == NVML_SUCCESS)
			CALL(nvmlDeviceSetPowerManagementLimit(h, v));
		CALL(nvmlShutdown());
	}
	__atomic_add_fetch(&total_calls, n, __ATOMIC_RELAXED);
	return NULL;
}

static void *watchdog(void *arg)
{
	(void)arg;
	sleep((unsigned)seconds + 30);
	fprintf(stderr, "race: threads still running 30 s after the end: a deadlock\n");
	_exit(3);
}

int main(int argc, char **argv)
{
	if (argc != 2 || (seconds = atoi(argv[1])) <= 0) {
		fprintf(stderr, "usage: race SECONDS\n");
		return 2;
	}
	nvmlReturn_t r = nvmlInit_v2();
	if (r != NVML_SUCCESS) {
		fprintf(stderr, "race: nvmlInit_v2: %s\n", nvmlErrorString(r));
		return 1;
	}
	if (nvmlEventSetCreate(&shared) != NVML_SUCCESS) {
		fprintf(stderr, "race: nvmlEventSetCreate failed\n");
		return 1;
	}
	static void *(*const kinds[])(void *) = {reader, reader, reader, reader, events, events, mig, mig, pairs, pairs};
	enum { threads = sizeof kinds / sizeof kinds[0] };
	pthread_t t[threads], w;
	pthread_create(&w, NULL, watchdog, NULL);
	pthread_detach(w);
	for (unsigned i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, kinds[i], (void *)(uintptr_t)(i + 1));
	for (unsigned i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	nvmlEventSetFree(shared);
	nvmlShutdown();
	printf("race: %llu calls in %d threads: %llu events, %llu GPU and %llu compute instances made, %llu MIG devices read\n",
	       total_calls, threads, events_got, gis_made, cis_made, mig_read);
	return 0;
}
