// fork checks the library in forked children of a threaded process: the
// parent initialises NVML, starts a thread that keeps calling into the
// library (init/shutdown pairs, event sets, getters), and forks children
// while it runs. Each child shuts NVML down completely, initialises it
// again, makes its share of getter calls over every GPU, checks each
// answer, and exits 0. A lock held by the thread at fork time, or any state
// that does not survive fork, shows up as a hung or failing child.
//
// Usage: fork [-events] CHILDREN CALLS GPUS MEMORY_TOTAL MEMORY_USED TEMPERATURE TIMEOUT_S
//   GPUS, MEMORY_* (bytes, nvmlMemory_t v1: used includes reserved) and
//   TEMPERATURE (C) are what every GPU must report. With -events the thread
//   also creates and frees event sets, and each child does so once after
//   re-init: the event-set table has a lock of its own.
// Prints "fork: N children x M calls ok" and exits 0, or one line per
// problem and exits 1.
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <dlfcn.h>
#include <errno.h>
#include <nvml.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// nvmlDeviceGetTemperature is deprecated in newer headers, but it is what
// driver 535's clients (nvidia-smi, pynvml, the device plugin) call.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define MAX_GPUS 64
#define MAX_CHILDREN 256

// The library's entry points, resolved with dlsym as a runtime would.
static struct {
	__typeof__(nvmlInit_v2) *init;
	__typeof__(nvmlShutdown) *shutdown;
	__typeof__(nvmlErrorString) *error_string;
	__typeof__(nvmlDeviceGetCount_v2) *count;
	__typeof__(nvmlDeviceGetHandleByIndex_v2) *handle_by_index;
	__typeof__(nvmlDeviceGetMemoryInfo) *memory_info;
	__typeof__(nvmlDeviceGetTemperature) *temperature;
	__typeof__(nvmlEventSetCreate) *event_set_create;
	__typeof__(nvmlEventSetFree) *event_set_free;
} nvml;

static struct {
	unsigned gpus;
	unsigned long long total, used;
	unsigned temp;
} want;

static int use_events;
static unsigned timeout_s;
static pid_t children[MAX_CHILDREN];
static int nchildren;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fork: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);
	if (p == NULL)
		die("dlsym %s: %s", name, dlerror());
	return p;
}

static void load(void)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL)
		die("dlopen libnvidia-ml.so.1 (set LD_LIBRARY_PATH): %s", dlerror());
	nvml.init = sym(lib, "nvmlInit_v2");
	nvml.shutdown = sym(lib, "nvmlShutdown");
	nvml.error_string = sym(lib, "nvmlErrorString");
	nvml.count = sym(lib, "nvmlDeviceGetCount_v2");
	nvml.handle_by_index = sym(lib, "nvmlDeviceGetHandleByIndex_v2");
	nvml.memory_info = sym(lib, "nvmlDeviceGetMemoryInfo");
	nvml.temperature = sym(lib, "nvmlDeviceGetTemperature");
	nvml.event_set_create = sym(lib, "nvmlEventSetCreate");
	nvml.event_set_free = sym(lib, "nvmlEventSetFree");
}

static const char *err(nvmlReturn_t r)
{
	const char *s = nvml.error_string(r);
	return s ? s : "(NULL)";
}

// handles fetches every GPU's handle and checks the count.
static int handles(const char *who, nvmlDevice_t *h)
{
	unsigned n = 0;
	nvmlReturn_t r = nvml.count(&n);
	if (r != NVML_SUCCESS) {
		fprintf(stderr, "fork: %s: nvmlDeviceGetCount_v2: %s\n", who, err(r));
		return -1;
	}
	if (n != want.gpus) {
		fprintf(stderr, "fork: %s: %u GPUs, want %u\n", who, n, want.gpus);
		return -1;
	}
	for (unsigned i = 0; i < n; i++) {
		r = nvml.handle_by_index(i, &h[i]);
		if (r != NVML_SUCCESS) {
			fprintf(stderr, "fork: %s: nvmlDeviceGetHandleByIndex_v2(%u): %s\n", who, i, err(r));
			return -1;
		}
	}
	return 0;
}

// one makes call number i (a getter on GPU i % gpus) and checks the answer.
static int one(const char *who, const nvmlDevice_t *h, unsigned long i)
{
	unsigned g = (unsigned)(i % want.gpus);
	nvmlReturn_t r;
	switch ((i / want.gpus) % 3) {
	case 0: {
		nvmlDevice_t d;
		r = nvml.handle_by_index(g, &d);
		if (r == NVML_SUCCESS && d.handle != h[g].handle) {
			fprintf(stderr, "fork: %s: call %lu: handle of GPU %u changed\n", who, i, g);
			return -1;
		}
		break;
	}
	case 1: {
		nvmlMemory_t m;
		r = nvml.memory_info(h[g], &m);
		if (r == NVML_SUCCESS && (m.total != want.total || m.used != want.used || m.free != want.total - want.used)) {
			fprintf(stderr, "fork: %s: call %lu: GPU %u memory total/used/free %llu/%llu/%llu, want %llu/%llu/%llu\n",
				who, i, g, m.total, m.used, m.free, want.total, want.used, want.total - want.used);
			return -1;
		}
		break;
	}
	default: {
		unsigned t;
		r = nvml.temperature(h[g], NVML_TEMPERATURE_GPU, &t);
		if (r == NVML_SUCCESS && t != want.temp) {
			fprintf(stderr, "fork: %s: call %lu: GPU %u temperature %u, want %u\n", who, i, g, t, want.temp);
			return -1;
		}
		break;
	}
	}
	if (r != NVML_SUCCESS) {
		fprintf(stderr, "fork: %s: call %lu on GPU %u: %s\n", who, i, g, err(r));
		return -1;
	}
	return 0;
}

// event_set creates and frees one event set.
static int event_set(const char *who)
{
	nvmlEventSet_t set;
	nvmlReturn_t r = nvml.event_set_create(&set);
	if (r == NVML_SUCCESS)
		r = nvml.event_set_free(set);
	if (r != NVML_SUCCESS) {
		fprintf(stderr, "fork: %s: event set: %s\n", who, err(r));
		return -1;
	}
	return 0;
}

// A child names the step it hangs in, shortly before the parent gives up.
static char child_who[32];
static const char *volatile child_step = "start";

static void on_child_alarm(int sig)
{
	(void)sig;
	char line[160];
	int n = snprintf(line, sizeof line, "fork: %s: hung in %s\n", child_who, child_step);
	ssize_t w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
	_exit(2);
}

// child runs in a forked process and never returns.
static void child(int k, unsigned long calls, pid_t parent)
{
	char *who = child_who;
	snprintf(child_who, sizeof child_who, "child %d", k);
	// A hung child must not outlive a parent killed by a test timeout.
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(1);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_child_alarm;
	sigaction(SIGALRM, &sa, NULL);
	alarm(timeout_s > 3 ? timeout_s - 2 : 1);
	child_step = "nvmlShutdown, dropping the references inherited from the parent";
	// Shut down completely (the thread may have held an extra reference at
	// fork time), so the init below loads everything again.
	int shutdowns = 0;
	nvmlReturn_t r;
	while ((r = nvml.shutdown()) == NVML_SUCCESS)
		if (++shutdowns > 16)
			break;
	if (shutdowns == 0 || shutdowns > 16 || r != NVML_ERROR_UNINITIALIZED) {
		fprintf(stderr, "fork: %s: %d shutdowns, then %s; want 1 or 2, then Uninitialized\n", who, shutdowns,
			err(r));
		_exit(1);
	}
	child_step = "nvmlInit_v2 after the full shutdown";
	if ((r = nvml.init()) != NVML_SUCCESS) {
		fprintf(stderr, "fork: %s: nvmlInit_v2: %s\n", who, err(r));
		_exit(1);
	}
	child_step = "nvmlEventSetCreate/nvmlEventSetFree";
	if (use_events && event_set(who) != 0)
		_exit(1);
	child_step = "the getter calls";
	nvmlDevice_t h[MAX_GPUS];
	if (handles(who, h) != 0)
		_exit(1);
	for (unsigned long i = 0; i < calls; i++)
		if (one(who, h, i) != 0)
			_exit(1);
	child_step = "the final nvmlShutdown";
	if ((r = nvml.shutdown()) != NVML_SUCCESS) {
		fprintf(stderr, "fork: %s: nvmlShutdown: %s\n", who, err(r));
		_exit(1);
	}
	_exit(0);
}

static volatile int stop;
static unsigned long thread_calls;

// busy keeps the library's locks and state in use while the parent forks.
static void *busy(void *arg)
{
	const nvmlDevice_t *h = arg;
	for (unsigned long i = 0; !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); i++) {
		nvmlReturn_t r;
		if ((r = nvml.init()) != NVML_SUCCESS) {
			fprintf(stderr, "fork: thread: nvmlInit_v2: %s\n", err(r));
			return (void *)1;
		}
		if (use_events && event_set("thread") != 0)
			return (void *)1;
		if (one("thread", h, i) != 0)
			return (void *)1;
		if ((r = nvml.shutdown()) != NVML_SUCCESS) {
			fprintf(stderr, "fork: thread: nvmlShutdown: %s\n", err(r));
			return (void *)1;
		}
		thread_calls = i + 1;
	}
	return NULL;
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char msg[] = "fork: timeout: killed the children still running\n";
	ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
	(void)n;
	for (int i = 0; i < nchildren; i++)
		if (children[i] > 0)
			kill(children[i], SIGKILL);
	_exit(1);
}

static unsigned long long number(const char *what, const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || *s == '\0' || *end != '\0')
		die("%s: \"%s\" is not a number", what, s);
	return v;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-events") == 0) {
		use_events = 1;
		argc--, argv++;
	}
	if (argc != 8)
		die("usage: fork [-events] CHILDREN CALLS GPUS MEMORY_TOTAL MEMORY_USED TEMPERATURE TIMEOUT_S");
	int nkids = (int)number("CHILDREN", argv[1]);
	unsigned long calls = (unsigned long)number("CALLS", argv[2]);
	want.gpus = (unsigned)number("GPUS", argv[3]);
	want.total = number("MEMORY_TOTAL", argv[4]);
	want.used = number("MEMORY_USED", argv[5]);
	want.temp = (unsigned)number("TEMPERATURE", argv[6]);
	timeout_s = (unsigned)number("TIMEOUT_S", argv[7]);
	if (nkids < 1 || nkids > MAX_CHILDREN || want.gpus < 1 || want.gpus > MAX_GPUS)
		die("CHILDREN must be 1..%d and GPUS 1..%d", MAX_CHILDREN, MAX_GPUS);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	alarm(timeout_s);

	load();
	nvmlReturn_t r = nvml.init();
	if (r != NVML_SUCCESS)
		die("parent: nvmlInit_v2: %s", err(r));
	nvmlDevice_t h[MAX_GPUS];
	if (handles("parent", h) != 0)
		return 1;

	pthread_t thread;
	if (pthread_create(&thread, NULL, busy, h) != 0)
		die("pthread_create: %m");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t self = getpid();
	for (int k = 0; k < nkids; k++) {
		fflush(NULL);
		pid_t pid = fork();
		if (pid < 0)
			die("fork: %m");
		if (pid == 0)
			child(k, calls, self);
		children[nchildren++] = pid;
		usleep(1000); // let the thread move on, so forks land in different places
	}

	int failed = 0;
	for (int done = 0; done < nchildren;) {
		int status;
		pid_t pid = waitpid(-1, &status, 0);
		if (pid < 0) {
			if (errno == EINTR)
				continue;
			die("waitpid: %m");
		}
		int k = 0;
		while (k < nchildren && children[k] != pid)
			k++;
		if (k == nchildren)
			continue;
		children[k] = -1;
		done++;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			continue;
		failed++;
		if (WIFSIGNALED(status))
			fprintf(stderr, "fork: child %d: killed by signal %d (%s)\n", k, WTERMSIG(status),
				strsignal(WTERMSIG(status)));
		else
			fprintf(stderr, "fork: child %d: exit status %d\n", k, WEXITSTATUS(status));
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);

	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	void *thread_ret;
	pthread_join(thread, &thread_ret);
	if (thread_ret != NULL)
		failed++;
	// The parent's own state survived all of it.
	for (unsigned long i = 0; i < 3 * want.gpus; i++)
		if (one("parent", h, i) != 0)
			failed++;
	if ((r = nvml.shutdown()) != NVML_SUCCESS) {
		fprintf(stderr, "fork: parent: nvmlShutdown: %s\n", err(r));
		failed++;
	}
	if (failed) {
		fprintf(stderr, "fork: %d failures\n", failed);
		return 1;
	}
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("fork: %d children x %lu calls ok in %.2f s (thread made %lu rounds meanwhile%s)\n", nchildren, calls,
	       secs, thread_calls, use_events ? ", with event sets" : "");
	return 0;
}
