/*
 * hostile: a program that misuses what the shim interposes and the verbs
 * the provider implements, as buggy programs do: bad lengths, bad and
 * closed fds, odd verbs arguments, objects still in use. Each call must
 * fail as the kernel or mlx5 fails it, never crash or touch memory it
 * must not. Built with AddressSanitizer and run by ibshim/asan_test.go
 * inside `nvmock exec`; prints "ok <check>" per check and exits non-zero
 * at the first that fails.
 *
 * Usage: hostile DEVICE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

/* The umad ioctls (rdma/ib_user_mad.h). */
#define REGISTER_AGENT 0xc01c1b01
#define UNREGISTER_AGENT 0x40041b02
#define REGISTER_AGENT2 0xc0281b04

/* EXPECT: call must return -1 with errno want. */
#define EXPECT(call, want)                                                                      \
	do {                                                                                    \
		errno = 0;                                                                      \
		long r_ = (long)(call);                                                         \
		if (r_ != -1 || errno != (want))                                                \
			FAIL("%s = %ld, errno %s; want -1, %s", #call, r_, strerror(errno), strerror(want)); \
	} while (0)

static void umad_fds(void)
{
	static uint8_t buf[1 << 16];
	struct pollfd p[3];
	uint32_t id;
	int fd, i;

	fd = open("/dev/infiniband/umad0", O_RDWR);
	if (fd < 0)
		FAIL("open umad0: %s", strerror(errno));
	EXPECT(read(fd, buf, 0), EINVAL);
	EXPECT(read(fd, buf, 63), EINVAL);
	EXPECT(write(fd, buf, 0), EINVAL);
	EXPECT(write(fd, buf, 99), EINVAL);
	memset(buf, 0xff, 256); /* agent id 0xffffffff */
	EXPECT(write(fd, buf, 256), EINVAL);
	memset(buf, 0, 256); /* agent 0, not registered */
	EXPECT(write(fd, buf, 256), EIO);
	printf("ok umad-lengths\n");

	EXPECT(ioctl(fd, REGISTER_AGENT, NULL), EFAULT);
	EXPECT(ioctl(fd, REGISTER_AGENT2, NULL), EFAULT);
	EXPECT(ioctl(fd, UNREGISTER_AGENT, NULL), EFAULT);
	id = 32;
	EXPECT(ioctl(fd, UNREGISTER_AGENT, &id), EINVAL);
	id = UINT32_MAX;
	EXPECT(ioctl(fd, UNREGISTER_AGENT, &id), EINVAL);
	id = 3;
	EXPECT(ioctl(fd, UNREGISTER_AGENT, &id), EINVAL);
	EXPECT(ioctl(fd, 0xdeadbeef, buf), ENOTTY);
	/* An SMP agent's answer, read into buffers too short for it. */
	uint8_t smp[28] = { [20] = 0, [21] = 0x01, [22] = 1 };
	if (ioctl(fd, REGISTER_AGENT, smp) < 0)
		FAIL("register an SMP agent: %s", strerror(errno));
	memset(buf, 0, 64 + 256);
	memcpy(buf, smp, 4); /* its id */
	buf[8] = 100; /* timeout_ms */
	buf[29] = 1; /* LID 1, big-endian at 28 */
	memcpy(buf + 64, (uint8_t[]){ 1, 0x01, 1, 0x01 }, 4); /* SMP Get */
	buf[64 + 17] = 0x11; /* NodeInfo */
	if (write(fd, buf, 64 + 256) != 64 + 256)
		FAIL("write an SMP: %s", strerror(errno));
	p[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (poll(p, 1, 2000) != 1)
		FAIL("no answer to the SMP");
	EXPECT(read(fd, buf, 64), EINVAL);
	EXPECT(read(fd, buf, 64 + 100), EINVAL);
	if (read(fd, buf, sizeof buf) != 64 + 256)
		FAIL("read the SMP's answer: %s", strerror(errno));
	id = 0;
	if (ioctl(fd, UNREGISTER_AGENT, &id) < 0)
		FAIL("unregister the SMP agent");
	/* 32 agents, then the kernel's ENOMEM. */
	for (i = 0; i < 33; i++) {
		uint8_t req[28] = { 0 };
		req[20] = 1; /* qpn */
		req[21] = 0x81; /* vendor class, range 1 */
		req[22] = 1;
		if (i < 32 && ioctl(fd, REGISTER_AGENT, req) < 0)
			FAIL("register agent %d: %s", i, strerror(errno));
		if (i == 32)
			EXPECT(ioctl(fd, REGISTER_AGENT, req), ENOMEM);
	}
	printf("ok umad-ioctls\n");

	/* A poll of the umad fd among bad fds: those report POLLNVAL. */
	p[0] = (struct pollfd){ .fd = fd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = 100000, .events = POLLIN };
	p[2] = (struct pollfd){ .fd = -1, .events = POLLIN };
	if (poll(p, 3, 10) < 0 || !(p[1].revents & POLLNVAL) || p[2].revents)
		FAIL("poll: %s, revents %#x %#x", strerror(errno), p[1].revents, p[2].revents);
	if (poll(NULL, 0, 0) != 0)
		FAIL("poll of nothing");
	struct timespec bad = { .tv_sec = 0, .tv_nsec = -1 };
	EXPECT(ppoll(p, 1, &bad, NULL), EINVAL);
	printf("ok umad-poll\n");

	/* Numbers that were never, or are no longer, umad fds. */
	if (dup2(fd, fd) != fd)
		FAIL("dup2 onto itself");
	close(fd);
	EXPECT(read(fd, buf, sizeof buf), EBADF);
	EXPECT(write(fd, buf, 256), EBADF);
	EXPECT(ioctl(fd, REGISTER_AGENT, buf), EBADF);
	for (i = 0; i < 3; i++) {
		int bad_fd = (int[]){ -1, 4096, INT_MAX }[i];
		EXPECT(read(bad_fd, buf, 256), EBADF);
		EXPECT(write(bad_fd, buf, 256), EBADF);
		EXPECT(ioctl(bad_fd, REGISTER_AGENT, buf), EBADF);
		EXPECT(close(bad_fd), EBADF);
		EXPECT(dup2(bad_fd, 0), EBADF);
	}
	EXPECT(close_range(10, 5, 0), EINVAL);
	if (close_range(4000, UINT_MAX, 0) != 0)
		FAIL("close_range to the end: %s", strerror(errno));
	printf("ok umad-bad-fds\n");

	/* Paths that only look like a device. */
	const char *paths[] = { "/dev/infiniband/umad", "/dev/infiniband/umad01", "/dev/infiniband/umad0x",
		"/dev/infiniband/umad12345678901", "/dev/infiniband/", "/dev/infiniband/issm" };
	for (i = 0; i < (int)(sizeof paths / sizeof *paths); i++)
		if (open(paths[i], O_RDWR) >= 0)
			FAIL("open %s succeeded", paths[i]);
	EXPECT(open("/dev/infiniband/rdma_cm", O_RDWR), ENODEV);
	printf("ok umad-paths\n");
}

static void verbs_args(const char *dev)
{
	static char buf[1 << 16];
	struct ibv_port_attr pa;
	union ibv_gid gid;
	uint16_t pkey;

	open_device(dev);
	if (ibv_query_port(ctx, 0, &pa) == 0 || ibv_query_port(ctx, 255, &pa) == 0)
		FAIL("ibv_query_port of port 0 or 255 succeeded");
	if (ibv_query_gid(ctx, 1, -1, &gid) == 0 || ibv_query_gid(ctx, 1, 1 << 20, &gid) == 0 ||
	    ibv_query_gid(ctx, 9, 0, &gid) == 0)
		FAIL("ibv_query_gid out of the table succeeded");
	if (ibv_query_pkey(ctx, 1, -1, &pkey) == 0 || ibv_query_pkey(ctx, 1, 1 << 20, &pkey) == 0)
		FAIL("ibv_query_pkey out of the table succeeded");
	printf("ok verbs-queries\n");

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		FAIL("ibv_alloc_pd");
	if (ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE))
		FAIL("a region of no bytes");
	if (ibv_reg_mr(pd, buf, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE) ||
	    ibv_reg_mr(pd, buf, SIZE_MAX - (uintptr_t)buf + 1, IBV_ACCESS_LOCAL_WRITE) ||
	    ibv_reg_mr(pd, (void *)(UINTPTR_MAX - 4095), 8192, IBV_ACCESS_LOCAL_WRITE))
		FAIL("a region past the end of the address space");
	if (ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_REMOTE_WRITE))
		FAIL("remote write without local write"); /* EINVAL, ib_check_mr_access */
	printf("ok verbs-regions\n");

	if (ibv_create_cq(ctx, 0, NULL, NULL, 0) || ibv_create_cq(ctx, -1, NULL, NULL, 0) ||
	    ibv_create_cq(ctx, INT_MAX, NULL, NULL, 0))
		FAIL("a CQ of 0, -1 or INT_MAX entries");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		FAIL("ibv_create_cq");
	if (ibv_resize_cq(cq, -1) == 0 || ibv_resize_cq(cq, INT_MAX) == 0)
		FAIL("ibv_resize_cq to -1 or INT_MAX");
	struct ibv_wc wc[4];
	if (ibv_poll_cq(cq, 0, wc) != 0 || ibv_poll_cq(cq, -1, wc) > 0)
		FAIL("ibv_poll_cq of 0 or -1 entries");
	printf("ok verbs-cqs\n");

	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = UINT32_MAX, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	if (ibv_create_qp(pd, &ia))
		FAIL("a QP of UINT32_MAX send WRs");
	ia.cap = (struct ibv_qp_cap){ .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1 << 20, .max_recv_sge = 1 };
	if (ibv_create_qp(pd, &ia))
		FAIL("a QP of 2^20 SGEs");
	ia.cap = (struct ibv_qp_cap){ .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1,
		.max_inline_data = UINT32_MAX };
	if (ibv_create_qp(pd, &ia))
		FAIL("a QP of UINT32_MAX inline bytes");
	ia.cap = (struct ibv_qp_cap){ .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 200 };
	if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0)
		FAIL("to INIT on port 200");
	qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1, .pkey_index = 60000 };
	if (ibv_modify_qp(qp, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0)
		FAIL("to INIT with P_Key index 60000");
	qa = (struct ibv_qp_attr){ .qp_state = 77 };
	if (ibv_modify_qp(qp, &qa, IBV_QP_STATE) == 0)
		FAIL("to state 77");
	struct ibv_sge sge[8] = { { (uintptr_t)buf, 8, 0 } };
	struct ibv_send_wr wr = { .sg_list = sge, .num_sge = 8, .opcode = IBV_WR_SEND }, *bad_wr;
	if (ibv_post_send(qp, &wr, &bad_wr) == 0)
		FAIL("a send of 8 SGEs on a QP of 1");
	wr = (struct ibv_send_wr){ .sg_list = sge, .num_sge = -1, .opcode = IBV_WR_SEND };
	if (ibv_post_send(qp, &wr, &bad_wr) == 0)
		FAIL("a send of -1 SGEs");
	wr = (struct ibv_send_wr){ .sg_list = sge, .num_sge = 1, .opcode = 200 };
	if (ibv_post_send(qp, &wr, &bad_wr) == 0)
		FAIL("a send of opcode 200");
	struct ibv_recv_wr rw = { .sg_list = sge, .num_sge = 9 }, *bad_rw;
	if (ibv_post_recv(qp, &rw, &bad_rw) == 0)
		FAIL("a receive of 9 SGEs on a QP of 1");
	printf("ok verbs-qps\n");

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = UINT32_MAX, .max_sge = 1 } };
	if (ibv_create_srq(pd, &sa))
		FAIL("an SRQ of UINT32_MAX WRs");
	struct ibv_alloc_dm_attr da = { .length = SIZE_MAX };
	if (ibv_alloc_dm(ctx, &da))
		FAIL("device memory of SIZE_MAX bytes");
	da.length = 0;
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	if (dm)
		ibv_free_dm(dm);
	printf("ok verbs-sizes\n");

	/* In use: EBUSY, as the kernel's uverbs answers. */
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		FAIL("ibv_reg_mr");
	if (ibv_dealloc_pd(pd) != EBUSY)
		FAIL("dealloc a PD that has a QP and a region: want EBUSY");
	if (ibv_destroy_cq(cq) != EBUSY)
		FAIL("destroy a CQ a QP uses: want EBUSY");
	if (ibv_dereg_mr(mr) || ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		FAIL("teardown");
	if (ibv_close_device(ctx))
		FAIL("ibv_close_device");
	printf("ok verbs-in-use\n");
}

int main(int argc, char **argv)
{
	if (argc != 2)
		FAIL("usage: hostile DEVICE");
	umad_fds();
	verbs_args(argv[1]);
	return 0;
}
