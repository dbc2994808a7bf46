/*
 * binds: checks that binding a memory window is the HCA's own work: 100
 * binds leave the port's packet counters (sysfs, which the fabric daemon
 * keeps) where they were, while 100 RDMA writes move them; a bind
 * completes on a QP whose peer is gone; binds between messages, one of
 * them sent again after an RNR, complete in order. Built and run
 * by ibshim/datapath_test.go inside `nvmock exec`; prints "ok <check>"
 * per check and exits non-zero at the first that fails.
 *
 * Usage: binds DEVICE
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

static char path[256];

/* The port's transmitted packets, once the daemon has shown the last. */
static unsigned long long xmit(void)
{
	unsigned long long n;
	FILE *f;

	usleep(700000); /* the daemon shows counters every 200 ms */
	if (!(f = fopen(path, "r")) || fscanf(f, "%llu", &n) != 1)
		FAIL("read %s", path);
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
	static char buf[8192];
	struct ibv_qp *a, *b;
	struct ibv_cq *cq;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_mw *mw;
	unsigned long long x0, x1, x2;
	int i, err;

	if (argc != 2)
		FAIL("usage: binds DEVICE");
	open_device(argv[1]);
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/counters/port_xmit_packets", argv[1]);
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND) : NULL;
	mw = pd ? ibv_alloc_mw(pd, IBV_MW_TYPE_1) : NULL;
	ia.send_cq = ia.recv_cq = cq;
	if (!cq || !mr || !mw || !(a = ibv_create_qp(pd, &ia)) || !(b = ibv_create_qp(pd, &ia)))
		FAIL("a PD, CQ, region, window and QPs: %s", strerror(errno));
	to_rts(a, b->qp_num);
	to_rts(b, a->qp_num);

	x0 = xmit();
	for (i = 0; i < 100; i++) {
		struct ibv_mw_bind mb = { .wr_id = i, .send_flags = IBV_SEND_SIGNALED,
			.bind_info = { mr, (uintptr_t)buf, 4096, IBV_ACCESS_REMOTE_WRITE } };
		struct ibv_wc wc;

		if ((err = ibv_bind_mw(a, mw, &mb)))
			FAIL("bind %d: %s", i, strerror(err));
		wc = wait_wc(cq, "bind");
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_BIND_MW)
			FAIL("bind %d: %s", i, ibv_wc_status_str(wc.status));
	}
	x1 = xmit();
	if (x1 - x0 > 10)
		FAIL("100 binds moved port_xmit_packets by %llu", x1 - x0);
	puts("ok binds-unseen");

	for (i = 0; i < 100; i++) {
		struct ibv_sge s = { (uintptr_t)buf + 4096, 64, mr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { (uintptr_t)buf, mw->rkey } }, *bad;

		if ((err = ibv_post_send(a, &w, &bad)))
			FAIL("write %d: %s", i, strerror(err));
		if (wait_wc(cq, "write").status != IBV_WC_SUCCESS)
			FAIL("write %d through the window", i);
	}
	x2 = xmit();
	if (x2 - x1 < 200)
		FAIL("100 writes moved port_xmit_packets by %llu, want their requests and ACKs", x2 - x1);
	puts("ok writes-seen");

	/* A QP whose peer is gone binds alone, as an HCA does. */
	{
		struct ibv_qp *c = ibv_create_qp(pd, &ia);
		struct ibv_mw_bind mb = { .wr_id = 500, .send_flags = IBV_SEND_SIGNALED,
			.bind_info = { mr, (uintptr_t)buf, 4096, IBV_ACCESS_REMOTE_WRITE } };
		struct ibv_wc wc;

		if (!c)
			FAIL("a third QP: %s", strerror(errno));
		to_rts(c, b->qp_num + 512); /* no such QP */
		if ((err = ibv_bind_mw(c, mw, &mb)))
			FAIL("bind on a QP with no peer: %s", strerror(err));
		wc = wait_wc(cq, "bind on a QP with no peer");
		if (wc.wr_id != 500 || wc.status != IBV_WC_SUCCESS)
			FAIL("bind on a QP with no peer: %s", ibv_wc_status_str(wc.status));
		if (ibv_destroy_qp(c))
			FAIL("destroy");
	}
	puts("ok bind-alone");

	/* Binds between messages: a send that waits for a receive (RNR) is
	 * sent again, and everything completes in order, data intact. */
	{
		struct ibv_mw *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
		struct ibv_sge ss = { (uintptr_t)buf + 4096, 64, mr->lkey }, rs = { (uintptr_t)buf + 6144, 64, mr->lkey },
			       ws = { (uintptr_t)buf + 4160, 64, mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 603, .sg_list = &rs, .num_sge = 1 }, *rbad;
		struct ibv_send_wr wr[4] = {
			{ .wr_id = 600, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
			  .bind_mw = { mw, ibv_inc_rkey(mw->rkey), { mr, (uintptr_t)buf, 2048, IBV_ACCESS_REMOTE_WRITE } } },
			{ .wr_id = 601, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED, .sg_list = &ss, .num_sge = 1 },
			{ .wr_id = 602, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
			  .bind_mw = { w2, w2 ? ibv_inc_rkey(w2->rkey) : 0, { mr, (uintptr_t)buf + 2048, 2048, IBV_ACCESS_REMOTE_WRITE } } },
			{ .wr_id = 604, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED, .sg_list = &ws, .num_sge = 1 },
		}, *bad;
		uint64_t want[] = { 600, 601, 602, 604 };

		if (!w2)
			FAIL("a second window: %s", strerror(errno));
		wr[3].wr.rdma.remote_addr = (uintptr_t)buf + 2048;
		wr[3].wr.rdma.rkey = wr[2].bind_mw.rkey;
		wr[0].next = &wr[1];
		wr[1].next = &wr[2];
		wr[2].next = &wr[3];
		memset(buf, 0, 4096);
		memset(buf + 4096, 's', 64);
		memset(buf + 4160, 'w', 64);
		if ((err = ibv_post_send(a, wr, &bad)))
			FAIL("post binds between messages: %s", strerror(err));
		usleep(50000);
		if (ibv_post_recv(b, &rw, &rbad))
			FAIL("post the receive");
		for (i = 0; i < 5; i++) {
			struct ibv_wc wc = wait_wc(cq, "binds between messages");

			if (wc.status != IBV_WC_SUCCESS)
				FAIL("binds between messages: wr %llu %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
			if (wc.wr_id == 603)
				continue;
			if (wc.wr_id != want[0])
				FAIL("binds between messages: wr %llu completed, want %llu", (unsigned long long)wc.wr_id,
				     (unsigned long long)want[0]);
			memmove(want, want + 1, sizeof(want) - sizeof(want[0]));
		}
		if (memcmp(buf + 6144, buf + 4096, 64) || memcmp(buf + 2048, buf + 4160, 64))
			FAIL("binds between messages: the send's or the write's data differs");
	}
	puts("ok binds-between-messages");

	/* On UC, a request that fails right after a bind still completes
	 * (in error, the QP in SQE), once the bind has. */
	{
		struct ibv_qp_init_attr ua = ia;
		struct ibv_qp *u, *v;
		struct ibv_qp_attr qa = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
		struct ibv_qp_init_attr qi;
		struct ibv_send_wr wr[2] = {
			{ .wr_id = 700, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
			  .bind_mw = { mw, ibv_inc_rkey(mw->rkey), { mr, (uintptr_t)buf, 4096, IBV_ACCESS_REMOTE_WRITE } } },
			{ .wr_id = 701, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = 0x12345607 },
		}, *bad;
		struct ibv_wc wc;

		ua.qp_type = IBV_QPT_UC;
		if (!(u = ibv_create_qp(pd, &ua)) || !(v = ibv_create_qp(pd, &ua)))
			FAIL("UC QPs: %s", strerror(errno));
		for (i = 0; i < 2; i++) {
			struct ibv_qp *q = i ? v : u;

			qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
			if (ibv_modify_qp(q, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
				FAIL("uc: to INIT");
			qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
				.dest_qp_num = (i ? u : v)->qp_num, .ah_attr = { .dlid = lid, .port_num = 1 } };
			if (ibv_modify_qp(q, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN))
				FAIL("uc: to RTR");
			qa = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS };
			if (ibv_modify_qp(q, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN))
				FAIL("uc: to RTS");
		}
		wr[0].next = &wr[1];
		if ((err = ibv_post_send(u, wr, &bad)))
			FAIL("uc: post a bind and a bad invalidate: %s", strerror(err));
		wc = wait_wc(cq, "uc bind");
		if (wc.wr_id != 700 || wc.status != IBV_WC_SUCCESS)
			FAIL("uc bind: wr %llu %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		wc = wait_wc(cq, "uc bad invalidate after a bind");
		if (wc.wr_id != 701 || wc.status != IBV_WC_MW_BIND_ERR)
			FAIL("uc bad invalidate after a bind: wr %llu %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
		if (ibv_query_qp(u, &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_SQE)
			FAIL("uc bad invalidate after a bind: QP in state %d, want SQE", qa.qp_state);
	}
	puts("ok uc-bind-then-error");
	return 0;
}
