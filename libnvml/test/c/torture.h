// The ABI torture driver's interface to its generated call table
// (torture_gen.c): one call_<name> per exported NVML function, which builds
// every argument through arg_ptr/arg_val for the current mode and hands the
// result to check_ret/check_str.
#ifndef NVMOCK_TORTURE_H
#define NVMOCK_TORTURE_H

// Call each function by its exact exported name, never through nvml.h's
// #define of the unversioned name to the newest version.
#define NVML_NO_UNVERSIONED_FUNC_DEFS 1
#include <nvml.h>
#include <stdbool.h>
#include <stddef.h>

// What a mode passes for pointer parameters.
enum ptr_kind {
	PTR_NULL,    // NULL
	PTR_SCRATCH, // a zeroed 1 MiB buffer per parameter, guard pages on both sides
};

// What a mode passes for by-value parameters that are not device handles
// (indices, sizes, enums, timeouts, other handle types).
enum val_kind {
	VAL_ZERO, // all bytes 0: index 0, size 0
	VAL_ONE,  // the integer 1
	VAL_FF,   // all bytes 0xff: huge indices and sizes, -1, foreign handles
};

// What a mode passes for nvmlDevice_t parameters.
enum dev_kind {
	DEV_NULL,       // {NULL}
	DEV_VALID,      // a handle the library gave out
	DEV_GARBAGE,    // all bytes 0xff
	DEV_MISALIGNED, // one byte past a valid handle, inside the library's table
	DEV_PAST_END,   // one element past the last valid handle
	DEV_STALE,      // a handle from before nvmlShutdown
};

// What every nvmlReturn_t function must return in a mode, beyond the rules
// that always hold (no crash, no hang, a value of the enum, no stdout).
enum expect {
	EXPECT_ANY,        // only the rules that always hold
	EXPECT_BAD_HANDLE, // functions taking an nvmlDevice_t: NVML_ERROR_INVALID_ARGUMENT
	EXPECT_UNINIT,     // every function: NVML_ERROR_UNINITIALIZED
};

struct mode {
	const char *name; // short, used in every report line
	const char *what; // one line for the mode summary
	enum ptr_kind ptrs;
	enum val_kind vals;
	enum dev_kind devs;
	int gpu; // DEV_VALID: index of the first handle; -1 is the last GPU
	enum expect expect;
};

struct call {
	const char *name;
	void (*fn)(const struct mode *m);
};

// arg_ptr returns the pointer argument i gets in mode m.
void *arg_ptr(const struct mode *m, int i);
// arg_val fills the size bytes of by-value argument i for mode m.
void arg_val(const struct mode *m, int i, void *p, size_t size, bool is_device_handle);
// check_ret checks what an nvmlReturn_t function returned.
void check_ret(const char *name, nvmlReturn_t ret);
// check_str checks what a function returning a string (nvmlErrorString) returned.
void check_str(const char *name, const char *s);

// calls lists every exported function but the init/shutdown family, ending
// with {0, 0}.
extern const struct call calls[];

#endif
