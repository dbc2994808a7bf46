//go:build ignore

/*
 * libnvmock-umad.so: an LD_PRELOAD shim that turns /dev/infiniband/umadN
 * into a connection to the fabric daemon (`nvmock ibd`), so that unmodified
 * libibumad, libibmad and libibnetdisc programs (smpquery, saquery,
 * ibnetdiscover, perfquery, ibping, sminfo, opensm) exchange MADs with it.
 * The wire protocol is in proto.h. The same library keeps other libibverbs
 * providers off the mock HCAs (providers.c) and makes their completion
 * channels (channels.c); its fd table here holds those fds too.
 *
 * What the kernel's ib_umad driver (drivers/infiniband/core/user_mad.c)
 * does, and what this shim does instead:
 *  - open umadN: an AF_UNIX SOCK_SEQPACKET connection to the daemon, then
 *    HELLO. Without a daemon the open still succeeds (a broken fabric, not a
 *    missing HCA): the fd is "dead", a datagram socket connected to itself,
 *    and every request written to it comes back as the kernel returns an
 *    unanswered one (status 110 ETIMEDOUT, header + 24-byte MAD header),
 *    though at once rather than after its timeout_ms: libibmad's retries
 *    end in milliseconds. A send without a timeout (a response) vanishes.
 *    A live fd whose daemon hangs up turns dead in place (dup3).
 *  - a dead umad fd comes back to life when a new daemon listens at the
 *    socket (the chart's pod restarted or upgraded; told apart by the
 *    socket file and the word each daemon writes beside it, SOCKET.id), as
 *    a real fabric comes back under a program's open device: at its next
 *    request, at its next read, or while it waits in poll/ppoll (in slices
 *    of a second), once it has read its timed-out requests, the shim
 *    connects, says HELLO and registers the fd's agents again, and dup3s
 *    the connection over the fd. A daemon that hung up but still listens
 *    on the same socket is not retried. select and epoll neither revive a
 *    fd nor hide a hangup, and an epoll set keeps watching the dead socket
 *    of a fd revived meanwhile (libibumad, libibmad and opensm poll).
 *  - open issmN: a connection with HELLO kind=issm (the port is an SM while
 *    it stays open, as the kernel sets IsSM); /dev/null without a daemon.
 *  - open rdma_cm: fails with ENODEV, as without the rdma_ucm module
 *    (librdmacm's rdma_create_event_channel then fails, and UCX goes on).
 *  - ioctl REGISTER_AGENT(2)/UNREGISTER_AGENT/ENABLE_PKEY on umad fds: the
 *    shim assigns agent ids per fd (lowest free of 32, as the kernel) and
 *    tells the daemon (REGISTER/UNREGISTER); other ioctls fail with ENOTTY,
 *    except the VFS-generic FIONBIO/FIOASYNC/FIOCLEX/FIONCLEX.
 *  - write: a live fd passes the ib_user_mad through (MSG_NOSIGNAL); a dead
 *    fd queues the timed-out request to itself.
 *  - read: the kernel's rules for a short buffer (EINVAL, or ENOSPC with the
 *    header, whose length is the full size, and the first segment, leaving
 *    the message queued; saquery relies on it).
 *  - poll/select/epoll: native on the socket; poll and ppoll also revive
 *    dead fds (above), and cost one load until a fd has gone dead.
 *
 * Constraints (the shim lives inside other processes): no Go runtime, no
 * threads, no locks, no allocation, no work at load; the fd table is a
 * static array, so a forked child keeps working fds and an exec starts
 * afresh. Every call not about a umad fd goes to the next definition
 * (dlsym(RTLD_NEXT)) after a prefix compare (opens) or one bounds check and
 * one byte load (read/write/ioctl/close). Debug output goes to stderr only
 * with NVMOCK_UMAD_DEBUG=1. build.sh compiles this file; the go:build line
 * above keeps the go tool, for which package umad is pure Go, off it.
 *
 * Limits, on purpose:
 *  - fds >= NVMOCK_UMAD_MAX_FD are never shim fds: an open that would
 *    return one moves the socket below it or fails with EMFILE.
 *  - dup/dup2/dup3/fcntl(F_DUPFD) copies of a umad fd are not tracked (no
 *    client does it; libibumad, libibmad, libibnetdisc and opensm dup2 only
 *    their stdio): a copy is a plain socket. dup2/dup3/close_range/closefrom
 *    over a shim fd forget it, so a reused number is never mistaken for one.
 *  - Only the exact paths /dev/infiniband/umad<N> and issm<N> are caught,
 *    whatever openat's dirfd; relative paths are not.
 *  - After fork, parent and child share each connection as they would share
 *    the device file, but each has its own copy of the agent table.
 */
#define _GNU_SOURCE
/* Fortified headers would define open/read as inline wrappers. */
#undef _FORTIFY_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "proto.h"
#include "shim.h"

/*
 * Bind dlsym to its oldest version, so that the shim also loads into
 * programs of a glibc older than 2.34 (where dlsym lives in libdl and the
 * GLIBC_2.34 version does not exist).
 */
#if defined(__x86_64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
#endif


/* ioctls, as rdma/ib_user_mad.h + rdma/rdma_user_ioctl.h define them. */
struct umad_reg_req { /* struct ib_user_mad_reg_req: 28 bytes, not packed */
	uint32_t id;
	uint32_t method_mask[4]; /* the kernel's unsigned long[2] __aligned(4) */
	uint8_t qpn;
	uint8_t mgmt_class;
	uint8_t mgmt_class_version;
	uint8_t oui[3]; /* big-endian bytes */
	uint8_t rmpp_version;
};
struct umad_reg_req2 { /* struct ib_user_mad_reg_req2: 40 bytes */
	uint32_t id;
	uint32_t qpn;
	uint8_t mgmt_class;
	uint8_t mgmt_class_version;
	uint16_t res;
	uint32_t flags;
	uint64_t method_mask[2];
	uint32_t oui; /* host order, low 24 bits */
	uint8_t rmpp_version;
	uint8_t reserved[3];
};
_Static_assert(sizeof(struct umad_reg_req) == 28, "ib_user_mad_reg_req is 28 bytes");
_Static_assert(offsetof(struct umad_reg_req, qpn) == 20, "reg_req.qpn at 20");
_Static_assert(sizeof(struct umad_reg_req2) == 40, "ib_user_mad_reg_req2 is 40 bytes");
_Static_assert(offsetof(struct umad_reg_req2, oui) == 32, "reg_req2.oui at 32");

#define UMAD_IOCTL_MAGIC 0x1b
#define UMAD_REGISTER_AGENT _IOWR(UMAD_IOCTL_MAGIC, 1, struct umad_reg_req)
#define UMAD_UNREGISTER_AGENT _IOW(UMAD_IOCTL_MAGIC, 2, uint32_t)
#define UMAD_ENABLE_PKEY _IO(UMAD_IOCTL_MAGIC, 3)
#define UMAD_REGISTER_AGENT2 _IOWR(UMAD_IOCTL_MAGIC, 4, struct umad_reg_req2)
/* The constants compiled into libibumad.so.3 (rdma-core 44). */
_Static_assert(UMAD_REGISTER_AGENT == 0xc01c1b01, "REGISTER_AGENT");
_Static_assert(UMAD_UNREGISTER_AGENT == 0x40041b02, "UNREGISTER_AGENT");
_Static_assert(UMAD_ENABLE_PKEY == 0x1b03, "ENABLE_PKEY");
_Static_assert(UMAD_REGISTER_AGENT2 == 0xc0281b04, "REGISTER_AGENT2");

#define UMAD_RMPP_HDR 36 /* IB_MGMT_RMPP_HDR: the least the kernel accepts */
#define UMAD_MAD_HDR 24  /* IB_MGMT_MAD_HDR: what a timed-out request keeps */

/* ---------------------------------------------------------------------- */
/* The next definitions of what the shim interposes. */

struct next {
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*open_2)(const char *, int);
	int (*open64_2)(const char *, int);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
	int (*openat_2)(int, const char *, int);
	int (*openat64_2)(int, const char *, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	ssize_t (*write)(int, const void *, size_t);
	int (*ioctl)(int, unsigned long, ...);
	int (*close)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*close_range)(unsigned int, unsigned int, int);
	void (*closefrom)(int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
};
static struct next next;
static int resolving, resolved;

/*
 * resolve looks everything up once. A call that arrives while it runs (dlsym
 * reentering us through a malloc that opens a file, or another thread) finds
 * NULL and uses the raw system call instead: no recursion, no lock.
 */
static void resolve(void)
{
	if (__atomic_load_n(&resolved, __ATOMIC_ACQUIRE) ||
	    __atomic_exchange_n(&resolving, 1, __ATOMIC_ACQ_REL))
		return;
#define NEXT(field, name) __atomic_store_n(&next.field, (__typeof__(next.field))dlsym(RTLD_NEXT, name), __ATOMIC_RELAXED)
	NEXT(open, "open");
	NEXT(open64, "open64");
	NEXT(open_2, "__open_2");
	NEXT(open64_2, "__open64_2");
	NEXT(openat, "openat");
	NEXT(openat64, "openat64");
	NEXT(openat_2, "__openat_2");
	NEXT(openat64_2, "__openat64_2");
	NEXT(read, "read");
	NEXT(read_chk, "__read_chk");
	NEXT(write, "write");
	NEXT(ioctl, "ioctl");
	NEXT(close, "close");
	NEXT(dup2, "dup2");
	NEXT(dup3, "dup3");
	NEXT(close_range, "close_range");
	NEXT(closefrom, "closefrom");
	NEXT(poll, "poll");
	NEXT(ppoll, "ppoll");
#undef NEXT
	__atomic_store_n(&resolved, 1, __ATOMIC_RELEASE);
}

/* NEXTFN(field) is the next definition, or NULL while resolving. */
#define NEXTFN(field)                                                            \
	(__builtin_expect(__atomic_load_n(&next.field, __ATOMIC_RELAXED) != NULL, 1) \
		 ? next.field                                                    \
		 : (resolve(), __atomic_load_n(&next.field, __ATOMIC_RELAXED)))

ssize_t sys_read(int fd, void *buf, size_t n)
{
	ssize_t (*f)(int, void *, size_t) = NEXTFN(read);
	return f ? f(fd, buf, n) : syscall(SYS_read, fd, buf, n);
}

ssize_t sys_write(int fd, const void *buf, size_t n)
{
	ssize_t (*f)(int, const void *, size_t) = NEXTFN(write);
	return f ? f(fd, buf, n) : syscall(SYS_write, fd, buf, n);
}

static int next_close(int fd)
{
	int (*f)(int) = NEXTFN(close);
	return f ? f(fd) : (int)syscall(SYS_close, fd);
}

#ifdef __SANITIZE_THREAD__
/* Built with ThreadSanitizer, whose close comes before ours: one of the
 * shim's own closes (a channel's provider end, a socket it gave up) that
 * went straight to the next close would hide from it that the number is
 * free, and the next fd given that number, in any thread, would look like
 * a race with the old one. Its close calls ours, which closes. */
int __interceptor_close(int fd);
int sys_close(int fd) { return __interceptor_close(fd); }
#else
int sys_close(int fd) { return next_close(fd); }
#endif

int sys_dup3(int oldfd, int newfd, int flags)
{
	int (*f)(int, int, int) = NEXTFN(dup3);
	return f ? f(oldfd, newfd, flags) : (int)syscall(SYS_dup3, oldfd, newfd, flags);
}

/* sys_ppoll is ppoll with the timeout in milliseconds (-1: none). */
static int sys_ppoll(struct pollfd *fds, nfds_t n, int ms, const sigset_t *mask)
{
	int (*f)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *) = NEXTFN(ppoll);
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };
	const struct timespec *t = ms < 0 ? NULL : &ts;

	return f ? f(fds, n, t, mask) : (int)syscall(SYS_ppoll, fds, n, t, mask, _NSIG / 8);
}

static int sys_poll(struct pollfd *fds, nfds_t n, int ms)
{
	int (*f)(struct pollfd *, nfds_t, int) = NEXTFN(poll);

	return f ? f(fds, n, ms) : sys_ppoll(fds, n, ms, NULL);
}

/* ---------------------------------------------------------------------- */
/* Debug output: stderr, only with NVMOCK_UMAD_DEBUG=1 (read at open). */

int debug;

void dbg_print(const char *fmt, ...)
{
	char buf[256];
	int n, saved = errno;
	va_list ap;

	n = snprintf(buf, sizeof buf, "nvmock-umad[%d]: ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof buf - 2)
		n = (int)sizeof buf - 2;
	buf[n++] = '\n';
	if (sys_write(2, buf, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
	errno = saved;
}

/* ---------------------------------------------------------------------- */
/* The fd table. kinds[] is the only thing the pass-through path reads. */

uint8_t kinds[NVMOCK_UMAD_MAX_FD];
static uint32_t agents[NVMOCK_UMAD_MAX_FD]; /* bit i: agent id i registered */

/*
 * What a dead umad fd needs to come back (see revive): its device's index,
 * the daemon socket it last reached (none: 0), and its agents'
 * registrations. A few slots, not one per fd: a program holds one or two
 * umad fds; one opened while all are taken stays dead once dead.
 */
#define SAVED_SLOTS 16
/* ident is a daemon's socket as the shim tells daemons apart: the file,
 * and the word the daemon writes beside it when it starts (a socket made
 * in place of another can have its inode number and, with coarse
 * timestamps, its time). Made by ident_of only, so memcmp compares it. */
struct ident {
	dev_t dev;
	ino_t ino;
	struct timespec ctime;
	char word[NVMOCK_IBD_ID_MAX];
};

struct saved {
	int owner; /* fd + 1; 0: free */
	int reviving; /* a thread is in revive: others leave it be (a child
		       * forked meanwhile keeps it set: its fd stays dead) */
	uint32_t index;
	struct ident at;  /* the daemon it last reached; zeros: none */
	ino_t dead;       /* the dead socket in its place, when dead */
	struct nvmock_ibd_register regs[NVMOCK_UMAD_MAX_AGENTS];
};
static struct saved saved[SAVED_SLOTS];
static int any_umad; /* set once a umad fd was opened: poll looks then */

static struct saved *saved_of(int fd)
{
	for (int i = 0; i < SAVED_SLOTS; i++)
		if (__atomic_load_n(&saved[i].owner, __ATOMIC_ACQUIRE) == fd + 1)
			return &saved[i];
	return NULL;
}

static struct saved *save(int fd, uint32_t index)
{
	struct saved *stale = saved_of(fd); /* a number closed behind our back */

	if (stale)
		__atomic_store_n(&stale->owner, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < SAVED_SLOTS; i++) {
		int free_ = 0;
		if (__atomic_compare_exchange_n(&saved[i].owner, &free_, fd + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			saved[i].index = index;
			saved[i].reviving = 0;
			memset(&saved[i].at, 0, sizeof saved[i].at);
			saved[i].dead = 0;
			return &saved[i];
		}
	}
	dbg("fd %d: no slot left; it will not come back if it goes dead", fd);
	return NULL;
}

void track(int fd, int kind)
{
	__atomic_store_n(&agents[fd], 0, __ATOMIC_RELAXED);
	__atomic_store_n(&kinds[fd], (uint8_t)kind, __ATOMIC_RELEASE);
}

static void forget(int fd)
{
	int k = kind_of(fd);

	if (k != FD_NONE) {
		struct saved *s = (k == FD_LIVE || k == FD_DEAD) ? saved_of(fd) : NULL;
		if (s)
			__atomic_store_n(&s->owner, 0, __ATOMIC_RELEASE);
		dbg("fd %d forgotten", fd);
		__atomic_store_n(&kinds[fd], FD_NONE, __ATOMIC_RELEASE);
		if (k == FD_CHAN)
			channel_gone(fd);
	}
}

/* forget_range forgets the fds of a close_range or closefrom. A channel's
 * provider end in the range is the caller's to close: it is forgotten
 * first, so that forgetting its channel does not close it too (its
 * number may already be reused). */
static void forget_range(unsigned int first, unsigned int last)
{
	for (unsigned int fd = first; fd <= last && fd < NVMOCK_UMAD_MAX_FD; fd++)
		if (kind_of((int)fd) == FD_CHAN_W)
			__atomic_store_n(&kinds[fd], FD_NONE, __ATOMIC_RELEASE);
	for (unsigned int fd = first; fd <= last && fd < NVMOCK_UMAD_MAX_FD; fd++)
		forget((int)fd);
}

/* ---------------------------------------------------------------------- */
/* The one decision: is this path a umad or issm device, and which, or
 * the rdma_cm device. */

enum { PATH_OTHER = 0, PATH_UMAD, PATH_ISSM, PATH_RDMA_CM };

static int redirect_path(const char *p, uint32_t *index)
{
	static const char prefix[] = "/dev/infiniband/";
	uint32_t n = 0;
	int kind, digits = 0;

	if (!p)
		return PATH_OTHER;
	for (size_t i = 0; i < sizeof prefix - 1; i++)
		if (p[i] != prefix[i])
			return PATH_OTHER;
	p += sizeof prefix - 1;
	if (!strcmp(p, "rdma_cm"))
		return PATH_RDMA_CM;
	if (p[0] == 'u' && p[1] == 'm' && p[2] == 'a' && p[3] == 'd')
		kind = PATH_UMAD;
	else if (p[0] == 'i' && p[1] == 's' && p[2] == 's' && p[3] == 'm')
		kind = PATH_ISSM;
	else
		return PATH_OTHER;
	for (p += 4; *p >= '0' && *p <= '9'; p++, digits++) {
		if (digits == 9 || (digits == 1 && n == 0))
			return PATH_OTHER; /* too long, or a leading zero */
		n = n * 10 + (uint32_t)(*p - '0');
	}
	if (digits == 0 || *p != '\0')
		return PATH_OTHER;
	*index = n;
	return kind;
}

/* ---------------------------------------------------------------------- */
/* Sockets. */

static int set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* below_limit moves fd under NVMOCK_UMAD_MAX_FD, or fails with EMFILE. */
int below_limit(int fd, int cloexec)
{
	int low;

	if (fd < NVMOCK_UMAD_MAX_FD)
		return fd;
	low = fcntl(fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, 0);
	sys_close(fd);
	if (low < 0) {
		errno = EMFILE;
		return -1;
	}
	if (low >= NVMOCK_UMAD_MAX_FD) {
		sys_close(low);
		errno = EMFILE;
		return -1;
	}
	return low;
}

/*
 * dead_socket is a datagram socket connected to its own (abstract,
 * autobound) address: what is sent on it comes back readable on it, and
 * nobody else can send to it.
 */
static int dead_socket(int cloexec, int nonblock)
{
	struct sockaddr_un a;
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_DGRAM | (cloexec ? SOCK_CLOEXEC : 0) | (nonblock ? SOCK_NONBLOCK : 0), 0);

	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	len = sizeof a;
	if (bind(fd, (struct sockaddr *)&a, sizeof(sa_family_t)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0 ||
	    connect(fd, (struct sockaddr *)&a, len) < 0) {
		int saved = errno;
		sys_close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

static const char *daemon_path(void)
{
	const char *path = getenv(NVMOCK_IBD_ENV);

	return path && *path ? path : NVMOCK_IBD_SOCKET;
}

/* ident_of reads the daemon socket's identity: -1 when there is none. */
static int ident_of(struct ident *out)
{
	const char *path = daemon_path();
	char p[sizeof ((struct sockaddr_un *)0)->sun_path + sizeof NVMOCK_IBD_ID_SUFFIX];
	struct stat st;
	int f;

	memset(out, 0, sizeof *out);
	if (stat(path, &st) < 0 || !S_ISSOCK(st.st_mode))
		return -1;
	out->dev = st.st_dev;
	out->ino = st.st_ino;
	out->ctime = st.st_ctim;
	if (strlen(path) < sizeof p - sizeof NVMOCK_IBD_ID_SUFFIX) {
		memcpy(p, path, strlen(path));
		memcpy(p + strlen(path), NVMOCK_IBD_ID_SUFFIX, sizeof NVMOCK_IBD_ID_SUFFIX);
		f = (int)syscall(SYS_openat, AT_FDCWD, p, O_RDONLY | O_CLOEXEC, 0);
		if (f >= 0) {
			if (sys_read(f, out->word, sizeof out->word) < 0)
				memset(out->word, 0, sizeof out->word);
			sys_close(f);
		}
	}
	return 0;
}

/* dead_ino is the inode of the socket at fd: the dead one, recorded so that
 * revive knows the number still holds it. */
static ino_t dead_ino(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* daemon_socket connects to the daemon and says HELLO, or returns -1; at,
 * when not NULL, gets the daemon's identity. */
static int daemon_socket(uint32_t index, uint32_t kind, int cloexec, struct ident *at)
{
	const char *path = daemon_path();
	struct sockaddr_un a;
	struct nvmock_ibd_hello h;
	size_t len;
	int fd;

	len = strlen(path);
	if (len >= sizeof a.sun_path) {
		dbg("socket path %s too long", path);
		return -1;
	}
	/* Non-blocking connect: an overloaded daemon makes a dead fd, not a hang. */
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | (cloexec ? SOCK_CLOEXEC : 0), 0);
	if (fd < 0)
		return -1;
	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	memcpy(a.sun_path, path, len);
	h.magic = htole32(NVMOCK_IBD_MAGIC);
	h.op = htole32(NVMOCK_IBD_OP_HELLO);
	h.umad_index = htole32(index);
	h.pid = htole32((uint32_t)getpid());
	h.kind = htole32(kind);
	if (connect(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1)) < 0 ||
	    send(fd, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h) {
		dbg("no fabric daemon at %s: %s", path, strerror(errno));
		sys_close(fd);
		return -1;
	}
	if (at)
		ident_of(at);
	return fd;
}

/*
 * shim_open opens umadN or issmN. A missing daemon is a broken fabric, not
 * a missing HCA: the open succeeds all the same.
 */
static int shim_open(int kind, uint32_t index, int flags)
{
	int cloexec = (flags & O_CLOEXEC) != 0, nonblock = (flags & O_NONBLOCK) != 0;
	int fd, saved_errno;

	const char *d = getenv("NVMOCK_UMAD_DEBUG");
	if (d && strcmp(d, "1") == 0)
		__atomic_store_n(&debug, 1, __ATOMIC_RELAXED);

	if (kind == PATH_ISSM) {
		/* opensm holds issmN open to be the SM; it never reads or writes it. */
		fd = daemon_socket(index, NVMOCK_IBD_KIND_ISSM, cloexec, NULL);
		if (fd < 0) {
			int (*f)(const char *, int, ...) = NEXTFN(open);
			int fl = O_RDWR | (cloexec ? O_CLOEXEC : 0);
			fd = f ? f("/dev/null", fl) : (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", fl);
		}
		dbg("open issm%u: fd %d", index, fd);
		return fd;
	}

	int live = 1;
	struct ident at;
	memset(&at, 0, sizeof at);
	fd = daemon_socket(index, NVMOCK_IBD_KIND_UMAD, cloexec, &at);
	if (fd >= 0 && !nonblock && set_nonblock(fd, 0) < 0) {
		sys_close(fd);
		fd = -1;
	}
	if (fd < 0) {
		live = 0;
		fd = dead_socket(cloexec, nonblock);
		if (fd < 0)
			return -1;
	}
	fd = below_limit(fd, cloexec);
	if (fd < 0)
		return -1;
	saved_errno = errno;
	track(fd, live ? FD_LIVE : FD_DEAD);
	struct saved *s = save(fd, index);
	if (s) {
		s->at = at;
		s->dead = live ? 0 : dead_ino(fd);
	}
	__atomic_store_n(&any_umad, 1, __ATOMIC_RELEASE);
	dbg("open umad%u: fd %d %s", index, fd, live ? "connected" : "dead (no daemon)");
	errno = saved_errno;
	return fd;
}

/*
 * go_dead turns a live fd whose daemon went away into a dead one in place
 * (same number, same flags), so that later requests time out as on a broken
 * fabric instead of failing with EPIPE or reading end-of-file.
 */
static int go_dead(int fd)
{
	int fdfl = fcntl(fd, F_GETFD), fl = fcntl(fd, F_GETFL);
	int d;

	if (fdfl < 0 || fl < 0)
		return -1;
	d = dead_socket((fdfl & FD_CLOEXEC) != 0, (fl & O_NONBLOCK) != 0);
	if (d < 0)
		return -1;
	if (sys_dup3(d, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		int saved = errno;
		sys_close(d);
		errno = saved;
		return -1;
	}
	sys_close(d);
	struct saved *s = saved_of(fd);
	if (s)
		s->dead = dead_ino(fd);
	__atomic_store_n(&kinds[fd], FD_DEAD, __ATOMIC_RELEASE);
	dbg("fd %d: fabric daemon gone, requests now time out", fd);
	return 0;
}

static int gone(int err)
{
	return err == EPIPE || err == ECONNRESET || err == ENOTCONN || err == ECONNREFUSED;
}

/*
 * revive connects a dead umad fd to a daemon other than the one it last
 * reached (see ident), registers its agents there again and puts the
 * connection in its place (same number and flags). 0: the fd is live
 * again; -1: it stays dead; -2: another thread is reviving it. Not while
 * the dead socket still holds timed-out requests: they are the program's
 * to read. Costs a stat and a small read while the daemon is the same.
 */
static int revive(int fd)
{
	struct saved *s = saved_of(fd);
	struct ident now;
	uint8_t b = 0;
	int c, old, fdfl, fl;

	if (!s || ident_of(&now) < 0 || !memcmp(&now, &s->at, sizeof now))
		return -1;
	if (__atomic_exchange_n(&s->reviving, 1, __ATOMIC_ACQUIRE))
		return -2;
	/* Again under the flag: another thread may have revived it. */
	if (kind_of(fd) != FD_DEAD || !memcmp(&now, &s->at, sizeof now) ||
	    recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) >= 0) {
		__atomic_store_n(&s->reviving, 0, __ATOMIC_RELEASE);
		return kind_of(fd) == FD_LIVE ? 0 : -1;
	}
	fdfl = fcntl(fd, F_GETFD);
	fl = fcntl(fd, F_GETFL);
	c = fdfl < 0 || fl < 0 ? -1 : daemon_socket(s->index, NVMOCK_IBD_KIND_UMAD, (fdfl & FD_CLOEXEC) != 0, &now);
	if (c < 0) {
		__atomic_store_n(&s->reviving, 0, __ATOMIC_RELEASE);
		return -1;
	}
	if (!(fl & O_NONBLOCK) && set_nonblock(c, 0) < 0)
		goto fail;
	uint32_t set = __atomic_load_n(&agents[fd], __ATOMIC_RELAXED);
	for (uint32_t id = 0; id < NVMOCK_UMAD_MAX_AGENTS; id++)
		if ((set & (1u << id)) && send(c, &s->regs[id], sizeof s->regs[id], MSG_NOSIGNAL) < 0)
			goto fail;
	/* The number must still hold the dead socket (not a file the program
	 * opened after closing it); old keeps that socket, to wake a thread
	 * waiting on it (to wait on the new one) once the new one is in place. */
	if (dead_ino(fd) != s->dead || (old = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		goto fail;
	if (sys_dup3(c, fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0) {
		sys_close(old);
		goto fail;
	}
	sys_close(c);
	s->at = now;
	__atomic_store_n(&kinds[fd], FD_LIVE, __ATOMIC_RELEASE);
	/* A byte no MAD is (shim_read drops it), not shutdown: a forked child
	 * may share the dead socket. */
	(void)send(old, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	sys_close(old);
	__atomic_store_n(&s->reviving, 0, __ATOMIC_RELEASE);
	dbg("fd %d: a new fabric daemon; connected again with %d agents", fd, __builtin_popcount(set));
	return 0;
fail:
	sys_close(c);
	__atomic_store_n(&s->reviving, 0, __ATOMIC_RELEASE);
	return -1;
}

/* control sends a control message; a vanished daemon makes the fd dead. */
static void control(int fd, const void *msg, size_t len)
{
	if (kind_of(fd) != FD_LIVE)
		return;
	if (send(fd, msg, len, MSG_NOSIGNAL) < 0) {
		dbg("fd %d: control message: %s", fd, strerror(errno));
		if (gone(errno))
			go_dead(fd);
	}
}

/* ---------------------------------------------------------------------- */
/* read, write, ioctl on shim fds. */

static ssize_t shim_write(int fd, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint32_t id;

	if (n < NVMOCK_UMAD_HDR_SIZE + UMAD_RMPP_HDR) {
		errno = EINVAL;
		return -1;
	}
	memcpy(&id, p, sizeof id);
	if (id >= NVMOCK_UMAD_MAX_AGENTS) {
		errno = EINVAL;
		return -1;
	}
	if (!(__atomic_load_n(&agents[fd], __ATOMIC_RELAXED) & (1u << id))) {
		errno = EIO;
		return -1;
	}
	/* More than one MAD only as an RMPP transfer (its header's active
	 * flag), as the kernel's ib_create_send_mad refuses it. */
	if (n > NVMOCK_UMAD_HDR_SIZE + NVMOCK_UMAD_MAD_SIZE && !(p[NVMOCK_UMAD_HDR_SIZE + 26] & 1)) {
		errno = EINVAL;
		return -1;
	}
	/* Another thread reviving the fd is done in a moment: the request
	 * goes where it puts the fd, not to a socket it is replacing. */
	while (kind_of(fd) == FD_DEAD && revive(fd) == -2)
		sched_yield();
	if (kind_of(fd) == FD_LIVE) {
		ssize_t r = send(fd, buf, n, MSG_NOSIGNAL);
		if (r >= 0 || !gone(errno) || go_dead(fd) < 0)
			return r;
	}

	/* Dead: the kernel returns an unanswered request (timeout_ms != 0) with
	 * status ETIMEDOUT and only its 24-byte MAD header; nothing else. */
	uint32_t timeout_ms;
	memcpy(&timeout_ms, p + 8, sizeof timeout_ms);
	if (timeout_ms != 0) {
		uint8_t hdr[NVMOCK_UMAD_HDR_SIZE];
		uint32_t status = NVMOCK_UMAD_ETIMEDOUT;
		struct iovec iov[2];
		struct msghdr m;

		memcpy(hdr, p, sizeof hdr);
		memcpy(hdr + NVMOCK_UMAD_STATUS_OFF, &status, sizeof status);
		iov[0].iov_base = hdr;
		iov[0].iov_len = sizeof hdr;
		iov[1].iov_base = (void *)(p + NVMOCK_UMAD_HDR_SIZE);
		iov[1].iov_len = UMAD_MAD_HDR;
		memset(&m, 0, sizeof m);
		m.msg_iov = iov;
		m.msg_iovlen = 2;
		if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			dbg("fd %d: timeout reply dropped: %s", fd, strerror(errno));
	}
	return (ssize_t)n;
}

/* timed_out says whether a message is a timed-out request's return. */
static int timed_out(const uint8_t *umad)
{
	uint32_t status;

	memcpy(&status, umad + NVMOCK_UMAD_STATUS_OFF, sizeof status);
	return status == NVMOCK_UMAD_ETIMEDOUT;
}

/* hung_up tells end of file from an empty message (both read as 0 bytes). */
static int hung_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

	return sys_poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP));
}

/*
 * wait_dead is where a read on a dead fd waits: a blocking read with
 * nothing queued (a server waiting for requests) waits in slices of a
 * second, trying revive between them, rather than for ever. -1 with errno
 * when the wait fails (EINTR: a signal, which the read reports).
 */
static int wait_dead(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int fl, r;

	if (!saved_of(fd))
		return 0;
	while (revive(fd) != 0) {
		fl = fcntl(fd, F_GETFL);
		if (fl < 0 || (fl & O_NONBLOCK))
			return 0;
		if ((r = sys_poll(&p, 1, 1000)) != 0)
			return r < 0 ? -1 : 0;
	}
	return 0;
}

static ssize_t shim_read(int fd, void *buf, size_t count)
{
	uint8_t *p = buf;

	if (count < NVMOCK_UMAD_HDR_SIZE) {
		errno = EINVAL;
		return -1;
	}
	for (;;) {
		if (kind_of(fd) == FD_DEAD && wait_dead(fd) < 0)
			return -1;
		/* Peek: n is the whole message's size, at most count bytes copied. */
		ssize_t n = recv(fd, buf, count, MSG_PEEK | MSG_TRUNC);
		if (n < 0)
			return -1;
		if (kind_of(fd) == FD_DEAD && n >= NVMOCK_UMAD_HDR_SIZE + UMAD_MAD_HDR && !timed_out(p)) {
			/* A request that reached the dead socket as it was made (its
			 * send raced go_dead): what the kernel returns for it. */
			uint32_t timeout_ms, status = NVMOCK_UMAD_ETIMEDOUT;
			memcpy(&timeout_ms, p + 8, sizeof timeout_ms);
			if (recv(fd, buf, count, MSG_TRUNC | MSG_DONTWAIT) < 0 || timeout_ms == 0 ||
			    count < NVMOCK_UMAD_HDR_SIZE + UMAD_MAD_HDR)
				continue; /* a response: it vanishes */
			memcpy(p + NVMOCK_UMAD_STATUS_OFF, &status, sizeof status);
			return NVMOCK_UMAD_HDR_SIZE + UMAD_MAD_HDR;
		}
		if (n == 0 && kind_of(fd) == FD_LIVE && hung_up(fd)) {
			/* End of file: the daemon closed the connection. */
			if (go_dead(fd) < 0)
				return -1;
			continue;
		}
		if ((size_t)n <= count) {
			if (n >= NVMOCK_UMAD_HDR_SIZE)
				return recv(fd, buf, count, 0);
			/* Not a MAD: drop it, if it is still the first (revive may
			 * have put another socket under the number since the peek). */
			if (recv(fd, buf, count, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT) == n) {
				(void)recv(fd, buf, 0, MSG_TRUNC | MSG_DONTWAIT);
				dbg("fd %d: dropped a %zd-byte message", fd, n);
			}
			continue;
		}
		/* Too big for the buffer: the kernel's copy_recv_mad. */
		size_t mad = (size_t)n - NVMOCK_UMAD_HDR_SIZE;
		if (mad <= NVMOCK_UMAD_MAD_SIZE || count < NVMOCK_UMAD_HDR_SIZE + NVMOCK_UMAD_MAD_SIZE) {
			errno = EINVAL;
			return -1;
		}
		/* The header (its length the full size) and the first segment are
		 * in buf; the message stays queued for a bigger read. */
		uint32_t len = (uint32_t)n;
		memcpy(p + NVMOCK_UMAD_LENGTH_OFF, &len, sizeof len);
		dbg("fd %d: %zd-byte message, %zu-byte buffer: ENOSPC", fd, n, count);
		errno = ENOSPC;
		return -1;
	}
}

static int register_agent(int fd, uint32_t *id, uint32_t qpn, uint8_t mgmt_class, uint8_t version,
			  uint8_t rmpp, uint32_t oui, const void *method_mask)
{
	struct nvmock_ibd_register r;
	uint32_t set, mask[4];

	for (;;) {
		set = __atomic_load_n(&agents[fd], __ATOMIC_RELAXED);
		if (set == UINT32_MAX) {
			errno = ENOMEM; /* the kernel's "Max Agents (32) reached" */
			return -1;
		}
		*id = (uint32_t)__builtin_ctz(~set);
		if (__atomic_compare_exchange_n(&agents[fd], &set, set | (1u << *id), 0, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			break;
	}
	memcpy(mask, method_mask, sizeof mask); /* 128 bits, bit m = method m */
	memset(&r, 0, sizeof r);
	r.magic = htole32(NVMOCK_IBD_MAGIC);
	r.op = htole32(NVMOCK_IBD_OP_REGISTER);
	r.agent_id = htole32(*id);
	r.qpn = htole32(qpn);
	r.mgmt_class = mgmt_class;
	r.mgmt_class_version = version;
	r.rmpp_version = rmpp;
	r.oui = htole32(oui & 0xffffff);
	for (int i = 0; i < 4; i++)
		r.method_mask[i] = htole32(mask[i]);
	struct saved *s = saved_of(fd);
	if (s)
		s->regs[*id] = r;
	control(fd, &r, sizeof r);
	dbg("fd %d: agent %u: qpn %u class 0x%02x version %u rmpp %u oui 0x%06x", fd, *id, qpn, mgmt_class,
	    version, rmpp, oui & 0xffffff);
	return 0;
}

/* vendor_range2 classes need an OUI (ib_register_mad_agent: is_vendor_oui). */
static int bad_oui(uint8_t mgmt_class, uint32_t oui)
{
	return mgmt_class >= 0x30 && mgmt_class <= 0x4f && (oui & 0xffffff) == 0;
}

static int shim_ioctl(int fd, unsigned long req, void *arg)
{
	switch ((unsigned int)req) { /* the kernel's cmd is an unsigned int */
	case UMAD_REGISTER_AGENT: {
		struct umad_reg_req r;
		uint32_t oui, id;
		if (!arg) {
			errno = EFAULT;
			return -1;
		}
		memcpy(&r, arg, sizeof r);
		oui = (uint32_t)r.oui[0] << 16 | (uint32_t)r.oui[1] << 8 | r.oui[2];
		if ((r.qpn != 0 && r.qpn != 1) || bad_oui(r.mgmt_class, oui)) {
			errno = EINVAL;
			return -1;
		}
		if (register_agent(fd, &id, r.qpn, r.mgmt_class, r.mgmt_class_version, r.rmpp_version, oui,
				   r.method_mask) < 0)
			return -1;
		memcpy((uint8_t *)arg + offsetof(struct umad_reg_req, id), &id, sizeof id);
		return 0;
	}
	case UMAD_REGISTER_AGENT2: {
		struct umad_reg_req2 r;
		uint32_t id, none = 0;
		if (!arg) {
			errno = EFAULT;
			return -1;
		}
		memcpy(&r, arg, sizeof r);
		if (r.qpn != 0 && r.qpn != 1) {
			errno = EINVAL;
			return -1;
		}
		if (r.flags != 0) {
			/* The daemon does RMPP itself (no IB_USER_MAD_USER_RMPP): say
			 * which flags are supported, none, as the kernel does. */
			memcpy((uint8_t *)arg + offsetof(struct umad_reg_req2, flags), &none, sizeof none);
			errno = EINVAL;
			return -1;
		}
		if ((r.mgmt_class && (r.oui & 0xff000000)) || bad_oui(r.mgmt_class, r.oui)) {
			errno = EINVAL;
			return -1;
		}
		if (register_agent(fd, &id, r.qpn, r.mgmt_class, r.mgmt_class_version, r.rmpp_version, r.oui,
				   r.method_mask) < 0)
			return -1;
		memcpy((uint8_t *)arg + offsetof(struct umad_reg_req2, id), &id, sizeof id);
		return 0;
	}
	case UMAD_UNREGISTER_AGENT: {
		struct nvmock_ibd_unregister u;
		uint32_t id, set;
		if (!arg) {
			errno = EFAULT;
			return -1;
		}
		memcpy(&id, arg, sizeof id);
		if (id >= NVMOCK_UMAD_MAX_AGENTS) {
			errno = EINVAL;
			return -1;
		}
		set = __atomic_fetch_and(&agents[fd], ~(1u << id), __ATOMIC_RELAXED);
		if (!(set & (1u << id))) {
			errno = EINVAL;
			return -1;
		}
		u.magic = htole32(NVMOCK_IBD_MAGIC);
		u.op = htole32(NVMOCK_IBD_OP_UNREGISTER);
		u.agent_id = htole32(id);
		control(fd, &u, sizeof u);
		dbg("fd %d: agent %u unregistered", fd, id);
		return 0;
	}
	case UMAD_ENABLE_PKEY:
		/* Always: the daemon speaks only the 64-byte (P_Key index) header. */
		return 0;
	case FIONBIO:
	case FIOASYNC:
	case FIOCLEX:
	case FIONCLEX: {
		/* The VFS answers these for every file, the umad device included. */
		int (*f)(int, unsigned long, ...) = NEXTFN(ioctl);
		return f ? f(fd, req, arg) : (int)syscall(SYS_ioctl, fd, req, arg);
	}
	default:
		errno = ENOTTY;
		return -1;
	}
}

/* ---------------------------------------------------------------------- */
/* Interposed entry points. */

static int needs_mode(int flags)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
}

/* MODE reads open's optional third argument, as glibc does. */
#define MODE(flags, mode)                                           \
	do {                                                        \
		va_list ap;                                         \
		va_start(ap, flags);                                \
		mode = needs_mode(flags) ? (mode_t)va_arg(ap, int) : 0; \
		va_end(ap);                                         \
	} while (0)

/*
 * redirected opens a umad or issm device and reports 1, or reports 0 for
 * every other path: the whole cost of the shim for them. An absolute path
 * names the same file whatever openat's dirfd is.
 */
static inline int redirected(const char *path, int flags, int *fd)
{
	uint32_t index;
	int kind = redirect_path(path, &index);

	if (__builtin_expect(kind == PATH_OTHER, 1))
		return 0;
	if (kind == PATH_RDMA_CM) {
		/* No kernel rdma_cm: the node is there, its driver is not, as
		 * on a node without rdma_ucm (misc_open's ENODEV). /dev/null's
		 * zeroed answers hung librdmacm (UCX) on its own lock. */
		errno = ENODEV;
		*fd = -1;
		return 1;
	}
	*fd = shim_open(kind, index, flags);
	return 1;
}

static int sys_openat(int dirfd, const char *path, int flags, mode_t mode)
{
	return (int)syscall(SYS_openat, dirfd, path, flags, mode);
}

EXPORT int open(const char *path, int flags, ...)
{
	int (*f)(const char *, int, ...);
	mode_t mode;
	int fd;

	MODE(flags, mode);
	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(open);
	return f ? f(path, flags, mode) : sys_openat(AT_FDCWD, path, flags, mode);
}

EXPORT int open64(const char *path, int flags, ...)
{
	int (*f)(const char *, int, ...);
	mode_t mode;
	int fd;

	MODE(flags, mode);
	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(open64);
	return f ? f(path, flags, mode) : sys_openat(AT_FDCWD, path, flags, mode);
}

EXPORT int __open_2(const char *path, int flags)
{
	int (*f)(const char *, int);
	int fd;

	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(open_2);
	return f ? f(path, flags) : sys_openat(AT_FDCWD, path, flags, 0);
}

EXPORT int __open64_2(const char *path, int flags)
{
	int (*f)(const char *, int);
	int fd;

	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(open64_2);
	return f ? f(path, flags) : sys_openat(AT_FDCWD, path, flags, 0);
}

EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	int (*f)(int, const char *, int, ...);
	mode_t mode;
	int fd;

	MODE(flags, mode);
	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(openat);
	return f ? f(dirfd, path, flags, mode) : sys_openat(dirfd, path, flags, mode);
}

EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	int (*f)(int, const char *, int, ...);
	mode_t mode;
	int fd;

	MODE(flags, mode);
	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(openat64);
	return f ? f(dirfd, path, flags, mode) : sys_openat(dirfd, path, flags, mode);
}

EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	int (*f)(int, const char *, int);
	int fd;

	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(openat_2);
	return f ? f(dirfd, path, flags) : sys_openat(dirfd, path, flags, 0);
}

EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	int (*f)(int, const char *, int);
	int fd;

	if (redirected(path, flags, &fd))
		return fd;
	f = NEXTFN(openat64_2);
	return f ? f(dirfd, path, flags) : sys_openat(dirfd, path, flags, 0);
}

EXPORT ssize_t read(int fd, void *buf, size_t count)
{
	int k = kind_of(fd);

	if (k == FD_LIVE || k == FD_DEAD)
		return shim_read(fd, buf, count);
	if (k == FD_CHAN && count < NVMOCK_COMP_EVENT_SIZE)
		return channel_short_read(fd);
	if (k == FD_ASYNC)
		return async_read(fd, buf, count);
	return sys_read(fd, buf, count);
}

/* _FORTIFY_SOURCE's read: glibc's own calls its internal read, not ours. */
EXPORT ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen)
{
	ssize_t (*f)(int, void *, size_t, size_t);

	int k = kind_of(fd);

	if ((k == FD_LIVE || k == FD_DEAD) && count <= buflen)
		return shim_read(fd, buf, count);
	if (k == FD_CHAN && count < NVMOCK_COMP_EVENT_SIZE)
		return channel_short_read(fd);
	if (k == FD_ASYNC && count <= buflen)
		return async_read(fd, buf, count);
	f = NEXTFN(read_chk);
	if (f)
		return f(fd, buf, count, buflen);
	if (count > buflen)
		abort();
	return syscall(SYS_read, fd, buf, count);
}

EXPORT ssize_t write(int fd, const void *buf, size_t count)
{
	int k = kind_of(fd);

	if (k == FD_NONE)
		return sys_write(fd, buf, count);
	if (k == FD_LIVE || k == FD_DEAD)
		return shim_write(fd, buf, count);
	return verbs_write(fd, k, buf, count);
}

EXPORT int ioctl(int fd, unsigned long req, ...)
{
	int (*f)(int, unsigned long, ...);
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	int k = kind_of(fd);
	if (k == FD_LIVE || k == FD_DEAD)
		return shim_ioctl(fd, req, arg);
	f = NEXTFN(ioctl);
	return f ? f(fd, req, arg) : (int)syscall(SYS_ioctl, fd, req, arg);
}

EXPORT int close(int fd)
{
	if (kind_of(fd) != FD_NONE)
		forget(fd);
	return next_close(fd);
}

EXPORT int dup2(int oldfd, int newfd)
{
	int (*f)(int, int) = NEXTFN(dup2);
	int r;

	if (f)
		r = f(oldfd, newfd);
	else if (oldfd == newfd)
		r = fcntl(oldfd, F_GETFD) < 0 ? -1 : newfd;
	else
		r = (int)syscall(SYS_dup3, oldfd, newfd, 0);
	if (r >= 0 && oldfd != newfd)
		forget(newfd);
	return r;
}

EXPORT int dup3(int oldfd, int newfd, int flags)
{
	int r = sys_dup3(oldfd, newfd, flags);

	if (r >= 0)
		forget(newfd);
	return r;
}

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	int (*f)(unsigned int, unsigned int, int) = NEXTFN(close_range);

	/* Forgotten before they close, as closefrom does: a channel made by
	 * another thread just after could take the numbers otherwise. */
	if (first <= last && !(flags & CLOSE_RANGE_CLOEXEC))
		forget_range(first, last);
	return f ? f(first, last, flags) : (int)syscall(SYS_close_range, first, last, flags);
}

EXPORT void closefrom(int lowfd)
{
	void (*f)(int) = NEXTFN(closefrom);

	if (lowfd < 0)
		lowfd = 0;
	forget_range((unsigned int)lowfd, NVMOCK_UMAD_MAX_FD - 1);
	if (f)
		f(lowfd);
	else
		syscall(SYS_close_range, (unsigned int)lowfd, ~0U, 0);
}

/* ---------------------------------------------------------------------- */
/* poll and ppoll on umad fds: the kernel's device never ends, so a daemon's
 * hangup does not wake a poll (it turns the fd dead, see go_dead), and a
 * server waiting on a dead fd (ibping -S, opensm: libibumad's umad_recv
 * polls before it reads) waits in slices of a second, trying revive
 * between them. Other programs pay one load. */


static int umad_in(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++) {
		int k = kind_of(fds[i].fd);
		if (k == FD_LIVE || k == FD_DEAD)
			return 1;
	}
	return 0;
}

static int dead_in(const struct pollfd *fds, nfds_t n)
{
	for (nfds_t i = 0; i < n; i++)
		if (kind_of(fds[i].fd) == FD_DEAD && saved_of(fds[i].fd))
			return 1;
	return 0;
}

/* hangups takes the wakes of umad fds whose daemon hung up out of r ready
 * entries: a live one with nothing left to read but the end turns dead,
 * and each such entry (another thread may have turned it dead first) gets
 * what its socket now says. */
static int hangups(struct pollfd *fds, nfds_t n, int r)
{
	uint8_t b;

	for (nfds_t i = 0; i < n; i++) {
		int k = kind_of(fds[i].fd);
		if (!(fds[i].revents & (POLLHUP | POLLRDHUP | POLLERR)) || (k != FD_LIVE && k != FD_DEAD))
			continue;
		if (k == FD_LIVE && recv(fds[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
			go_dead(fds[i].fd);
		struct pollfd q = { .fd = fds[i].fd, .events = fds[i].events };
		if (sys_poll(&q, 1, 0) < 0)
			continue;
		fds[i].revents = q.revents;
		if (q.revents == 0)
			r--;
	}
	return r;
}

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* poll_umad polls a set with umad fds; ms < 0: no timeout. */
static int poll_umad(struct pollfd *fds, nfds_t n, int64_t ms, const sigset_t *mask)
{
	int64_t end = ms < 0 ? -1 : now_ms() + ms;

	for (;;) {
		for (nfds_t i = 0; i < n; i++)
			if (kind_of(fds[i].fd) == FD_DEAD)
				revive(fds[i].fd);
		int64_t left = end < 0 ? -1 : end - now_ms();
		if (end >= 0 && left < 0)
			left = 0;
		int slice = dead_in(fds, n) && (left < 0 || left > 1000) ? 1000 : (int)min_i64(left, INT_MAX);
		int r = sys_ppoll(fds, n, slice, mask);
		if (r > 0)
			r = hangups(fds, n, r);
		if (r != 0 || (end >= 0 && now_ms() >= end))
			return r;
	}
}

/* glibc 2.36's poll.h calls fds write-only (access attribute), which it is
 * not: the events are read. */
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (__builtin_expect(!__atomic_load_n(&any_umad, __ATOMIC_RELAXED), 1) || !umad_in(fds, n))
		return sys_poll(fds, n, timeout);
	return poll_umad(fds, n, timeout, NULL);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask)
{
	int (*f)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);

	if (__builtin_expect(!__atomic_load_n(&any_umad, __ATOMIC_RELAXED), 1) || !umad_in(fds, n) ||
	    (t && (t->tv_sec < 0 || t->tv_nsec < 0 || t->tv_nsec >= 1000000000))) {
		f = NEXTFN(ppoll);
		return f ? f(fds, n, t, mask) : (int)syscall(SYS_ppoll, fds, n, t, mask, _NSIG / 8);
	}
	/* Longer than a year is for ever (and cannot overflow). */
	int64_t ms = !t || t->tv_sec > 366 * 86400 ? -1 : (int64_t)t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000;
	return poll_umad(fds, n, ms, mask);
}

/* The _FORTIFY_SOURCE forms, which fortified programs call with a length
 * the compiler cannot check. */
EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof *fds < n)
		abort();
	return poll(fds, n, timeout);
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof *fds < n)
		abort();
	return ppoll(fds, n, t, mask);
}
