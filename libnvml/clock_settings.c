// Clock settings: locked GPU and memory clocks (nvidia-smi -lgc, -lmc) and
// applications clocks (-ac), kept as node state like the other settings.
#include "nvmock.h"

// gpu_held is the clock type a GPU clock lock holds.
static int gpu_held(nvmlClockType_t type)
{
	return type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM;
}

// gfx_steps finds, among the board's supported graphics clocks, the
// highest at or below c and the lowest at or above it (0: none).
static void gfx_steps(const struct snap_device *s, uint32_t c, uint32_t *below, uint32_t *above)
{
	*below = *above = 0;
	for (unsigned k = 0; k < s->supported_mem_count && k < 8; k++)
		for (unsigned j = 0; j < s->supported_gfx_count[k]; j++) {
			uint32_t v = nvmock.pool[s->supported_gfx_first[k] + j];
			if (v <= c && v > *below)
				*below = v;
			if (v >= c && (*above == 0 || v < *above))
				*above = v;
		}
}

// nvmock_gfx_step is graphics clock c on the board's steps: the highest
// supported graphics clock at or below it (the lowest if none is), as a
// real GPU's clock generator runs only at those; c itself on a board that
// lists none. Not the idle reading as a floor: T4 and L40S captures idle at
// their highest clocks, and a lock below that still holds them.
uint32_t nvmock_gfx_step(const struct snap_device *s, uint32_t c)
{
	uint32_t below, above;
	gfx_steps(s, c, &below, &above);
	return below != 0 ? below : above != 0 ? above : c;
}

// nvmock_locked_clock is clock c held in the range nvidia-smi -lgc (graphics
// and SM clocks) or -lmc (memory) locked, if one is. A range past the
// board's clocks holds them at its highest and lowest, as a real board
// does (a lock at 2500 MHz runs at an H100's 1980 MHz maximum); memory runs only
// at its supported clocks, the highest one in the range.
uint32_t nvmock_locked_clock(const struct nvmock_dev *d, const struct live_gpu *g, nvmlClockType_t type, uint32_t c)
{
	const struct snap_device *s = d->s;
	if (gpu_held(type) && (g->cfg_set & LIVE_CFG_GPU_LOCKED) && c != NA32) {
		if (c < g->gpu_locked_min)
			c = g->gpu_locked_min;
		if (c > g->gpu_locked_max)
			c = g->gpu_locked_max;
		if (s->max_clock[type] != NA32 && c > s->max_clock[type])
			c = s->max_clock[type];
		// On a step inside the range: the one below, else the range's
		// lowest step.
		uint32_t v = nvmock_gfx_step(s, c), below, up;
		gfx_steps(s, g->gpu_locked_min, &below, &up);
		c = v < g->gpu_locked_min && up != 0 && up <= g->gpu_locked_max ? up : v;
	}
	if (type == NVML_CLOCK_MEM && (g->cfg_set & LIVE_CFG_MEM_LOCKED)) {
		uint32_t best = 0;
		for (unsigned k = 0; k < s->supported_mem_count; k++) {
			uint32_t v = nvmock.pool[s->supported_mem_first + k];
			if (v >= g->mem_locked_min && v <= g->mem_locked_max && v > best)
				best = v;
		}
		if (best != 0)
			c = best;
	}
	return c;
}

// nvmock_idle_held says whether a lock holds an idle GPU's clock above its
// idle clock: it is then not reported idle (GpuIdle), as on a real board
// with locked clocks.
int nvmock_idle_held(const struct nvmock_dev *d, const struct live_gpu *g)
{
	uint32_t idle = d->s->clock[NVML_CLOCK_GRAPHICS];
	return (g->cfg_set & LIVE_CFG_GPU_LOCKED) && idle != NA32 && g->gpu_locked_min > idle;
}

// Volta and later lock GPU clocks; Ampere and later memory clocks.
static int locks(const struct snap_device *s, nvmlClockType_t type, uint32_t since)
{
	return s->max_clock[type] != NA32 && s->architecture != NA32 && s->architecture != NVML_DEVICE_ARCH_UNKNOWN &&
	       s->architecture >= since;
}

NVML_API nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nvmlDevice_t device, unsigned int minGpuClockMHz, unsigned int maxGpuClockMHz)
{
	DEV(device, d);
	if (!locks(d->s, NVML_CLOCK_GRAPHICS, NVML_DEVICE_ARCH_VOLTA))
		return NVML_ERROR_NOT_SUPPORTED;
	int lo = minGpuClockMHz >= NVML_CLOCK_LIMIT_ID_RANGE_START, hi = maxGpuClockMHz >= NVML_CLOCK_LIMIT_ID_RANGE_START;
	if (lo != hi) // numbers and names do not mix
		return NVML_ERROR_INVALID_ARGUMENT;
	if (lo) {
		if (minGpuClockMHz == NVML_CLOCK_LIMIT_ID_RANGE_START || maxGpuClockMHz == NVML_CLOCK_LIMIT_ID_RANGE_START ||
		    minGpuClockMHz > NVML_CLOCK_LIMIT_ID_UNLIMITED || maxGpuClockMHz > NVML_CLOCK_LIMIT_ID_UNLIMITED)
			return NVML_ERROR_INVALID_ARGUMENT;
		if (minGpuClockMHz == NVML_CLOCK_LIMIT_ID_UNLIMITED && maxGpuClockMHz == NVML_CLOCK_LIMIT_ID_UNLIMITED)
			return nvmock_reset_setting(d, LIVE_CFG_GPU_LOCKED);
		return nvmock_not_supported("a GPU clock lock at TDP (the board's TDP clock is not modelled)");
	}
	if (minGpuClockMHz > maxGpuClockMHz)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_pair(d, LIVE_CFG_GPU_LOCKED, minGpuClockMHz, maxGpuClockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nvmlDevice_t device)
{
	DEV(device, d);
	if (!locks(d->s, NVML_CLOCK_GRAPHICS, NVML_DEVICE_ARCH_VOLTA))
		return NVML_ERROR_NOT_SUPPORTED;
	return nvmock_reset_setting(d, LIVE_CFG_GPU_LOCKED);
}

NVML_API nvmlReturn_t nvmlDeviceSetMemoryLockedClocks(nvmlDevice_t device, unsigned int minMemClockMHz, unsigned int maxMemClockMHz)
{
	DEV(device, d);
	if (!locks(d->s, NVML_CLOCK_MEM, NVML_DEVICE_ARCH_AMPERE))
		return NVML_ERROR_NOT_SUPPORTED;
	if (minMemClockMHz > maxMemClockMHz)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_pair(d, LIVE_CFG_MEM_LOCKED, minMemClockMHz, maxMemClockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceResetMemoryLockedClocks(nvmlDevice_t device)
{
	DEV(device, d);
	if (!locks(d->s, NVML_CLOCK_MEM, NVML_DEVICE_ARCH_AMPERE))
		return NVML_ERROR_NOT_SUPPORTED;
	return nvmock_reset_setting(d, LIVE_CFG_MEM_LOCKED);
}

// A board sets applications clocks it lists (nvidia-smi -q -d
// SUPPORTED_CLOCKS): a memory clock and one of its graphics clocks.
static int supported_pair(const struct snap_device *s, unsigned mem, unsigned gfx)
{
	for (unsigned k = 0; k < s->supported_mem_count; k++) {
		if (nvmock.pool[s->supported_mem_first + k] != mem)
			continue;
		for (unsigned j = 0; j < s->supported_gfx_count[k]; j++)
			if (nvmock.pool[s->supported_gfx_first[k] + j] == gfx)
				return 1;
	}
	return 0;
}

static int app_clocks(const struct snap_device *s)
{
	return s->app_clock[NVML_CLOCK_GRAPHICS] != NA32 && s->app_clock[NVML_CLOCK_MEM] != NA32 && s->supported_mem_count > 0;
}

// app_clocks_gone: where the driver deprecated reading applications
// clocks (the L40S and T4 captures), it takes none either (nvml.h
// deprecates the setters with the getters).
static int app_clocks_gone(const struct snap_device *s)
{
	return s->app_clock[NVML_CLOCK_GRAPHICS] == DEP32 || s->app_clock[NVML_CLOCK_MEM] == DEP32;
}

// Applications clocks are kept and shown; how far they hold a loaded GPU's
// clocks is not modelled (a real A100 runs at 1410 MHz with its default
// 1095 MHz applications clocks).
NVML_API nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t device, unsigned int memClockMHz, unsigned int graphicsClockMHz)
{
	DEV(device, d);
	if (app_clocks_gone(d->s))
		return NVML_ERROR_DEPRECATED;
	if (!app_clocks(d->s))
		return NVML_ERROR_NOT_SUPPORTED;
	if (!supported_pair(d->s, memClockMHz, graphicsClockMHz))
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_pair(d, LIVE_CFG_APP_CLOCKS, memClockMHz, graphicsClockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t device)
{
	DEV(device, d);
	if (app_clocks_gone(d->s))
		return NVML_ERROR_DEPRECATED;
	if (!app_clocks(d->s))
		return NVML_ERROR_NOT_SUPPORTED;
	return nvmock_reset_setting(d, LIVE_CFG_APP_CLOCKS);
}
