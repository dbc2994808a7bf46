// Micro-benchmarks of the mock through its C ABI, with no cgo or Python in
// the way. `bench init` times the first nvmlInit_v2 + nvmlDeviceGetCount_v2
// of a process; `bench getters N [GPU]` times N calls of each hot getter.
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations" // the getters clients still call

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int check(const char *what, nvmlReturn_t r)
{
	if (r != NVML_SUCCESS) {
		fprintf(stderr, "bench: %s: %s\n", what, nvmlErrorString(r));
		exit(1);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "noop") == 0)
		return 0; // the cost of starting a process that links the library
	if (argc >= 2 && strcmp(argv[1], "init") == 0) {
		unsigned count;
		double t0 = now_ns();
		check("nvmlInit_v2", nvmlInit_v2());
		check("nvmlDeviceGetCount_v2", nvmlDeviceGetCount_v2(&count));
		double t1 = now_ns();
		printf("init_count_ns %.0f gpus %u\n", t1 - t0, count);
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "getters") == 0) {
		long n = atol(argv[2]);
		unsigned count, temp, power;
		nvmlUtilization_t util;
		nvmlDevice_t dev;
		nvmlMemory_t mem;
		check("nvmlInit_v2", nvmlInit_v2());
		check("nvmlDeviceGetCount_v2", nvmlDeviceGetCount_v2(&count));
		unsigned gpu = argc >= 4 ? (unsigned)atoi(argv[3]) : 0;
		check("nvmlDeviceGetHandleByIndex_v2", nvmlDeviceGetHandleByIndex_v2(gpu, &dev));
		double t0 = now_ns();
		for (long i = 0; i < n; i++)
			check("nvmlDeviceGetMemoryInfo", nvmlDeviceGetMemoryInfo(dev, &mem));
		double t1 = now_ns();
		for (long i = 0; i < n; i++)
			check("nvmlDeviceGetTemperature", nvmlDeviceGetTemperature(dev, NVML_TEMPERATURE_GPU, &temp));
		double t2 = now_ns();
		for (long i = 0; i < n; i++)
			check("nvmlDeviceGetHandleByIndex_v2", nvmlDeviceGetHandleByIndex_v2((unsigned)i % count, &dev));
		double t3 = now_ns();
		check("nvmlDeviceGetHandleByIndex_v2", nvmlDeviceGetHandleByIndex_v2(gpu, &dev));
		for (long i = 0; i < n; i++)
			check("nvmlDeviceGetPowerUsage", nvmlDeviceGetPowerUsage(dev, &power));
		double t4 = now_ns();
		for (long i = 0; i < n; i++)
			check("nvmlDeviceGetUtilizationRates", nvmlDeviceGetUtilizationRates(dev, &util));
		double t5 = now_ns();
		printf("nvmlDeviceGetMemoryInfo_ns %.2f\nnvmlDeviceGetTemperature_ns %.2f\nnvmlDeviceGetHandleByIndex_v2_ns %.2f\n"
		       "nvmlDeviceGetPowerUsage_ns %.2f\nnvmlDeviceGetUtilizationRates_ns %.2f\n",
		       (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n, (t4 - t3) / n, (t5 - t4) / n);
		return nvmlShutdown() != NVML_SUCCESS;
	}
	fprintf(stderr, "usage: bench noop | bench init | bench getters N [GPU]\n");
	return 2;
}
