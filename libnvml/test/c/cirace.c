// A compute instance created through a GPU instance that another process
// replaced between the handle's lookup and the writers' lock (destroyed,
// and one of another profile given its id): this program's flock, which
// the library's calls reach before libc's, makes that change at that
// moment. It prints the create's answer and the id's profile after.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <sys/file.h>
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

static nvmlDevice_t dev;
static nvmlGpuInstance_t gi;
static int armed;

int flock(int fd, int op)
{
	static int (*real)(int, int);
	if (real == NULL)
		real = (int (*)(int, int))dlsym(RTLD_NEXT, "flock");
	if (armed && (op & LOCK_EX)) {
		armed = 0;
		nvmlGpuInstanceProfileInfo_t p;
		nvmlGpuInstance_t a, b;
		printf("destroy: %s\n", nvmlErrorString(nvmlGpuInstanceDestroy(gi)));
		nvmlDeviceGetGpuInstanceProfileInfo(dev, NVML_GPU_INSTANCE_PROFILE_3_SLICE, &p);
		printf("3g: %s, ", nvmlErrorString(nvmlDeviceCreateGpuInstance(dev, p.id, &a)));
		printf("%s\n", nvmlErrorString(nvmlDeviceCreateGpuInstance(dev, p.id, &b)));
	}
	return real(fd, op);
}

int main(void)
{
	nvmlGpuInstanceProfileInfo_t p3, p4;
	nvmlGpuInstanceInfo_t info;
	nvmlComputeInstance_t ci;
	nvmlGpuInstance_t now;

	if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &dev) != NVML_SUCCESS ||
	    nvmlDeviceGetGpuInstanceProfileInfo(dev, NVML_GPU_INSTANCE_PROFILE_3_SLICE, &p3) != NVML_SUCCESS ||
	    nvmlDeviceGetGpuInstanceProfileInfo(dev, NVML_GPU_INSTANCE_PROFILE_4_SLICE, &p4) != NVML_SUCCESS)
		return 2;
	nvmlReturn_t r = nvmlDeviceCreateGpuInstance(dev, p4.id, &gi);
	if (r != NVML_SUCCESS || nvmlGpuInstanceGetInfo(gi, &info) != NVML_SUCCESS) {
		printf("4g: %s\n", nvmlErrorString(r));
		return 3;
	}
	unsigned id = info.id;
	armed = 1;
	r = nvmlGpuInstanceCreateComputeInstance(gi, NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, &ci);
	printf("4c.4g create: %s\n", nvmlErrorString(r));
	if (nvmlDeviceGetGpuInstanceById(dev, id, &now) == NVML_SUCCESS && nvmlGpuInstanceGetInfo(now, &info) == NVML_SUCCESS)
		printf("GI %u: %s\n", id, info.profileId == p3.id ? "3g" : info.profileId == p4.id ? "4g" : "other");
	nvmlShutdown();
	return 0;
}
