// GPM (GPU performance monitoring), on Hopper and later as nvml.h has it:
// a sample is the GPU's (or a MIG GPU instance's) counters at a moment, and
// a metric is what happened between two samples. The load model (live.c)
// moves the counters: graphics and SM activity follow the GPU load, DRAM
// bandwidth the memory load, the media engines theirs; PCIe traffic is the
// board's throughput reading and NVLink carries none (as the field values
// say). The model has no instruction mix, so metrics of pipes, occupancy,
// caches and C2C answer NOT_SUPPORTED each, rather than a made-up figure.
#include <time.h>

#include "mig.h"

#define GPM_WHOLE 0xffffffffu // a sample of the whole GPU
#define GPM_SAMPLES 4096      // allocated at once, at most

// Samples live in a fixed table, so a handle is checked without reading
// through it (a stale or made-up one is INVALID_ARGUMENT), and taking or
// freeing one needs no lock a fork could leave held.
struct nvmlGpmSample_st {
	uint32_t used;                // 1 while allocated
	unsigned gi;                  // GPU instance, or GPM_WHOLE
	nvmlDevice_t dev;             // its GPU; NULL until a sample is read into it
	uint64_t t;                   // the live clock, ns: the model's time
	uint64_t mono;                // CLOCK_MONOTONIC, ns: which sample came first
};
static struct nvmlGpmSample_st samples[GPM_SAMPLES];
static unsigned next_free;

static int gpm_device(const struct nvmock_dev *d)
{
	uint32_t a = d->s->architecture;
	return a != NA32 && a != NVML_DEVICE_ARCH_UNKNOWN && a >= NVML_DEVICE_ARCH_HOPPER;
}

static struct nvmlGpmSample_st *sample_of(nvmlGpmSample_t s)
{
	uintptr_t off = (uintptr_t)s.handle - (uintptr_t)samples;
	if (off >= sizeof samples || off % sizeof samples[0])
		return NULL;
	struct nvmlGpmSample_st *p = s.handle;
	return __atomic_load_n(&p->used, __ATOMIC_ACQUIRE) ? p : NULL;
}

NVML_API nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
	struct mig_dev md;
	const struct nvmock_dev *d;
	if (nvmock_is_mig_handle(device)) {
		nvmlReturn_t r = nvmock_mig_of(device, &md);
		if (r != NVML_SUCCESS)
			return r;
		d = md.ci->dev;
	} else {
		nvmlReturn_t r = nvmock_dev_of(device, &d);
		if (r != NVML_SUCCESS)
			return r;
	}
	OUT(gpmSupport);
	if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	gpmSupport->isSupportedDevice = (unsigned)gpm_device(d);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(gpmSample);
	unsigned start = __atomic_load_n(&next_free, __ATOMIC_RELAXED);
	for (unsigned i = 0; i < GPM_SAMPLES; i++) {
		struct nvmlGpmSample_st *p = &samples[(start + i) % GPM_SAMPLES];
		uint32_t free_ = 0;
		if (__atomic_compare_exchange_n(&p->used, &free_, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			p->dev.handle = NULL, p->gi = GPM_WHOLE, p->t = 0, p->mono = 0;
			__atomic_store_n(&next_free, (start + i + 1) % GPM_SAMPLES, __ATOMIC_RELAXED);
			gpmSample->handle = p;
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_MEMORY;
}

NVML_API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	struct nvmlGpmSample_st *p = sample_of(gpmSample);
	uint32_t used = 1;
	if (p == NULL || !__atomic_compare_exchange_n(&p->used, &used, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return NVML_ERROR_INVALID_ARGUMENT;
	return NVML_SUCCESS;
}

static nvmlReturn_t take(const struct nvmock_dev *d, unsigned gi, nvmlGpmSample_t gpmSample)
{
	struct nvmlGpmSample_st *s = sample_of(gpmSample);
	if (s == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!gpm_device(d))
		return NVML_ERROR_NOT_SUPPORTED;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->dev = nvmock_handle(d), s->gi = gi, s->t = nvmock_live_now();
	s->mono = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
	if (nvmock_is_mig_handle(device)) {
		struct mig_dev md;
		nvmlReturn_t r = nvmock_mig_of(device, &md);
		return r != NVML_SUCCESS ? r : take(md.ci->dev, md.ci->gi, gpmSample);
	}
	DEV(device, d);
	return take(d, GPM_WHOLE, gpmSample);
}

NVML_API nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId, nvmlGpmSample_t gpmSample)
{
	DEV(device, d);
	if (!gpm_device(d))
		return NVML_ERROR_NOT_SUPPORTED;
	struct mig_state m;
	nvmock_mig_read(d, &m);
	if (m.current != NVML_DEVICE_MIG_ENABLE)
		return NVML_ERROR_NOT_SUPPORTED;
	if (gpuInstanceId >= STATE_GIS || m.gi_profile[gpuInstanceId] == 0)
		return NVML_ERROR_NOT_FOUND;
	return take(d, gpuInstanceId, gpmSample);
}

// activity is the mean over [t1, t2) of one engine's utilization, in the
// model's 100 ms slots (at most 1000 of them are read); at t1 alone when
// the two are one.
static double activity(const struct nvmock_dev *d, unsigned engine, uint64_t t1, uint64_t t2)
{
	if (t2 < t1)
		t1 = t2; // the wall clock stepped back between them: the later reading
	struct live_gpu g;
	if (!nvmock_live_read(d->node_index, &g)) {
		uint32_t v[4] = {d->s->util_gpu, d->s->util_memory, d->s->util_encoder, d->s->util_decoder};
		return v[engine] == NA32 ? 0 : v[engine];
	}
	// The points are t1 + k * step for k < n, each before t2 (or t1 alone),
	// so none is past 2^64 whatever the gap: a running t += step could wrap
	// there and never reach t2.
	uint64_t gap = t2 - t1, step = 100000000ull;
	if (gap / step > 1000)
		step = gap / 1000;
	uint64_t n = gap / step + (gap % step != 0);
	if (n == 0)
		n = 1;
	double sum = 0;
	for (uint64_t k = 0; k < n; k++)
		sum += nvmock_live_util(d->node_index, &g, engine, t1 + k * step);
	return sum / (double)n;
}

static double media(uint32_t v)
{
	return v == NA32 ? -1.0 : (double)v;
}

// metric is one metric between the two samples: NOT_SUPPORTED for what the
// model has no reading for, or what the board lacks.
static nvmlReturn_t metric(const struct nvmock_dev *d, const struct nvmlGpmSample_st *a, const struct nvmlGpmSample_st *b,
			   unsigned id, double *v)
{
	const struct snap_device *s = d->s;
	switch (id) {
	case NVML_GPM_METRIC_GRAPHICS_UTIL:
	case NVML_GPM_METRIC_SM_UTIL: *v = activity(d, 0, a->t, b->t); return NVML_SUCCESS;
	case NVML_GPM_METRIC_DRAM_BW_UTIL: *v = activity(d, 1, a->t, b->t); return NVML_SUCCESS;
	case NVML_GPM_METRIC_PCIE_TX_PER_SEC:
	case NVML_GPM_METRIC_PCIE_RX_PER_SEC: {
		uint32_t kb = id == NVML_GPM_METRIC_PCIE_TX_PER_SEC ? s->pcie_tx_kbps : s->pcie_rx_kbps;
		if (kb == NA32 || a->gi != GPM_WHOLE)
			return NVML_ERROR_NOT_SUPPORTED;
		*v = kb / 1024.0; // KB/s to MiB/s
		return NVML_SUCCESS;
	}
	}
	if (id >= NVML_GPM_METRIC_NVDEC_0_UTIL && id <= NVML_GPM_METRIC_NVDEC_7_UTIL) {
		if (s->util_decoder == NA32)
			return NVML_ERROR_NOT_SUPPORTED;
		*v = activity(d, 3, a->t, b->t);
		return NVML_SUCCESS;
	}
	if (id >= NVML_GPM_METRIC_NVENC_0_UTIL && id <= NVML_GPM_METRIC_NVENC_3_UTIL) {
		if (s->util_encoder == NA32)
			return NVML_ERROR_NOT_SUPPORTED;
		*v = activity(d, 2, a->t, b->t);
		return NVML_SUCCESS;
	}
	double m = -1;
	if (id >= NVML_GPM_METRIC_NVJPG_0_UTIL && id <= NVML_GPM_METRIC_NVJPG_7_UTIL)
		m = media(s->util_jpeg);
	else if (id == NVML_GPM_METRIC_NVOFA_0_UTIL || id == NVML_GPM_METRIC_NVOFA_1_UTIL)
		m = media(s->util_ofa);
	else if (s->nvlink_count > 0 && a->gi == GPM_WHOLE &&
		 (id == NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC || id == NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC))
		m = 0;
	else if (a->gi == GPM_WHOLE) {
		unsigned link = ~0u;
		if (id >= NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC && id <= NVML_GPM_METRIC_NVLINK_L17_TX_PER_SEC)
			link = (id - NVML_GPM_METRIC_NVLINK_L0_RX_PER_SEC) / 2;
		else if (id >= NVML_GPM_METRIC_NVLINK_L18_RX_PER_SEC && id <= NVML_GPM_METRIC_NVLINK_L35_TX_PER_SEC)
			link = 18 + (id - NVML_GPM_METRIC_NVLINK_L18_RX_PER_SEC) / 2;
		if (link < s->nvlink_count)
			m = 0; // no NVLink traffic is modelled
	}
	if (m < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*v = m;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	OUT(metricsGet);
	if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
		return NVML_ERROR_INVALID_ARGUMENT;
	const struct nvmlGpmSample_st *a = sample_of(metricsGet->sample1), *b = sample_of(metricsGet->sample2);
	// Two samples read, of one GPU or instance, the second not taken before
	// the first. The order is the monotonic clock's: the wall clock that
	// times the model may step back (NTP), where a GPU's counters do not.
	if (a == NULL || b == NULL || a->dev.handle == NULL || a->dev.handle != b->dev.handle || a->gi != b->gi ||
	    b->mono < a->mono)
		return NVML_ERROR_INVALID_ARGUMENT;
	// Checked again: the GPU may be lost since, or gone with a new init.
	DEV(a->dev, d);
	for (unsigned i = 0; i < metricsGet->numMetrics; i++) {
		nvmlGpmMetric_t *m = &metricsGet->metrics[i];
		m->value = 0;
		m->metricInfo = (nvmlGpmMetricMetricInfo_t){NULL, NULL, NULL}; // nvml.h: may be NULL
		m->nvmlReturn = metric(d, a, b, m->metricId, &m->value);
	}
	return NVML_SUCCESS;
}

// The stream state is the node's, set by root as the other settings.
NVML_API nvmlReturn_t nvmlGpmQueryIfStreamingEnabled(nvmlDevice_t device, unsigned int *state)
{
	DEV(device, d);
	OUT(state);
	if (!gpm_device(d))
		return NVML_ERROR_NOT_SUPPORTED;
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	*state = set != NULL && (set->cfg_set & LIVE_CFG_GPM_STREAM) && set->gpm_stream == NVML_FEATURE_ENABLED
			 ? NVML_FEATURE_ENABLED
			 : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpmSetStreamingEnabled(nvmlDevice_t device, unsigned int state)
{
	DEV(device, d);
	if (!gpm_device(d))
		return NVML_ERROR_NOT_SUPPORTED;
	if (state != NVML_FEATURE_DISABLED && state != NVML_FEATURE_ENABLED)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_setting(d, LIVE_CFG_GPM_STREAM, state);
}
