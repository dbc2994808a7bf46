/*
 * lifecycle: what a program meets at the edges of the verbs it uses, as
 * mlx5 answers it: posting errors (ENOMEM where the work does not fit
 * mlx5's queue, as rdma-core's providers/mlx5/qp.c returns), a region of
 * no bytes (EINVAL, as the kernel's ib_umem_get), memory keys after their
 * 24-bit count wraps (never a live region's), and a child forked while
 * the data path works closing its parent's context (it must not hang).
 * Built and run by ibshim/datapath_test.go inside `nvmock exec`; prints
 * "ok <check>" per check and exits non-zero at the first that fails.
 *
 * Usage: lifecycle DEVICE
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

static struct ibv_qp *rc(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 128, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);

	if (!qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	return qp;
}

int main(int argc, char **argv)
{
	static char buf[1 << 16];
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge[3];
	struct ibv_qp *a, *b;
	struct ibv_mr *mr, *keep;
	struct ibv_cq *cq;
	struct ibv_pd *pd;
	int i, err, hung = 0;

	if (argc != 2)
		FAIL("usage: lifecycle DEVICE");
	/* The key count starts 16 short of its wrap (provider.c). */
	setenv("NVMOCK_VERBS_NEXT_KEY", "0xfffff0", 1);
	open_device(argv[1]);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 512, NULL, NULL, 0);
	if (!pd || !cq)
		FAIL("pd, cq");
	keep = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!keep)
		FAIL("ibv_reg_mr: %s", strerror(errno));

	a = rc(pd, cq);
	b = rc(pd, cq);
	for (i = 0; i < 3; i++)
		sge[i] = (struct ibv_sge){ (uintptr_t)buf, 8, keep->lkey };
	wr = (struct ibv_send_wr){ .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { (uintptr_t)buf + 4096, keep->rkey } };
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
	if (ibv_modify_qp(a, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		FAIL("to INIT");
	if ((err = ibv_post_send(a, &wr, &bad)) != ENOMEM)
		FAIL("post_send in INIT: %d, want ENOMEM", err);
	at.qp_state = IBV_QPS_RESET;
	if (ibv_modify_qp(a, &at, IBV_QP_STATE))
		FAIL("to RESET");
	to_rts(a, b->qp_num);
	to_rts(b, a->qp_num);
	wr.num_sge = 3;
	if ((err = ibv_post_send(a, &wr, &bad)) != ENOMEM)
		FAIL("3 gather entries on a QP of 2: %d, want ENOMEM", err);
	wr.num_sge = 1;
	sge[0].length = 65;
	wr.send_flags |= IBV_SEND_INLINE;
	if ((err = ibv_post_send(a, &wr, &bad)) != ENOMEM)
		FAIL("65 bytes inline on a QP of 64: %d, want ENOMEM", err);
	sge[0].length = 8;
	wr.send_flags = IBV_SEND_SIGNALED;
	if ((err = ibv_post_send(a, &wr, &bad)))
		FAIL("a write that fits: %s", strerror(err));
	wait_wc(cq, "the write");
	printf("ok post-codes\n");

	if ((mr = ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE)) || errno != EINVAL)
		FAIL("a region of 0 bytes: %s, want EINVAL", mr ? "made" : strerror(errno));
	printf("ok zero-length\n");

	/* keep has the first key after the start; 40 more go round 2^24. */
	for (i = 0; i < 40; i++) {
		if (!(mr = ibv_reg_mr(pd, buf + 8192, 64, IBV_ACCESS_LOCAL_WRITE)))
			FAIL("ibv_reg_mr %d: %s", i, strerror(errno));
		if (mr->lkey == keep->lkey || mr->rkey == keep->rkey)
			FAIL("region %d got the live region's key %#x", i, keep->lkey);
		if (ibv_dereg_mr(mr))
			FAIL("ibv_dereg_mr");
	}
	printf("ok key-wrap\n");

	/* Children forked while writes flow close the context they got. */
	for (i = 0; i < 20; i++) {
		int k, st;
		pid_t pid;

		for (k = 0; k < 64; k++)
			if ((err = ibv_post_send(a, &wr, &bad)))
				FAIL("post %d: %s", k, strerror(err));
		pid = fork();
		if (pid < 0)
			FAIL("fork");
		if (pid == 0) {
			alarm(5);
			_exit(ibv_close_device(ctx) ? 1 : 0);
		}
		if (waitpid(pid, &st, 0) != pid)
			FAIL("waitpid");
		hung += WIFSIGNALED(st);
		for (k = 0; k < 64; k++)
			wait_wc(cq, "the writes around fork");
	}
	if (hung)
		FAIL("%d of 20 children hung closing the context", hung);
	printf("ok fork-close\n");
	return 0;
}
