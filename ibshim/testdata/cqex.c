/*
 * cqex: checks extended CQs on one mock HCA as mlx5 makes them: the masks,
 * flags and fields it takes (and its errors for the others), wall-clock
 * completion times, and a CQ that ignores overruns. Built and run by
 * ibshim/datapath_test.go inside `nvmock exec`; prints "ok <check>" per
 * check and exits non-zero at the first that fails.
 *
 * Usage: cqex DEVICE
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

static uint64_t wall_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* Two RC QPs on the port, a's completions in cq. */
static void pair(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_cq *other, struct ibv_qp **a, struct ibv_qp **b)
{
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 } };

	*a = ibv_create_qp(pd, &ia);
	ia.send_cq = ia.recv_cq = other;
	*b = ibv_create_qp(pd, &ia);
	if (!*a || !*b)
		FAIL("RC QPs: %s", strerror(errno));
	to_rts(*a, (*b)->qp_num);
	to_rts(*b, (*a)->qp_num);
}

static void write_to(struct ibv_qp *qp, uint64_t id, struct ibv_mr *mr)
{
	struct ibv_sge s = { (uintptr_t)mr->addr, 64, mr->lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { (uintptr_t)mr->addr + 64, mr->rkey } }, *bad;
	int err;

	if ((err = ibv_post_send(qp, &w, &bad)))
		FAIL("post a write: %s", strerror(err));
}

int main(int argc, char **argv)
{
	const uint64_t all = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG |
			     IBV_WC_EX_WITH_TM_INFO;
	struct ibv_cq_init_attr_ex ca = { .cqe = 16, .wc_flags = all };
	struct ibv_poll_cq_attr pa = { 0 };
	struct ibv_wc_tm_info tm = { 1, 1 };
	struct ibv_async_event ev;
	struct ibv_cq_ex *x;
	struct ibv_cq *plain;
	struct ibv_qp *qa, *qb;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	static char buf[4096];
	uint64_t t0, t1, ns;
	int i, err, got;

	if (argc != 2)
		FAIL("usage: cqex DEVICE");
	open_device(argv[1]);
	pd = ibv_alloc_pd(ctx);
	plain = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	if (!plain || !mr)
		FAIL("a PD, a CQ and a region: %s", strerror(errno));

	/* mlx5's errors: an unknown mask or flag is EINVAL, a field it does
	 * not know EOPNOTSUPP. */
	ca.comp_mask = 1 << 5;
	if (ibv_create_cq_ex(ctx, &ca) || errno != EINVAL)
		FAIL("an unknown comp_mask: %s, want EINVAL", strerror(errno));
	ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	ca.flags = 1 << 7;
	if (ibv_create_cq_ex(ctx, &ca) || errno != EINVAL)
		FAIL("an unknown flag: %s, want EINVAL", strerror(errno));
	ca.comp_mask = 0;
	ca.wc_flags = all | (1ULL << 40);
	if (ibv_create_cq_ex(ctx, &ca) || errno != EOPNOTSUPP)
		FAIL("an unknown field: %s, want EOPNOTSUPP", strerror(errno));
	puts("ok refusals");

	/* Every field mlx5 takes: the wall clock's time is the completion's,
	 * and no completion here carries a VLAN, flow tag or tag. */
	ca.wc_flags = all;
	if (!(x = ibv_create_cq_ex(ctx, &ca)))
		FAIL("a CQ of every field mlx5 takes: %s", strerror(errno));
	pair(pd, ibv_cq_ex_to_cq(x), plain, &qa, &qb);
	t0 = wall_ns();
	write_to(qa, 1, mr);
	while ((err = ibv_start_poll(x, &pa)) == ENOENT)
		usleep(100);
	t1 = wall_ns();
	if (err || x->status != IBV_WC_SUCCESS || x->wr_id != 1)
		FAIL("the write's completion: %d, status %d", err, x->status);
	ns = ibv_wc_read_completion_wallclock_ns(x);
	ibv_wc_read_tm_info(x, &tm);
	if (ns < t0 || ns > t1)
		FAIL("wall-clock time %llu outside [%llu, %llu]", (unsigned long long)ns, (unsigned long long)t0,
		     (unsigned long long)t1);
	if (ibv_wc_read_cvlan(x) || ibv_wc_read_flow_tag(x) || tm.tag || tm.priv)
		FAIL("a VLAN, flow tag or tag on an InfiniBand completion");
	ibv_end_poll(x);
	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_destroy_cq(ibv_cq_ex_to_cq(x)))
		FAIL("destroy");
	puts("ok fields");

	/* IGNORE_OVERRUN: a full CQ loses completions, with no CQ error and
	 * no harm to the QP, which completes into it again once polled. */
	ca = (struct ibv_cq_init_attr_ex){ .cqe = 1, .wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS, .flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN };
	if (!(x = ibv_create_cq_ex(ctx, &ca)))
		FAIL("a CQ that ignores overruns: %s", strerror(errno));
	pair(pd, ibv_cq_ex_to_cq(x), plain, &qa, &qb);
	for (i = 0; i < 6; i++)
		write_to(qa, 10 + i, mr);
	usleep(300000);
	got = 0;
	if (!ibv_start_poll(x, &pa)) {
		do {
			if (x->status != IBV_WC_SUCCESS)
				FAIL("a completion of an overrun CQ: status %d", x->status);
			got++;
		} while (!ibv_next_poll(x));
		ibv_end_poll(x);
	}
	if (got < 1 || got > ibv_cq_ex_to_cq(x)->cqe + 1)
		FAIL("%d completions from a CQ of %d", got, ibv_cq_ex_to_cq(x)->cqe);
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	if (!ibv_get_async_event(ctx, &ev))
		FAIL("an async event (%s) for a CQ that ignores overruns", ibv_event_type_str(ev.event_type));
	write_to(qa, 20, mr);
	while ((err = ibv_start_poll(x, &pa)) == ENOENT)
		usleep(100);
	if (err || x->wr_id != 20 || x->status != IBV_WC_SUCCESS)
		FAIL("a write after the overrun: %d, wr_id %llu, status %d", err, (unsigned long long)x->wr_id, x->status);
	ibv_end_poll(x);
	puts("ok ignore-overrun");

	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_destroy_cq(ibv_cq_ex_to_cq(x)) || ibv_dereg_mr(mr) ||
	    ibv_destroy_cq(plain) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		FAIL("tearing down");
	return 0;
}
