// Shared helpers: strings, not-supported defaults, warnings.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvmock.h"

nvmlReturn_t nvmock_str(char *dst, unsigned int len, const char *src)
{
	if (dst == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (src[0] == '\0')
		return NVML_ERROR_NOT_SUPPORTED;
	size_t n = strlen(src) + 1;
	if (len < n)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, n);
	return NVML_SUCCESS;
}

int nvmock_driver_branch(void)
{
	return atoi(nvmock.hdr->driver_version);
}

// nvmock_since answers for a call that came with driver branch first: a
// driver before it has no such symbol, which pynvml reports as
// FUNCTION_NOT_FOUND (a go-nvml program calling it dies of an unresolved
// symbol). The mock exports every symbol, so it answers that error itself.
nvmlReturn_t nvmock_since(int first)
{
	return nvmock_driver_branch() < first ? NVML_ERROR_FUNCTION_NOT_FOUND : NVML_SUCCESS;
}

nvmlReturn_t nvmock_not_supported(const char *fn)
{
	if (!nvmock_ready())
		return NVML_ERROR_UNINITIALIZED;
	if (nvmock.trace)
		nvmock_warn("%s: not supported", fn);
	return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmock_not_supported_dev(const char *fn, nvmlDevice_t h)
{
	DEV(h, d);
	(void)d;
	return nvmock_not_supported(fn);
}

// nvmock_energy_mj is the energy counter: the board has drawn its modelled
// power since the node booted (when the driver loaded), so the counter grows
// with power over time, never goes back, and reads the same in every process.
nvmlReturn_t nvmock_energy_mj(const struct snap_device *s, unsigned long long *mj)
{
	if (s->power_draw_mw == NA32)
		return NVML_ERROR_NOT_SUPPORTED;
	struct timespec ts;
	if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
		return NVML_ERROR_UNKNOWN;
	unsigned long long ms = (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
	*mj = (unsigned long long)s->power_draw_mw * ms / 1000;
	return NVML_SUCCESS;
}

// nvmock_boot_time_us is when the node booted, in microseconds since the
// epoch, in whole seconds so that every process reads the same.
int nvmock_boot_time_us(unsigned long long *us)
{
	struct timespec real, boot;
	if (clock_gettime(CLOCK_REALTIME, &real) != 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
		return 0;
	*us = (unsigned long long)(real.tv_sec - boot.tv_sec - (real.tv_nsec < boot.tv_nsec)) * 1000000;
	return 1;
}

// nvmock_warn writes one line to stderr; stdout belongs to the caller.
void nvmock_warn(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	fprintf(stderr, "nvmock: %s\n", line);
}
