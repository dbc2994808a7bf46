// Clocks, performance state, power and temperatures.
#include "nvmock.h"

static nvmlReturn_t clock_of(const uint32_t set[4], nvmlClockType_t type, unsigned int *mhz)
{
	if ((unsigned)type >= 4)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_u32(set[type], mhz);
}

// current_clock is the clock now: the snapshot's, or the model's, within
// any locked range (nvmock_locked_clock).
static nvmlReturn_t current_clock(const struct nvmock_dev *d, nvmlClockType_t type, unsigned int *mhz)
{
	nvmlReturn_t r = clock_of(d->s->clock, type, mhz);
	if (r != NVML_SUCCESS)
		return r;
	LIVE(d);
	if (live_) {
		*mhz = nvmock_live_clock(d, &g_, &fx_, type, now_);
		return NVML_SUCCESS;
	}
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	if (set != NULL)
		*mhz = nvmock_locked_clock(d, set, type, *mhz);
	return NVML_SUCCESS;
}

// app_clock is the applications clock: nvidia-smi -ac's, else the board's.
static nvmlReturn_t app_clock(const struct nvmock_dev *d, nvmlClockType_t type, unsigned int *mhz)
{
	nvmlReturn_t r = clock_of(d->s->app_clock, type, mhz);
	if (r != NVML_SUCCESS)
		return r;
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	if (set == NULL || !(set->cfg_set & LIVE_CFG_APP_CLOCKS) || type == NVML_CLOCK_VIDEO)
		return NVML_SUCCESS;
	*mhz = type == NVML_CLOCK_MEM ? set->app_clock_mem : set->app_clock_gfx;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
	DEV(device, d);
	return current_clock(d, type, clock);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
	DEV(device, d);
	return clock_of(d->s->max_clock, type, clock);
}

NVML_API nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
	DEV(device, d);
	return app_clock(d, clockType, clockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
							    unsigned int *clockMHz)
{
	DEV(device, d);
	return clock_of(d->s->default_app_clock, clockType, clockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
							 unsigned int *clockMHz)
{
	DEV(device, d);
	return clock_of(d->s->max_boost_clock, clockType, clockMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
					 unsigned int *clockMHz)
{
	DEV(device, d);
	switch (clockId) {
	case NVML_CLOCK_ID_CURRENT: return current_clock(d, clockType, clockMHz);
	case NVML_CLOCK_ID_APP_CLOCK_TARGET: return app_clock(d, clockType, clockMHz);
	case NVML_CLOCK_ID_APP_CLOCK_DEFAULT: return clock_of(d->s->default_app_clock, clockType, clockMHz);
	case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX: return clock_of(d->s->max_boost_clock, clockType, clockMHz);
	default: return NVML_ERROR_INVALID_ARGUMENT;
	}
}

// copy_list fills a caller's array, or says how big it must be.
static nvmlReturn_t copy_list(const uint32_t *src, unsigned n, unsigned int *count, unsigned int *dst)
{
	OUT(count);
	if (n == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	if (*count < n || dst == NULL) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	for (unsigned i = 0; i < n; i++)
		dst[i] = src[i];
	*count = n;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count, unsigned int *clocksMHz)
{
	DEV(device, d);
	return copy_list(nvmock.pool + d->s->supported_mem_first, d->s->supported_mem_count, count, clocksMHz);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
							   unsigned int *count, unsigned int *clocksMHz)
{
	DEV(device, d);
	OUT(count);
	const struct snap_device *s = d->s;
	for (unsigned k = 0; k < s->supported_mem_count; k++)
		if (nvmock.pool[s->supported_mem_first + k] == memoryClockMHz)
			return copy_list(nvmock.pool + s->supported_gfx_first[k], s->supported_gfx_count[k], count, clocksMHz);
	return s->supported_mem_count ? NVML_ERROR_NOT_FOUND : NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *clocksEventReasons)
{
	DEV(device, d);
	OUT(clocksEventReasons);
	if (d->s->clock_reasons_supported == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	// An idle board at its lowest clocks, as in the captures.
	*clocksEventReasons = d->s->util_gpu == 0 ? nvmlClocksEventReasonGpuIdle & d->s->clock_reasons_supported
						  : nvmlClocksEventReasonNone;
	LIVE(d);
	if (live_) {
		*clocksEventReasons = nvmock_live_reasons(d, &g_, &fx_, now_);
		return NVML_SUCCESS;
	}
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	if (set != NULL && nvmock_idle_held(d, set))
		*clocksEventReasons &= ~(unsigned long long)nvmlClocksEventReasonGpuIdle;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *clocksThrottleReasons)
{
	return nvmlDeviceGetCurrentClocksEventReasons(device, clocksThrottleReasons);
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *supportedClocksEventReasons)
{
	DEV(device, d);
	OUT(supportedClocksEventReasons);
	if (d->s->clock_reasons_supported == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	*supportedClocksEventReasons = d->s->clock_reasons_supported;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *supportedClocksThrottleReasons)
{
	return nvmlDeviceGetSupportedClocksEventReasons(device, supportedClocksThrottleReasons);
}

NVML_API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
	DEV(device, d);
	OUT(pState);
	*pState = (nvmlPstates_t)d->s->performance_state;
	return NVML_SUCCESS;
}

// The board's one performance state is the only one the mock shows (it
// does not move with load), so it is the list: answering NOT_SUPPORTED,
// which nvml.h keeps for devices without P-state readings, contradicted
// GetPerformanceState. The rest of the list is UNKNOWN (nvml.h), which has
// at most NVML_MAX_GPU_PERF_PSTATES entries whatever size says.
NVML_API nvmlReturn_t nvmlDeviceGetSupportedPerformanceStates(nvmlDevice_t device, nvmlPstates_t *pstates, unsigned int size)
{
	DEV(device, d);
	OUT(pstates);
	unsigned n = size / sizeof *pstates;
	if (n < 1)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	if (n > NVML_MAX_GPU_PERF_PSTATES)
		n = NVML_MAX_GPU_PERF_PSTATES;
	pstates[0] = (nvmlPstates_t)d->s->performance_state;
	for (unsigned i = 1; i < n; i++)
		pstates[i] = NVML_PSTATE_UNKNOWN;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
	DEV(device, d);
	return nvmock_u32(d->s->power_state, (unsigned int *)pState);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	DEV(device, d);
	nvmlReturn_t r = nvmock_u32(d->s->power_draw_mw, power);
	if (r != NVML_SUCCESS)
		return r;
	LIVE(d);
	if (live_)
		*power = nvmock_live_power(d, &g_, &fx_, now_);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
	DEV(device, d);
	OUT(mode);
	if (d->s->power_limit_mw == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*mode = NVML_FEATURE_ENABLED;
	return NVML_SUCCESS;
}

// A limit set with nvidia-smi -pl is node state (nvmock_change_setting):
// the requested and the enforced limit both become it.
static uint32_t set_limit(const struct nvmock_dev *d, uint32_t snapshot)
{
	struct live_gpu g;
	const struct live_gpu *set = nvmock_settings(d, &g);
	if (snapshot == NA32 || set == NULL || !(set->cfg_set & LIVE_CFG_POWER_LIMIT))
		return snapshot;
	return set->power_limit_mw;
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
	DEV(device, d);
	return nvmock_u32(nvmock_requested_limit(d), limit);
}

uint32_t nvmock_enforced_limit(const struct nvmock_dev *d)
{
	return set_limit(d, d->s->power_enforced_mw);
}

uint32_t nvmock_requested_limit(const struct nvmock_dev *d)
{
	return set_limit(d, d->s->power_limit_mw);
}

NVML_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
	DEV(device, d);
	return nvmock_u32(nvmock_enforced_limit(d), limit);
}

// Root sets the limit within the board's constraints until the node is
// reinstalled, as the driver keeps it until it unloads (nvml.h).
NVML_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t device, unsigned int limit)
{
	DEV(device, d);
	const struct snap_device *s = d->s;
	if (s->power_limit_mw == NA32 || s->power_enforced_mw == NA32 || s->power_min_mw == NA32 || s->power_max_mw == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	if (limit < s->power_min_mw || limit > s->power_max_mw)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_change_setting(d, LIVE_CFG_POWER_LIMIT, limit);
}

// nvidia-smi 535 and later set the limit here, for the GPU unless -sc
// names the module. A Grace module's own limit is not modelled.
NVML_API nvmlReturn_t nvmlDeviceSetPowerManagementLimit_v2(nvmlDevice_t device, nvmlPowerValue_v2_t *powerValue)
{
	DEV(device, d);
	(void)d;
	OUT(powerValue);
	if (powerValue->version != nvmlPowerValue_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if (powerValue->powerScope >= NVML_POWER_SCOPE_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (powerValue->powerScope != NVML_POWER_SCOPE_GPU)
		return nvmock_not_supported("a power limit of a scope other than the GPU");
	return nvmlDeviceSetPowerManagementLimit(device, powerValue->powerValueMw);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
	DEV(device, d);
	return nvmock_u32(d->s->power_default_mw, defaultLimit);
}

NVML_API nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
								   unsigned int *maxLimit)
{
	DEV(device, d);
	if (minLimit == NULL || maxLimit == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (d->s->power_min_mw == NA32 || d->s->power_max_mw == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	*minLimit = d->s->power_min_mw;
	*maxLimit = d->s->power_max_mw;
	return NVML_SUCCESS;
}

// nvmock_device_energy is the GPU's energy in mJ, under the live load where
// there is one: the call and both energy fields must agree.
nvmlReturn_t nvmock_device_energy(const struct nvmock_dev *d, unsigned long long *energy)
{
	nvmlReturn_t r = nvmock_energy_mj(d->s, energy);
	if (r != NVML_SUCCESS)
		return r;
	LIVE(d);
	if (live_)
		*energy = nvmock_live_energy(d, &g_, now_);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
	DEV(device, d);
	OUT(energy);
	return nvmock_device_energy(d, energy);
}

static nvmlReturn_t temperature(const struct nvmock_dev *d, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
	if (sensorType != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t r = nvmock_u32(d->s->temp_gpu, temp);
	if (r != NVML_SUCCESS)
		return r;
	LIVE(d);
	if (live_)
		*temp = nvmock_live_temp(d, &g_, &fx_, now_);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
	DEV(device, d);
	return temperature(d, sensorType, temp);
}

// The versioned call that replaces it (deprecated from CUDA 13.0): R550's
// nvml.h has no such call, R575's has; R565, as a client's note says.
NVML_API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *t)
{
	DEV(device, d);
	SINCE(565);
	OUT(t);
	if (t->version != nvmlTemperature_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned v;
	nvmlReturn_t r = temperature(d, t->sensorType, &v);
	if (r == NVML_SUCCESS)
		t->temperature = (int)v;
	return r;
}

NVML_API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
							unsigned int *temp)
{
	DEV(device, d);
	if ((unsigned)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	return nvmock_u32(d->s->temp_threshold[thresholdType], temp);
}

NVML_API nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
	DEV(device, d);
	return nvmock_u32(d->s->fan_speed, speed);
}

NVML_API nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
	DEV(device, d);
	OUT(numFans);
	*numFans = d->s->fan_speed == NA32 ? 0 : 1;
	return NVML_SUCCESS;
}
