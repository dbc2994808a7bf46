// lifetime: the library's answers when one thread ends what another is
// still using, and a writer that stalls inside the live state's seqlock.
//
//   lifetime STATE SEQ_OFFSET
//
// Prints one line per check; a crash is the failure these guard against.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <nvml.h>

static nvmlEventSet_t set;
static nvmlReturn_t waited;

static void *wait_2s(void *arg)
{
	(void)arg;
	nvmlEventData_t d;
	waited = nvmlEventSetWait_v2(set, &d, 2000);
	return NULL;
}

static void ms(int n)
{
	struct timespec ts = {n / 1000, (long)(n % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

// wait_while starts a 2 s wait on a new set for GPU 0's XIDs, runs end
// 50 ms into it, and prints how the wait ended.
static void wait_while(const char *what, nvmlReturn_t (*end)(void))
{
	nvmlDevice_t h;
	nvmlDeviceGetHandleByIndex_v2(0, &h);
	nvmlEventSetCreate(&set);
	nvmlDeviceRegisterEvents(h, nvmlEventTypeXidCriticalError, set);
	pthread_t t;
	pthread_create(&t, NULL, wait_2s, NULL);
	ms(50);
	nvmlReturn_t r = end();
	pthread_join(t, NULL);
	printf("%s: %s; the wait: %s\n", what, nvmlErrorString(r), nvmlErrorString(waited));
}

static nvmlReturn_t free_set(void) { return nvmlEventSetFree(set); }

static void *stall(void *arg)
{
	volatile uint32_t *seq = arg;
	uint32_t s = *seq;
	*seq = s + 1; // odd: a writer inside
	ms(20);
	*seq = s + 2;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	nvmlInit_v2();
	nvmlDevice_t before, after;
	nvmlDeviceGetHandleByIndex_v2(0, &before);
	wait_while("shutdown during a wait", nvmlShutdown);
	nvmlInit_v2();
	nvmlDeviceGetHandleByIndex_v2(0, &after);
	char name[96];
	nvmlReturn_t r = nvmlDeviceGetName(before, name, sizeof name);
	printf("handle after re-init: %s, name through the old one: %s\n", before.handle == after.handle ? "same" : "another",
	       nvmlErrorString(r));
	wait_while("free during a wait", free_set);

	char crop[4];
	r = nvmlSystemGetProcessName((unsigned)getpid(), crop, sizeof crop);
	printf("process name in 4 bytes: %s \"%s\"\n", nvmlErrorString(r), r == NVML_SUCCESS ? crop : "");
	nvmlValueType_t vt;
	nvmlSample_t samples[10];
	unsigned n = 0;
	r = nvmlDeviceGetSamples(after, NVML_GPU_UTILIZATION_SAMPLES, 0, &vt, &n, samples);
	printf("samples into a buffer of count 0: %s\n", nvmlErrorString(r));

	int fd = open(argv[1], O_RDWR);
	void *m = fd < 0 ? MAP_FAILED : mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		perror(argv[1]);
		return 2;
	}
	pthread_t t;
	pthread_create(&t, NULL, stall, (char *)m + atoi(argv[2]));
	ms(2);
	nvmlUtilization_t u;
	r = nvmlDeviceGetUtilizationRates(after, &u);
	pthread_join(t, NULL);
	printf("utilization while a writer stalls 20 ms: %s %u%%\n", nvmlErrorString(r), u.gpu);
	nvmlShutdown();
	return 0;
}
