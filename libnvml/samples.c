// Sampled readings: a reading every 100 ms over the last second, as the
// driver buffers them. A steady GPU gives the same value in each; one under
// a live load gives the model's value at each sample's time.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvmock.h"

#define SAMPLES 10
#define SAMPLE_PERIOD_US 100000ull

static uint32_t sample_value(const struct snap_device *s, nvmlSamplingType_t type);

// newer counts the samples of the last second, the newest at now, taken
// after since (µs); none before 1970, where a clock frozen near it would
// wrap them to 2^64 (review).
static unsigned newer(unsigned long long now, unsigned long long since)
{
	unsigned n = 0;
	for (unsigned k = 0; k < SAMPLES; k++)
		n += (SAMPLES - 1 - k) * SAMPLE_PERIOD_US <= now && now - (SAMPLES - 1 - k) * SAMPLE_PERIOD_US > since;
	return n;
}

// live_sample is the model's reading at t (µs), or the static one; clocks
// within any locked range, as nvmlDeviceGetClockInfo answers them.
static uint32_t live_sample(const struct nvmock_dev *d, nvmlSamplingType_t type, uint32_t v, unsigned long long t_us)
{
	LIVE(d);
	if (!live_) {
		struct live_gpu g;
		const struct live_gpu *set = nvmock_settings(d, &g);
		if (set != NULL && type == NVML_PROCESSOR_CLK_SAMPLES)
			return nvmock_locked_clock(d, set, NVML_CLOCK_GRAPHICS, v);
		if (set != NULL && type == NVML_MEMORY_CLK_SAMPLES)
			return nvmock_locked_clock(d, set, NVML_CLOCK_MEM, v);
		return v;
	}
	uint64_t t = t_us * 1000ull;
	switch (type) {
	case NVML_TOTAL_POWER_SAMPLES: return nvmock_live_power(d, &g_, &fx_, t);
	case NVML_GPU_UTILIZATION_SAMPLES: return nvmock_live_util(d->node_index, &g_, 0, t);
	case NVML_MEMORY_UTILIZATION_SAMPLES: return nvmock_live_util(d->node_index, &g_, 1, t);
	case NVML_ENC_UTILIZATION_SAMPLES: return nvmock_live_util(d->node_index, &g_, 2, t);
	case NVML_DEC_UTILIZATION_SAMPLES: return nvmock_live_util(d->node_index, &g_, 3, t);
	case NVML_PROCESSOR_CLK_SAMPLES: return nvmock_live_clock(d, &g_, &fx_, NVML_CLOCK_GRAPHICS, t);
	case NVML_MEMORY_CLK_SAMPLES: return nvmock_live_clock(d, &g_, &fx_, NVML_CLOCK_MEM, t);
	default: return v;
	}
}

static uint32_t sample_value(const struct snap_device *s, nvmlSamplingType_t type)
{
	switch (type) {
	case NVML_TOTAL_POWER_SAMPLES: return s->power_draw_mw;
	case NVML_GPU_UTILIZATION_SAMPLES: return s->util_gpu;
	case NVML_MEMORY_UTILIZATION_SAMPLES: return s->util_memory;
	case NVML_ENC_UTILIZATION_SAMPLES: return s->util_encoder;
	case NVML_DEC_UTILIZATION_SAMPLES: return s->util_decoder;
	case NVML_PROCESSOR_CLK_SAMPLES: return s->clock[NVML_CLOCK_GRAPHICS];
	case NVML_MEMORY_CLK_SAMPLES: return s->clock[NVML_CLOCK_MEM];
	case NVML_MODULE_POWER_SAMPLES: return s->module_power_draw_mw;
	case NVML_JPG_UTILIZATION_SAMPLES: return s->util_jpeg;
	case NVML_OFA_UTILIZATION_SAMPLES: return s->util_ofa;
	default: return NA32;
	}
}

NVML_API nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type, unsigned long long lastSeenTimeStamp,
					   nvmlValueType_t *sampleValType, unsigned int *sampleCount, nvmlSample_t *samples)
{
	DEV(device, d);
	// nvml.h: a count of 0 for a buffer is an invalid argument.
	if (sampleValType == NULL || sampleCount == NULL || (unsigned)type >= NVML_SAMPLINGTYPE_COUNT ||
	    (samples != NULL && *sampleCount == 0))
		return NVML_ERROR_INVALID_ARGUMENT;
	uint32_t v = sample_value(d->s, type);
	if (v == NA32 || v == DEP32)
		return NVML_ERROR_NOT_SUPPORTED;
	// nvml.h: utilization samples are not supported on MIG-enabled GPUs;
	// nor are the JPEG and OFA engines' (nvidia-smi dmon -h).
	int util = (type >= NVML_GPU_UTILIZATION_SAMPLES && type <= NVML_DEC_UTILIZATION_SAMPLES) ||
		   type == NVML_JPG_UTILIZATION_SAMPLES || type == NVML_OFA_UTILIZATION_SAMPLES;
	if (util && nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned long long now = nvmock_live_now() / 1000;
	now -= now % SAMPLE_PERIOD_US;
	unsigned n = newer(now, lastSeenTimeStamp); // filled oldest first
	*sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
	if (samples == NULL) {
		*sampleCount = SAMPLES; // the buffer size to allocate
		return NVML_SUCCESS;
	}
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	if (*sampleCount < n)
		n = *sampleCount;
	for (unsigned k = 0; k < n; k++) {
		samples[k].timeStamp = now - (n - 1 - k) * SAMPLE_PERIOD_US;
		samples[k].sampleValue.uiVal = live_sample(d, type, v, samples[k].timeStamp);
	}
	*sampleCount = n;
	return NVML_SUCCESS;
}

// Per-process utilization: one sample per registered process in the last
// 100 ms slot, the GPU's utilization shared evenly among them (the model
// knows the GPU's load, not who makes it). No process, no sample. A GPU
// in MIG mode has no utilization to share (nvmlDeviceGetUtilizationRates).
NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t *utilization,
						      unsigned int *processSamplesCount, unsigned long long lastSeenTimeStamp)
{
	DEV(device, d);
	OUT(processSamplesCount);
	if (nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned n;
	struct live_proc *p = nvmock_live_procs(d->node_index, 3, &n);
	unsigned long long now = nvmock_live_now() / 1000;
	now -= now % SAMPLE_PERIOD_US;
	if (n > 0 && now <= lastSeenTimeStamp)
		n = 0;
	if (n == 0) {
		// What the driver answers with nothing running (pynvml users
		// know it as NVMLError_NotFound).
		free(p);
		*processSamplesCount = 0;
		return NVML_ERROR_NOT_FOUND;
	}
	if (utilization == NULL || *processSamplesCount < n) {
		free(p);
		*processSamplesCount = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	LIVE(d);
	unsigned u[4] = {0, 0, 0, 0};
	for (unsigned e = 0; live_ && e < 4; e++)
		u[e] = nvmock_live_util(d->node_index, &g_, e, now * 1000);
	for (unsigned i = 0; i < n; i++) {
		utilization[i] = (nvmlProcessUtilizationSample_t){.pid = p[i].pid, .timeStamp = now,
			.smUtil = u[0] / n, .memUtil = u[1] / n, .encUtil = u[2] / n, .decUtil = u[3] / n};
	}
	*processSamplesCount = n;
	free(p);
	return NVML_SUCCESS;
}

// nvmlDeviceGetProcessesUtilizationInfo is nvmlDeviceGetProcessUtilization
// in a versioned struct, with JPEG and OFA (not modelled: 0).
NVML_API nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t device, nvmlProcessesUtilizationInfo_t *info)
{
	DEV(device, d);
	(void)d;
	if (info == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (info->version != nvmlProcessesUtilizationInfo_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned n = info->processSamplesCount < STATE_PROCS ? info->processSamplesCount : STATE_PROCS;
	nvmlProcessUtilizationSample_t *s = NULL;
	if (info->procUtilArray != NULL && n > 0 && (s = calloc(n, sizeof *s)) == NULL)
		return NVML_ERROR_MEMORY;
	nvmlReturn_t r = nvmlDeviceGetProcessUtilization(device, s, &n, info->lastSeenTimeStamp);
	info->processSamplesCount = n;
	for (unsigned i = 0; r == NVML_SUCCESS && i < n; i++)
		info->procUtilArray[i] = (nvmlProcessUtilizationInfo_v1_t){.timeStamp = s[i].timeStamp, .pid = s[i].pid,
			.smUtil = s[i].smUtil, .memUtil = s[i].memUtil, .encUtil = s[i].encUtil, .decUtil = s[i].decUtil};
	free(s);
	return r;
}

// nvidia-smi pmon's own samples (export table 0x488): each 100 ms sample
// its time and, per engine, the utilization and the process the driver
// found on the engine (~0: none, which pmon prints as "-"). pmon averages
// a process's values over the samples. nvidia-smi reads only util and pid.
struct smi_engine_sample {
	uint32_t util, unread0, pid;
	char unread[68];
};
_Static_assert(sizeof(struct smi_engine_sample) == 0x50, "pmon engine sample");

#define NO_PROCESS 0xffffffffu

// The engines in pmon's order: sm, mem, enc, dec (the model's 0-3), then
// (550 on) jpg, ofa.
enum { PMON_ENGINES = 6 };

// nvmock_pmon_samples fills *count samples of 8 + engines * 0x50 bytes,
// those of the last interval by the caller's clock (since_us: pmon asks
// for its last second). The model knows a GPU's load, not who makes it,
// so the registered processes take the engines in turn, one a sample, as
// the driver finds one context on an engine when it samples: a process's
// average over a second is its share in tenths (two at 80 %: 40 each;
// three: 32, 24 and 24, turning), and beyond ten processes some sit out
// a second. JPEG and OFA are not modelled (0), and a GPU in MIG mode has
// none, as with nvmlDeviceGetProcessUtilization.
int nvmock_pmon_samples(nvmlDevice_t device, unsigned long long since_us, unsigned *count, void *buf, unsigned engines)
{
	DEV(device, d);
	if (count == NULL || (buf == NULL && *count > 0) || engines > PMON_ENGINES)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (nvmock_mig_on(d))
		return NVML_ERROR_NOT_SUPPORTED;
	unsigned long long now = nvmock_live_now() / 1000;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	unsigned long long wall = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
	// A frozen state clock (tests, replays) gives the same interval before
	// its own time.
	if (since_us > wall)
		since_us = ~0ull;
	else if (nvmock.live != NULL && __atomic_load_n(&nvmock.live->frozen, __ATOMIC_ACQUIRE))
		since_us = now > wall - since_us ? now - (wall - since_us) : 0;
	now -= now % SAMPLE_PERIOD_US;
	unsigned n = newer(now, since_us);
	if (n > *count)
		n = *count;
	*count = n;
	if (n == 0)
		return NVML_ERROR_NOT_FOUND;
	unsigned np;
	struct live_proc *p = nvmock_live_procs(d->node_index, 3, &np);
	LIVE(d);
	size_t size = 8 + engines * sizeof(struct smi_engine_sample);
	for (unsigned k = 0; k < n; k++) {
		unsigned char *e = (unsigned char *)buf + k * size;
		uint64_t t = now - (n - 1 - k) * SAMPLE_PERIOD_US;
		memset(e, 0, size);
		memcpy(e, &t, sizeof t);
		uint32_t pid = np > 0 ? p[t / SAMPLE_PERIOD_US % np].pid : NO_PROCESS;
		for (unsigned i = 0; i < engines; i++) {
			struct smi_engine_sample s = {.pid = NO_PROCESS};
			if (live_ && i < 4)
				s.util = nvmock_live_util(d->node_index, &g_, i, t * 1000);
			if (s.util > 0)
				s.pid = pid; // an idle engine holds no process
			memcpy(e + 8 + i * sizeof s, &s, sizeof s);
		}
	}
	free(p);
	return NVML_SUCCESS;
}
