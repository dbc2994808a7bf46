// torture calls every exported NVML function (the table in torture_gen.c)
// through the C ABI in a series of hostile modes: NULL and garbage handles,
// NULL and scratch pointers, zero, one and 0xff-filled scalars, before init
// and after shutdown. It prints one line per broken rule and a summary:
//
//	torture: 6513 calls, 0 violations
//
// Rules: no call crashes, hangs or writes to stdout; every nvmlReturn_t is
// a value of the enum; a NULL or foreign nvmlDevice_t gives
// NVML_ERROR_INVALID_ARGUMENT; before init and after shutdown every call
// gives NVML_ERROR_UNINITIALIZED; nvmlErrorString never returns NULL.
//
// Usage: torture [-v]   (-v prints every call's result)
// Exit: 0 clean, 1 violations, 2 setup failed, 3 a call hung.
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "torture.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define TORTURE_ASAN 1
#else
#define TORTURE_ASAN 0
#endif

#define MAX_ARGS 8
#define MAX_GPUS 64
#define SCRATCH_SIZE (1u << 20)
#define CALL_TIMEOUT_S 10
#define MAX_CRASHES 50

static const struct mode before_init[] = {
	{"uninit-null", "before nvmlInit: NULL pointers, zero scalars, NULL handles", PTR_NULL, VAL_ZERO, DEV_NULL, 0,
	 EXPECT_UNINIT},
	{"uninit-garbage", "before nvmlInit: scratch pointers, 0xff scalars, 0xff handles", PTR_SCRATCH, VAL_FF,
	 DEV_GARBAGE, 0, EXPECT_UNINIT},
};

static const struct mode initialized[] = {
	{"null", "(a) NULL pointers, zero scalars, NULL handles", PTR_NULL, VAL_ZERO, DEV_NULL, 0, EXPECT_BAD_HANDLE},
	{"null-out", "NULL pointers, zero scalars, GPU 0's handle", PTR_NULL, VAL_ZERO, DEV_VALID, 0, EXPECT_ANY},
	{"scratch", "(b) zeroed scratch, zero scalars, GPU 0's handle", PTR_SCRATCH, VAL_ZERO, DEV_VALID, 0, EXPECT_ANY},
	{"garbage", "(c) zeroed scratch, 0xff scalars, 0xff handles", PTR_SCRATCH, VAL_FF, DEV_GARBAGE, 0,
	 EXPECT_BAD_HANDLE},
	{"huge", "zeroed scratch, 0xff scalars, GPU 0's handle", PTR_SCRATCH, VAL_FF, DEV_VALID, 0, EXPECT_ANY},
	{"zero-size", "(d) zeroed scratch (in/out counts 0), zero sizes, the last GPU's handle", PTR_SCRATCH, VAL_ZERO,
	 DEV_VALID, -1, EXPECT_ANY},
	{"ones", "(e) zeroed scratch, scalars 1, GPU 1's handle", PTR_SCRATCH, VAL_ONE, DEV_VALID, 1, EXPECT_ANY},
	{"misaligned", "zeroed scratch, zero scalars, a handle 1 byte past a valid one", PTR_SCRATCH, VAL_ZERO,
	 DEV_MISALIGNED, 0, EXPECT_BAD_HANDLE},
	{"past-end", "zeroed scratch, zero scalars, a handle one past the last GPU's", PTR_SCRATCH, VAL_ZERO,
	 DEV_PAST_END, 0, EXPECT_BAD_HANDLE},
};

static const struct mode after_shutdown[] = {
	{"shutdown-stale", "after nvmlShutdown: scratch pointers, zero scalars, handles from before", PTR_SCRATCH,
	 VAL_ZERO, DEV_STALE, 0, EXPECT_UNINIT},
	{"shutdown-null", "after nvmlShutdown: NULL pointers, zero scalars, NULL handles", PTR_NULL, VAL_ZERO, DEV_NULL,
	 0, EXPECT_UNINIT},
};

struct exemption {
	const char *fn;
	const char *why;
};

// Functions that may answer before nvmlInit (the real library does too).
static const struct exemption uninit_ok[] = {
	{NULL, NULL},
};

// Functions whose size argument is, by contract, "the size of the array
// that is safe to access": given 0xff..ff with a valid handle they may fill
// 4G entries of a 1 MiB buffer, so the huge mode skips them.
static const struct exemption caller_sized[] = {
	{"nvmlDeviceGetCpuAffinity", "cpuSetSize is the size of cpuSet that is safe to access"},
	{"nvmlDeviceGetCpuAffinityWithinScope", "cpuSetSize is the size of cpuSet that is safe to access"},
	{"nvmlDeviceGetMemoryAffinity", "nodeSetSize is the size of nodeSet that is safe to access"},
	{NULL, NULL},
};

static bool exempt(const struct exemption *list, const char *fn, const char **why)
{
	for (const struct exemption *e = list; e->fn != NULL; e++) {
		if (strcmp(e->fn, fn) == 0) {
			*why = e->why;
			return true;
		}
	}
	return false;
}

// ret_name names a return value, or gives NULL for one outside the enum.
// It has no default case so -Wswitch fails the build when nvml.h grows.
static const char *ret_name(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "SUCCESS";
	case NVML_ERROR_UNINITIALIZED: return "UNINITIALIZED";
	case NVML_ERROR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
	case NVML_ERROR_NOT_SUPPORTED: return "NOT_SUPPORTED";
	case NVML_ERROR_NO_PERMISSION: return "NO_PERMISSION";
	case NVML_ERROR_ALREADY_INITIALIZED: return "ALREADY_INITIALIZED";
	case NVML_ERROR_NOT_FOUND: return "NOT_FOUND";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "INSUFFICIENT_SIZE";
	case NVML_ERROR_INSUFFICIENT_POWER: return "INSUFFICIENT_POWER";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "DRIVER_NOT_LOADED";
	case NVML_ERROR_TIMEOUT: return "TIMEOUT";
	case NVML_ERROR_IRQ_ISSUE: return "IRQ_ISSUE";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "LIBRARY_NOT_FOUND";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "FUNCTION_NOT_FOUND";
	case NVML_ERROR_CORRUPTED_INFOROM: return "CORRUPTED_INFOROM";
	case NVML_ERROR_GPU_IS_LOST: return "GPU_IS_LOST";
	case NVML_ERROR_RESET_REQUIRED: return "RESET_REQUIRED";
	case NVML_ERROR_OPERATING_SYSTEM: return "OPERATING_SYSTEM";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "LIB_RM_VERSION_MISMATCH";
	case NVML_ERROR_IN_USE: return "IN_USE";
	case NVML_ERROR_MEMORY: return "MEMORY";
	case NVML_ERROR_NO_DATA: return "NO_DATA";
	case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "VGPU_ECC_NOT_SUPPORTED";
	case NVML_ERROR_INSUFFICIENT_RESOURCES: return "INSUFFICIENT_RESOURCES";
	case NVML_ERROR_FREQ_NOT_SUPPORTED: return "FREQ_NOT_SUPPORTED";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "ARGUMENT_VERSION_MISMATCH";
	case NVML_ERROR_DEPRECATED: return "DEPRECATED";
	case NVML_ERROR_NOT_READY: return "NOT_READY";
	case NVML_ERROR_GPU_NOT_FOUND: return "GPU_NOT_FOUND";
	case NVML_ERROR_INVALID_STATE: return "INVALID_STATE";
	case NVML_ERROR_RESET_TYPE_NOT_SUPPORTED: return "RESET_TYPE_NOT_SUPPORTED";
	case NVML_ERROR_UNKNOWN: return "UNKNOWN";
	}
	return NULL;
}

// Return values are counted per mode in slots 0..NRET-1: the small codes,
// then NVML_ERROR_UNKNOWN, then anything outside the enum.
#define SLOT_SMALL 64
#define SLOT_UNKNOWN SLOT_SMALL
#define SLOT_BAD (SLOT_SMALL + 1)
#define NRET (SLOT_SMALL + 2)

static int ret_slot(nvmlReturn_t r)
{
	if (ret_name(r) == NULL)
		return SLOT_BAD;
	if (r == NVML_ERROR_UNKNOWN)
		return SLOT_UNKNOWN;
	return (unsigned)r < SLOT_SMALL ? (int)r : SLOT_BAD;
}

static FILE *out; // the real stdout: fd 1 is captured while calls run
static int out_fd;
static int capture_fd;
static off_t captured;
static bool verbose;

static nvmlDevice_t gpus[MAX_GPUS];
static unsigned ngpus;
static uintptr_t stride; // distance between consecutive handles

static unsigned char *scratch[MAX_ARGS];
static bool dirty[MAX_ARGS];

// The call in progress.
static struct {
	const struct mode *mode;
	const char *fn;
	bool takes_dev;
	bool checked;
	void *ptr[MAX_ARGS];
	unsigned long hist[NRET];
} cur;

static unsigned long ncalls, nviolations, ncrashes;
static volatile sig_atomic_t in_call;
static sigjmp_buf crash_jump;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(out, "violation: %s: %s: ", cur.mode ? cur.mode->name : "lifecycle", cur.fn ? cur.fn : "-");
	vfprintf(out, fmt, ap);
	fputc('\n', out);
	va_end(ap);
	nviolations++;
}

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fatal(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(out ? out : stderr, "torture: ");
	vfprintf(out ? out : stderr, fmt, ap);
	fputc('\n', out ? out : stderr);
	va_end(ap);
	exit(2);
}

static nvmlDevice_t at_offset(nvmlDevice_t h, uintptr_t off)
{
	nvmlDevice_t r = {(struct nvmlDevice_st *)((uintptr_t)h.handle + off)};
	return r;
}

// device_arg is what device-handle parameter i gets in mode m. A second
// handle parameter gets the next GPU, so pairs are distinct.
static nvmlDevice_t device_arg(const struct mode *m, int i)
{
	unsigned base = m->gpu < 0 ? ngpus - 1 : (unsigned)m->gpu;
	nvmlDevice_t h;
	switch (m->devs) {
	case DEV_NULL: h.handle = NULL; break;
	case DEV_GARBAGE: memset(&h, 0xff, sizeof h); break;
	case DEV_VALID:
	case DEV_STALE: h = gpus[(base + (unsigned)i) % ngpus]; break;
	case DEV_MISALIGNED: h = at_offset(gpus[(base + (unsigned)i) % ngpus], 1); break;
	case DEV_PAST_END: h = at_offset(gpus[ngpus - 1], stride); break;
	default: h.handle = NULL; break;
	}
	return h;
}

void *arg_ptr(const struct mode *m, int i)
{
	if (i < 0 || i >= MAX_ARGS)
		fatal("%s: pointer argument %d: raise MAX_ARGS", cur.fn, i);
	if (m->ptrs == PTR_NULL)
		return NULL;
	dirty[i] = true;
	cur.ptr[i] = scratch[i];
	return scratch[i];
}

void arg_val(const struct mode *m, int i, void *p, size_t size, bool is_device_handle)
{
	if (is_device_handle) {
		if (size != sizeof(nvmlDevice_t))
			fatal("%s: argument %d: a device handle of %zu bytes", cur.fn, i, size);
		nvmlDevice_t h = device_arg(m, i);
		memcpy(p, &h, sizeof h);
		cur.takes_dev = true;
		return;
	}
	switch (m->vals) {
	case VAL_ZERO: memset(p, 0, size); break;
	case VAL_FF: memset(p, 0xff, size); break;
	case VAL_ONE: {
		uint8_t u8 = 1;
		uint16_t u16 = 1;
		uint32_t u32 = 1;
		uint64_t u64 = 1;
		memset(p, 0, size);
		switch (size) {
		case 1: memcpy(p, &u8, 1); break;
		case 2: memcpy(p, &u16, 2); break;
		case 4: memcpy(p, &u32, 4); break;
		case 8: memcpy(p, &u64, 8); break;
		default: fatal("%s: argument %d: no \"1\" for a %zu-byte scalar", cur.fn, i, size);
		}
		break;
	}
	}
}

// releases frees what a successful call created, so repeated modes and
// LeakSanitizer see no leak: {function, output argument, release}.
static void release_event_set(void *p)
{
	nvmlEventSetFree(*(nvmlEventSet_t *)p);
}
static void release_gpm_sample(void *p)
{
	nvmlGpmSampleFree(*(nvmlGpmSample_t *)p);
}
static void release_gpu_instance(void *p)
{
	nvmlGpuInstanceDestroy(*(nvmlGpuInstance_t *)p);
}
static void release_compute_instance(void *p)
{
	nvmlComputeInstanceDestroy(*(nvmlComputeInstance_t *)p);
}

static const struct {
	const char *fn;
	int arg;
	void (*release)(void *);
} releases[] = {
	{"nvmlEventSetCreate", 0, release_event_set},
	{"nvmlGpmSampleAlloc", 0, release_gpm_sample},
	{"nvmlDeviceCreateGpuInstance", 2, release_gpu_instance},
	{"nvmlDeviceCreateGpuInstanceWithPlacement", 3, release_gpu_instance},
	{"nvmlGpuInstanceCreateComputeInstance", 2, release_compute_instance},
	{"nvmlGpuInstanceCreateComputeInstanceWithPlacement", 3, release_compute_instance},
};

static void begin_check(const char *name)
{
	if (cur.checked)
		violation("checked twice (generated call table is wrong)");
	if (strcmp(name, cur.fn) != 0)
		violation("calls[] entry checks %s instead (generated call table is wrong)", name);
	cur.checked = true;
	ncalls++;
}

void check_ret(const char *name, nvmlReturn_t ret)
{
	begin_check(name);
	const struct mode *m = cur.mode;
	const char *rn = ret_name(ret);
	cur.hist[ret_slot(ret)]++;
	if (verbose)
		fprintf(out, "call: %s: %s: %s (%d)\n", m->name, name, rn ? rn : "OUT_OF_ENUM", (int)ret);
	if (rn == NULL)
		violation("returned %d, which is not an nvmlReturn_t value", (int)ret);
	const char *why;
	switch (m->expect) {
	case EXPECT_UNINIT:
		if (ret != NVML_ERROR_UNINITIALIZED && !exempt(uninit_ok, name, &why))
			violation("returned %s (%d), want UNINITIALIZED", rn ? rn : "OUT_OF_ENUM", (int)ret);
		break;
	case EXPECT_BAD_HANDLE:
		if (cur.takes_dev && ret != NVML_ERROR_INVALID_ARGUMENT)
			violation("returned %s (%d) for a bad device handle, want INVALID_ARGUMENT", rn ? rn : "OUT_OF_ENUM",
				  (int)ret);
		break;
	case EXPECT_ANY: break;
	}
	if (ret != NVML_SUCCESS)
		return;
	for (size_t i = 0; i < sizeof releases / sizeof releases[0]; i++)
		if (strcmp(releases[i].fn, name) == 0 && cur.ptr[releases[i].arg] != NULL)
			releases[i].release(cur.ptr[releases[i].arg]);
}

void check_str(const char *name, const char *s)
{
	begin_check(name);
	if (verbose)
		fprintf(out, "call: %s: %s: %s\n", cur.mode->name, name, s ? s : "(NULL)");
	if (s == NULL)
		violation("returned NULL");
}

static void put(int fd, const char *s)
{
	ssize_t n = write(fd, s, strlen(s));
	(void)n;
}

static void on_alarm(int sig)
{
	(void)sig;
	put(out_fd, "violation: ");
	put(out_fd, cur.mode ? cur.mode->name : "-");
	put(out_fd, ": ");
	put(out_fd, cur.fn ? cur.fn : "-");
	put(out_fd, ": no return within the timeout (hung)\ntorture: stopped after a hang\n");
	_exit(3);
}

#if !TORTURE_ASAN
// on_crash turns a fault inside a call into a violation and goes on with the
// next call, so one run lists every crashing function.
static void on_crash(int sig)
{
	if (!in_call) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	siglongjmp(crash_jump, sig);
}
#else
// The sanitizer stops the process at the first error; name the call.
static void on_sanitizer_death(void)
{
	fflush(out);
	put(out_fd, "violation: ");
	put(out_fd, cur.mode ? cur.mode->name : "-");
	put(out_fd, ": ");
	put(out_fd, cur.fn ? cur.fn : "-");
	put(out_fd, ": sanitizer error (report on stderr)\n");
}
#endif

static void setup_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
#if TORTURE_ASAN
	__sanitizer_set_death_callback(on_sanitizer_death);
#else
	// An alternate stack, so a stack overflow in the library is caught too.
	static char altstack[1 << 16];
	stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack};
	sigaltstack(&ss, NULL);
	sa.sa_handler = on_crash;
	sa.sa_flags = SA_ONSTACK;
	int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		sigaction(sigs[i], &sa, NULL);
#endif
}

// setup_scratch maps one buffer per argument position, each between two
// inaccessible guard pages, so a write past it faults.
static void setup_scratch(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	for (int i = 0; i < MAX_ARGS; i++) {
		unsigned char *p =
			mmap(NULL, SCRATCH_SIZE + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			fatal("mmap scratch: %m");
		if (mprotect(p, page, PROT_NONE) != 0 || mprotect(p + page + SCRATCH_SIZE, page, PROT_NONE) != 0)
			fatal("mprotect guard page: %m");
		scratch[i] = p + page;
	}
}

// setup_output keeps the real stdout for reports and points fd 1 at a
// temporary file, so anything the library prints is caught.
static void setup_output(void)
{
	out_fd = dup(STDOUT_FILENO);
	if (out_fd < 0 || (out = fdopen(out_fd, "w")) == NULL)
		fatal("dup stdout: %m");
	setvbuf(out, NULL, _IOLBF, 0);
	FILE *f = tmpfile();
	if (f == NULL)
		fatal("tmpfile: %m");
	capture_fd = dup(fileno(f));
	fclose(f);
	if (capture_fd < 0 || dup2(capture_fd, STDOUT_FILENO) < 0)
		fatal("capture stdout: %m");
}

// check_stdout reports what the library wrote to stdout since the last look.
static void check_stdout(void)
{
	fflush(stdout);
	struct stat st;
	if (fstat(capture_fd, &st) != 0 || st.st_size == captured)
		return;
	char buf[81] = "";
	ssize_t n = pread(capture_fd, buf, sizeof buf - 1, captured);
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	violation("the library wrote %lld bytes to stdout: %s", (long long)(st.st_size - captured), buf);
	captured = st.st_size;
}

static void run_one(const struct mode *m, const struct call *c, unsigned long *hist)
{
	const char *why;
	if (m->vals == VAL_FF && m->devs == DEV_VALID && exempt(caller_sized, c->name, &why)) {
		fprintf(out, "skip: %s: %s: %s\n", m->name, c->name, why);
		return;
	}
	for (int i = 0; i < MAX_ARGS; i++) {
		if (dirty[i])
			memset(scratch[i], 0, SCRATCH_SIZE);
		dirty[i] = false;
	}
	memset(cur.ptr, 0, sizeof cur.ptr);
	memset(cur.hist, 0, sizeof cur.hist);
	cur.mode = m;
	cur.fn = c->name;
	cur.takes_dev = false;
	cur.checked = false;
	int sig = sigsetjmp(crash_jump, 1);
	if (sig == 0) {
		in_call = 1;
		alarm(CALL_TIMEOUT_S);
		c->fn(m);
		alarm(0);
		in_call = 0;
		if (!cur.checked)
			violation("never checked its result (generated call table is wrong)");
		check_stdout();
	} else {
		alarm(0);
		in_call = 0;
		ncalls++;
		ncrashes++;
		violation("crashed with signal %d (%s)", sig, strsignal(sig));
		if (ncrashes >= MAX_CRASHES) {
			fprintf(out, "torture: stopped after %d crashes\n", MAX_CRASHES);
			exit(1);
		}
	}
	for (int i = 0; i < NRET; i++)
		hist[i] += cur.hist[i];
}

static void run_mode(const struct mode *m)
{
	unsigned long hist[NRET] = {0}, before = ncalls;
	for (const struct call *c = calls; c->name != NULL; c++)
		run_one(m, c, hist);
	cur.mode = NULL;
	cur.fn = NULL;

	char line[1024];
	int n = snprintf(line, sizeof line, "mode %s: %lu calls:", m->name, ncalls - before);
	for (int i = 0; i < NRET && n < (int)sizeof line; i++) {
		if (hist[i] == 0)
			continue;
		nvmlReturn_t r = i == SLOT_UNKNOWN ? NVML_ERROR_UNKNOWN : (nvmlReturn_t)i;
		const char *name = i == SLOT_BAD ? "OUT_OF_ENUM" : ret_name(r);
		n += snprintf(line + n, sizeof line - (size_t)n, " %s=%lu", name, hist[i]);
	}
	fprintf(out, "%s  [%s]\n", line, m->what);
}

static void run_modes(const struct mode *modes, size_t n)
{
	for (size_t i = 0; i < n; i++)
		run_mode(&modes[i]);
}

// expect_ret checks one call made outside the table.
static void expect_ret(const char *what, nvmlReturn_t got, nvmlReturn_t want)
{
	if (got == want)
		return;
	const char *g = ret_name(got), *w = ret_name(want);
	fprintf(out, "violation: lifecycle: %s: returned %s (%d), want %s\n", what, g ? g : "OUT_OF_ENUM", (int)got,
		w ? w : "OUT_OF_ENUM");
	nviolations++;
}

// check_error_strings names every value of the enum; a value the library
// does not know yet is reported as a note, not a violation.
static void check_error_strings(void)
{
	for (int r = -2; r <= 1001; r++) {
		const char *s = nvmlErrorString((nvmlReturn_t)r);
		ncalls++;
		if (s == NULL) {
			fprintf(out, "violation: errorstring: nvmlErrorString: returned NULL for %d\n", r);
			nviolations++;
			continue;
		}
		if (ret_name((nvmlReturn_t)r) != NULL && r != NVML_ERROR_UNKNOWN && strcmp(s, "Unknown Error") == 0)
			fprintf(out, "note: nvmlErrorString(%d = NVML_ERROR_%s) is \"Unknown Error\"\n", r,
				ret_name((nvmlReturn_t)r));
	}
}

static void get_handles(void)
{
	unsigned n = 0;
	nvmlReturn_t r = nvmlDeviceGetCount_v2(&n);
	if (r != NVML_SUCCESS)
		fatal("nvmlDeviceGetCount_v2: %s", nvmlErrorString(r));
	if (n < 2 || n > MAX_GPUS)
		fatal("%u GPUs visible; need 2..%d (set NVMOCK_SNAPSHOT)", n, MAX_GPUS);
	for (unsigned i = 0; i < n; i++) {
		r = nvmlDeviceGetHandleByIndex_v2(i, &gpus[i]);
		if (r != NVML_SUCCESS)
			fatal("nvmlDeviceGetHandleByIndex_v2(%u): %s", i, nvmlErrorString(r));
	}
	ngpus = n;
	stride = (uintptr_t)gpus[1].handle - (uintptr_t)gpus[0].handle;
}

int main(int argc, char **argv)
{
	verbose = argc > 1 && strcmp(argv[1], "-v") == 0;
	setup_output();
	setup_scratch();
	setup_signals();
	size_t ncalls_table = 0;
	for (const struct call *c = calls; c->name != NULL; c++)
		ncalls_table++;
	fprintf(out, "torture: %zu functions, %zu modes%s\n", ncalls_table,
		sizeof before_init / sizeof before_init[0] + sizeof initialized / sizeof initialized[0] +
			sizeof after_shutdown / sizeof after_shutdown[0],
		TORTURE_ASAN ? ", sanitizers on" : "");

	cur.mode = NULL;
	expect_ret("nvmlShutdown before nvmlInit", nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	run_modes(before_init, sizeof before_init / sizeof before_init[0]);

	nvmlReturn_t r = nvmlInit_v2();
	if (r != NVML_SUCCESS)
		fatal("nvmlInit_v2: %s (%d)", nvmlErrorString(r), (int)r);
	// Init is counted: a second init and one shutdown leave it initialised.
	expect_ret("second nvmlInit_v2", nvmlInit_v2(), NVML_SUCCESS);
	expect_ret("nvmlShutdown of the second init", nvmlShutdown(), NVML_SUCCESS);
	get_handles();
	run_modes(initialized, sizeof initialized / sizeof initialized[0]);
	check_error_strings();
	check_stdout();

	expect_ret("nvmlShutdown", nvmlShutdown(), NVML_SUCCESS);
	expect_ret("nvmlShutdown after the last one", nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
	run_modes(after_shutdown, sizeof after_shutdown / sizeof after_shutdown[0]);

	// A full shutdown is not the end: init works again and sees the same GPUs.
	unsigned before = ngpus;
	expect_ret("nvmlInit_v2 after a full shutdown", nvmlInit_v2(), NVML_SUCCESS);
	unsigned n = 0;
	expect_ret("nvmlDeviceGetCount_v2 after re-init", nvmlDeviceGetCount_v2(&n), NVML_SUCCESS);
	if (n != before) {
		fprintf(out, "violation: lifecycle: re-init sees %u GPUs, first init saw %u\n", n, before);
		nviolations++;
	}
	expect_ret("nvmlShutdown after re-init", nvmlShutdown(), NVML_SUCCESS);
	check_stdout();

	fprintf(out, "torture: %lu calls, %lu violations\n", ncalls, nviolations);
	fclose(out);
	close(capture_fd);
	return nviolations ? 1 : 0;
}
