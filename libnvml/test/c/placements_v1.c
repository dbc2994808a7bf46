// The first nvmlDeviceGetGpuInstancePossiblePlacements: its caller sizes
// the buffer by the profile's instance count (R450's nvml.h). For each
// profile GPU 0 has, it prints "profile ID: N of M" and exits 1 if an
// entry past M was written.
#include <stdio.h>
#include <string.h>
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

int main(void)
{
	nvmlDevice_t d;
	if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &d) != NVML_SUCCESS)
		return 2;
	int bad = 0;
	for (unsigned p = 0; p < NVML_GPU_INSTANCE_PROFILE_COUNT; p++) {
		nvmlGpuInstanceProfileInfo_t info;
		if (nvmlDeviceGetGpuInstanceProfileInfo(d, p, &info) != NVML_SUCCESS)
			continue;
		nvmlGpuInstancePlacement_t pl[8];
		memset(pl, 0xab, sizeof pl);
		unsigned n = info.instanceCount;
		nvmlReturn_t r = nvmlDeviceGetGpuInstancePossiblePlacements(d, info.id, pl, &n);
		printf("profile %u: %s, %u of %u\n", info.id, nvmlErrorString(r), n, info.instanceCount);
		for (unsigned i = info.instanceCount; i < 8; i++)
			if (pl[i].start != 0xabababab)
				bad = 1;
	}
	unsigned n = 0;
	printf("no buffer: %s\n", nvmlErrorString(nvmlDeviceGetGpuInstancePossiblePlacements(d, 19, NULL, &n)));
	nvmlShutdown();
	return bad;
}
