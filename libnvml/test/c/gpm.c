// gpm: the GPM calls' answers to what a client can get wrong, which
// go-nvml cannot send (it sets the versions itself): a call before init,
// versions, counts, unknown metric ids, running out of samples, and
// samples held across a shutdown and a re-init.
//
// Prints one line per check, "name: answer".
#include <stdio.h>
#include <string.h>

#include <nvml.h>

#define SAMPLES 4096 // the library's table

static nvmlGpmSample_t all[SAMPLES + 1];

static void say(const char *what, nvmlReturn_t r)
{
	printf("%s: %s\n", what, nvmlErrorString(r));
}

int main(void)
{
	nvmlGpmSample_t a, b;
	say("alloc before init", nvmlGpmSampleAlloc(&a));
	if (nvmlInit_v2() != NVML_SUCCESS)
		return 1;
	nvmlDevice_t d;
	nvmlDeviceGetHandleByIndex_v2(0, &d);

	nvmlGpmSupport_t sup = {.version = 2};
	say("support of version 2", nvmlGpmQueryDeviceSupport(d, &sup));
	say("support into NULL", nvmlGpmQueryDeviceSupport(d, NULL));
	say("alloc into NULL", nvmlGpmSampleAlloc(NULL));

	unsigned n = 0;
	while (n <= SAMPLES && nvmlGpmSampleAlloc(&all[n]) == NVML_SUCCESS)
		n++;
	printf("samples allocated: %u\n", n);
	say("one more", nvmlGpmSampleAlloc(&all[SAMPLES]));
	for (unsigned i = 0; i < n; i++)
		nvmlGpmSampleFree(all[i]);

	nvmlGpmSampleAlloc(&a);
	nvmlGpmSampleAlloc(&b);
	nvmlGpmSampleGet(d, a);
	nvmlGpmSampleGet(d, b);
	static nvmlGpmMetricsGet_t m;
	m.sample1 = a, m.sample2 = b;
	m.numMetrics = 3;
	m.metrics[0].metricId = NVML_GPM_METRIC_GRAPHICS_UTIL;
	m.metrics[1].metricId = 0;
	m.metrics[2].metricId = 0xffffffffu;
	m.version = 0;
	say("metrics of version 0", nvmlGpmMetricsGet(&m));
	m.version = NVML_GPM_METRICS_GET_VERSION;
	m.numMetrics = NVML_GPM_METRIC_MAX + 1;
	say("metrics past the array", nvmlGpmMetricsGet(&m));
	say("metrics into NULL", nvmlGpmMetricsGet(NULL));
	m.numMetrics = 3;
	say("metrics", nvmlGpmMetricsGet(&m));
	printf("metric 1: %s; 0: %s; 0xffffffff: %s\n", nvmlErrorString(m.metrics[0].nvmlReturn),
	       nvmlErrorString(m.metrics[1].nvmlReturn), nvmlErrorString(m.metrics[2].nvmlReturn));

	// Samples held across a shutdown: refused while it lasts, good again
	// after an init that finds the same GPUs.
	nvmlShutdown();
	say("metrics after shutdown", nvmlGpmMetricsGet(&m));
	say("free after shutdown", nvmlGpmSampleFree(a));
	nvmlInit_v2();
	say("metrics after re-init", nvmlGpmMetricsGet(&m));
	say("free", nvmlGpmSampleFree(a));
	say("free again", nvmlGpmSampleFree(a));
	say("metrics of a freed sample", nvmlGpmMetricsGet(&m));
	nvmlGpmSampleFree(b);
	nvmlShutdown();
	return 0;
}
