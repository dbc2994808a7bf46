//go:build ignore

/*
 * Part of libnvmock-umad.so: completion channels for the mock HCAs.
 *
 * ibv_create_comp_channel is libibverbs' own, not a provider's: it writes
 * IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL to the context's command fd and
 * takes the new fd from the kernel's answer. No kernel answers for a mock
 * HCA, so the provider points its command fd at /dev/full (every command
 * fails with ENOSPC) and, when this shim is loaded, hands the fd to
 * nvmock_verbs_cmd_fd. The shim's write then answers that one command as
 * the kernel's uverbs does, with one end of a socket pair; the provider
 * takes the other end (nvmock_verbs_channel_writer) and sends a CQ's
 * handle to it when the CQ is armed and completes work, which is what
 * ibv_get_cq_event reads (struct ib_uverbs_comp_event_desc, 8 bytes).
 *
 * The channel fd is a SOCK_SEQPACKET socket: each read returns one event,
 * as the kernel's does, poll and epoll work, and the provider can take a
 * destroyed CQ's events back. Closing the channel closes the shim's copy
 * of the provider's end; each CQ on it holds its own (verbs/objects.c), as
 * the kernel keeps a channel while a CQ refers to it. Every other command
 * still fails: libibverbs sends no other one for this provider.
 *
 * The provider also hands over its async fd (a connection on which the
 * daemon sends port events), so that the daemon going away never reads
 * as an end of file, which the kernel's async fd never gives.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>

#include "shim.h"

/* For a channel fd, its provider end; for a provider end, its channel. */
static int32_t pair[NVMOCK_UMAD_MAX_FD];

/* The kernel's answer to CREATE_COMP_CHANNEL (drivers/infiniband/core/
 * uverbs_cmd.c): the length must be the header's in_words, the answer
 * must fit out_words, and the new fd is close-on-exec. */
static ssize_t create_channel(const uint8_t *buf, size_t n, const struct ib_uverbs_cmd_hdr *h)
{
	struct ib_uverbs_create_comp_channel req;
	struct ib_uverbs_create_comp_channel_resp resp;
	int sv[2];

	if (n != (size_t)h->in_words * 4 || n < sizeof(*h) + sizeof(req)) {
		errno = EINVAL;
		return -1;
	}
	if ((size_t)h->out_words * 4 < sizeof(resp)) {
		errno = ENOSPC;
		return -1;
	}
	memcpy(&req, buf + sizeof(*h), sizeof(req));
	if (!req.response) {
		errno = EFAULT;
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	sv[0] = below_limit(sv[0], 1);
	if (sv[0] < 0) {
		sys_close(sv[1]);
		return -1;
	}
	sv[1] = below_limit(sv[1], 1);
	if (sv[1] < 0) {
		sys_close(sv[0]);
		return -1;
	}
	__atomic_store_n(&pair[sv[0]], sv[1], __ATOMIC_RELAXED);
	__atomic_store_n(&pair[sv[1]], sv[0], __ATOMIC_RELAXED);
	track(sv[1], FD_CHAN_W);
	track(sv[0], FD_CHAN);
	resp.fd = (uint32_t)sv[0];
	memcpy((void *)(uintptr_t)req.response, &resp, sizeof(resp));
	dbg("completion channel: fd %d (provider end %d)", sv[0], sv[1]);
	return (ssize_t)n;
}

ssize_t verbs_write(int fd, int kind, const void *buf, size_t n)
{
	struct ib_uverbs_cmd_hdr h;

	if (kind == FD_CHAN) {
		errno = EBADF; /* the kernel opens its channel file read-only */
		return -1;
	}
	if (kind == FD_CMD && n >= sizeof(h)) {
		memcpy(&h, buf, sizeof(h));
		if (h.command == IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL)
			return create_channel(buf, n, &h);
	}
	return sys_write(fd, buf, n);
}

/* The kernel refuses a read shorter than one event, once there is one
 * (ib_uverbs_event_read waits first, or says EAGAIN if non-blocking). */
ssize_t channel_short_read(int fd)
{
	char c;

	if (recv(fd, &c, 0, MSG_PEEK) < 0)
		return -1;
	errno = EINVAL;
	return -1;
}

/* The program closed (or replaced) a channel fd: the provider's end goes
 * with it, as the kernel frees the channel with its last reference. */
void channel_gone(int fd)
{
	int w = __atomic_load_n(&pair[fd], __ATOMIC_RELAXED);

	if (kind_of(w) == FD_CHAN_W && __atomic_load_n(&pair[w], __ATOMIC_RELAXED) == fd) {
		__atomic_store_n(&kinds[w], FD_NONE, __ATOMIC_RELEASE);
		sys_close(w);
	}
}

/* async_read reads a mock HCA's async fd, a connection to the daemon.
 * The daemon going away (end of file) must not show: the kernel's async
 * fd never ends, and a program polling it would spin. The fd becomes an
 * eventfd in place, which never signals: no more events, as from an HCA
 * that has none. */
ssize_t async_read(int fd, void *buf, size_t n)
{
	ssize_t r = sys_read(fd, buf, n);
	int fdfl, fl, q;

	if (r != 0 || n == 0)
		return r;
	fdfl = fcntl(fd, F_GETFD);
	fl = fcntl(fd, F_GETFL);
	q = eventfd(0, ((fdfl >= 0 && (fdfl & FD_CLOEXEC)) ? EFD_CLOEXEC : 0) | ((fl >= 0 && (fl & O_NONBLOCK)) ? EFD_NONBLOCK : 0));
	if (q < 0)
		return 0;
	__atomic_store_n(&kinds[fd], FD_NONE, __ATOMIC_RELEASE);
	if (sys_dup3(q, fd, (fdfl >= 0 && (fdfl & FD_CLOEXEC)) ? O_CLOEXEC : 0) < 0) {
		sys_close(q);
		return 0;
	}
	sys_close(q);
	dbg("async fd %d: the fabric daemon went away; no more port events", fd);
	return sys_read(fd, buf, n);
}

static int mark(int fd, int kind)
{
	if (fd < 0 || fd >= NVMOCK_UMAD_MAX_FD) {
		errno = EMFILE;
		return -1;
	}
	track(fd, kind);
	return 0;
}

/* The provider marks a mock HCA's async fd and its command fd. */
EXPORT int nvmock_verbs_async_fd(int fd) { return mark(fd, FD_ASYNC); }
EXPORT int nvmock_verbs_cmd_fd(int fd) { return mark(fd, FD_CMD); }

/* The provider's end of the channel fd, or -1 if fd is not one. */
EXPORT int nvmock_verbs_channel_writer(int fd)
{
	if (kind_of(fd) != FD_CHAN)
		return -1;
	return __atomic_load_n(&pair[fd], __ATOMIC_RELAXED);
}
