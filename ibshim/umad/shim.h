//go:build ignore

/* What umad.c (the umad devices and the interposers) and channels.c (the
 * verbs command fd and completion channels) share. Nothing here is
 * exported from the library (-fvisibility=hidden). */
#ifndef NVMOCK_UMAD_SHIM_H
#define NVMOCK_UMAD_SHIM_H

#include <stdint.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

/* The fd table covers 0..NVMOCK_UMAD_MAX_FD-1 (4 KiB of kinds). */
#define NVMOCK_UMAD_MAX_FD 4096

enum {
	FD_NONE = 0,
	FD_LIVE = 1,   /* umadN, connected to the daemon */
	FD_DEAD = 2,   /* umadN without a daemon: requests time out */
	FD_CMD = 3,    /* a mock HCA's verbs command fd (the provider said so) */
	FD_CHAN = 4,   /* a completion channel, as the program holds it */
	FD_CHAN_W = 5, /* the provider's end of a completion channel */
	FD_ASYNC = 6,  /* a mock HCA's async fd: the daemon's port events */
};

/* struct ib_uverbs_comp_event_desc: what one read of a channel returns. */
#define NVMOCK_COMP_EVENT_SIZE 8

extern uint8_t kinds[NVMOCK_UMAD_MAX_FD];
extern int debug;

static inline int kind_of(int fd)
{
	if ((unsigned int)fd >= NVMOCK_UMAD_MAX_FD)
		return FD_NONE;
	return __atomic_load_n(&kinds[fd], __ATOMIC_RELAXED);
}

/* dbg's arguments are evaluated only when debugging (NVMOCK_UMAD_DEBUG=1). */
#define dbg(...)                                                                 \
	do {                                                                     \
		if (__builtin_expect(__atomic_load_n(&debug, __ATOMIC_RELAXED), 0)) \
			dbg_print(__VA_ARGS__);                                  \
	} while (0)

void dbg_print(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void track(int fd, int kind);
int below_limit(int fd, int cloexec);
ssize_t sys_read(int fd, void *buf, size_t n);
ssize_t sys_write(int fd, const void *buf, size_t n);
int sys_dup3(int oldfd, int newfd, int flags);
int sys_close(int fd);

/* channels.c */
ssize_t verbs_write(int fd, int kind, const void *buf, size_t n);
ssize_t channel_short_read(int fd);
ssize_t async_read(int fd, void *buf, size_t n);
void channel_gone(int fd);

#endif
