/*
 * xrcpair: checks, on one mock HCA, what an HCA does for XRC: domains
 * opened as the kernel opens them, XRC SRQs, and initiator (XRC_SEND) and
 * target (XRC_RECV) QPs connected through the fabric. Built and run by
 * ibshim/datapath_test.go inside `nvmock exec`; prints "ok <check>" per
 * check and exits non-zero at the first that fails.
 *
 * Usage: xrcpair DEVICE DOMAIN_FILE
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

#define LEN (70 * 1024 + 3) /* several packets */

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

struct srq {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	uint32_t num;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static struct ibv_xrcd *open_domain(int fd, int oflags, int *err)
{
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd, .oflags = oflags };
	struct ibv_xrcd *x;

	errno = 0;
	x = ibv_open_xrcd(ctx, &a);
	*err = x ? 0 : errno;
	return x;
}

static void make_srq(struct srq *s, struct ibv_xrcd *x, struct ibv_pd *pd)
{
	struct ibv_srq_init_attr_ex a = { .attr = { .max_wr = 8, .max_sge = 2 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC, .xrcd = x, .pd = pd };
	int err;

	s->pd = pd;
	if (!(s->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)))
		FAIL("ibv_create_cq: %s", strerror(errno));
	a.cq = s->cq;
	if (!(s->srq = ibv_create_srq_ex(ctx, &a)))
		FAIL("ibv_create_srq_ex (XRC): %s", strerror(errno));
	if ((err = ibv_get_srq_num(s->srq, &s->num)))
		FAIL("ibv_get_srq_num: %s", strerror(err));
	s->buf = calloc(1, LEN);
	s->mr = ibv_reg_mr(pd, s->buf, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						 IBV_ACCESS_REMOTE_ATOMIC);
	if (!s->buf || !s->mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
}

/* A receive of the whole buffer, in two SGEs: the message crosses from
 * one to the other. */
static void srq_recv(struct srq *s, uint64_t id)
{
	struct ibv_sge sg[2] = { { (uintptr_t)s->buf, LEN / 3, s->mr->lkey },
				 { (uintptr_t)s->buf + LEN / 3, LEN - LEN / 3, s->mr->lkey } };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = sg, .num_sge = 2 }, *bad;
	int err;

	if ((err = ibv_post_srq_recv(s->srq, &wr, &bad)))
		FAIL("ibv_post_srq_recv: %s", strerror(err));
}

static int modify(struct ibv_qp *qp, enum ibv_qp_state st, uint32_t dqpn, int mask)
{
	struct ibv_qp_attr a = { .qp_state = st, .port_num = 1, .path_mtu = IBV_MTU_4096, .dest_qp_num = dqpn,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
		.max_dest_rd_atomic = 16, .max_rd_atomic = 16, .min_rnr_timer = 1, .timeout = 14, .retry_cnt = 7,
		.rnr_retry = 7, .ah_attr = { .dlid = lid, .port_num = 1 } };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | mask);
}

#define TO_INIT (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define INI_RTR (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define TGT_RTR (INI_RTR | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define INI_RTS (IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)
#define TGT_RTS (IBV_QP_SQ_PSN | IBV_QP_TIMEOUT)

static void must(int err, const char *what)
{
	if (err)
		FAIL("%s: %s", what, strerror(err));
}

/* An initiator (with its CQ) connected to a target of the domain. */
static void xrc_pair(struct ibv_pd *pd, struct ibv_xrcd *x, struct ibv_qp **ini, struct ibv_cq **cq, struct ibv_qp **tgt)
{
	struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_XRC_SEND, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
		.cap = { .max_send_wr = 16, .max_send_sge = 1 } };
	/* mlx5 takes a PD beside a target's domain, and ignores it and
	 * the CQ, which stay the program's. */
	struct ibv_qp_init_attr_ex ta = { .qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD,
		.xrcd = x, .pd = pd };

	if (!(*cq = ibv_create_cq(ctx, 16, NULL, NULL, 0)))
		FAIL("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ta.send_cq = *cq;
	if (!(*ini = ibv_create_qp_ex(ctx, &ia)))
		FAIL("create XRC_SEND: %s", strerror(errno));
	if (!(*tgt = ibv_create_qp_ex(ctx, &ta)))
		FAIL("create XRC_RECV: %s", strerror(errno));
	if (ta.send_cq != *cq || ta.xrcd != x)
		FAIL("creating a target changed the program's attributes");
	must(modify(*ini, IBV_QPS_INIT, 0, TO_INIT), "initiator to INIT");
	must(modify(*tgt, IBV_QPS_INIT, 0, TO_INIT), "target to INIT");
	/* The attributes the other types ignore are dropped, as uverbs drops
	 * them (perftest sets them), but what they need is needed. */
	if (modify(*tgt, IBV_QPS_RTR, (*ini)->qp_num, INI_RTR) != EINVAL)
		FAIL("a target went to RTR without MIN_RNR_TIMER and MAX_DEST_RD_ATOMIC");
	must(modify(*tgt, IBV_QPS_RTR, (*ini)->qp_num, TGT_RTR), "target to RTR");
	must(modify(*tgt, IBV_QPS_RTS, 0, TGT_RTS | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY), "target to RTS");
	must(modify(*ini, IBV_QPS_RTR, (*tgt)->qp_num, TGT_RTR), "initiator to RTR");
	must(modify(*ini, IBV_QPS_RTS, 0, INI_RTS), "initiator to RTS");
}

static void unpair(struct ibv_qp *ini, struct ibv_cq *cq, struct ibv_qp *tgt)
{
	must(ibv_destroy_qp(ini), "destroying an initiator");
	must(ibv_destroy_qp(tgt), "destroying a target");
	must(ibv_destroy_cq(cq), "destroying an initiator's CQ");
}

static void nothing(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;

	if (ibv_poll_cq(cq, 1, &wc) != 0)
		FAIL("%s: a completion (wr_id %llu, %s) where none belongs", what, (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status));
}

static void expect(struct ibv_wc wc, uint64_t id, enum ibv_wc_status st, const char *what)
{
	if (wc.wr_id != id || wc.status != st)
		FAIL("%s: completion wr_id %llu %s, want %llu %s", what, (unsigned long long)wc.wr_id,
		     ibv_wc_status_str(wc.status), (unsigned long long)id, ibv_wc_status_str(st));
}

static void post(struct ibv_qp *qp, uint64_t id, enum ibv_wr_opcode op, struct ibv_mr *mr, uint32_t len, uint32_t srqn,
		 uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sg = { (uintptr_t)mr->addr, len, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED }, *bad;

	wr.qp_type.xrc.remote_srqn = srqn;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	must(ibv_post_send(qp, &wr, &bad), "ibv_post_send");
}

static void domains(const char *file)
{
	struct ibv_xrcd_init_attr no_flags = { .comp_mask = IBV_XRCD_INIT_ATTR_FD, .fd = -1 };
	struct ibv_xrcd *a, *b, *c;
	int fd, err;

	if (!(a = open_domain(-1, 0, &err)))
		FAIL("a domain of its own (fd -1): %s", strerror(err));
	unlink(file);
	if ((fd = open(file, O_RDONLY | O_CREAT, 0600)) < 0)
		FAIL("%s: %s", file, strerror(errno));
	if (open_domain(fd, 0, &err) || err != EAGAIN)
		FAIL("a file's domain that does not exist, without O_CREAT: %s, want EAGAIN", strerror(err));
	if (!(b = open_domain(fd, O_CREAT, &err)))
		FAIL("a file's domain with O_CREAT: %s", strerror(err));
	if (open_domain(fd, O_CREAT | O_EXCL, &err) || err != EINVAL)
		FAIL("O_EXCL on a domain that exists: %s, want EINVAL", strerror(err));
	if (!(c = open_domain(fd, 0, &err)))
		FAIL("a file's domain that exists, without O_CREAT: %s", strerror(err));
	if (open_domain(987654, O_CREAT, &err) || err != EBADF)
		FAIL("a domain of a closed fd: %s, want EBADF", strerror(err));
	errno = 0;
	if (ibv_open_xrcd(ctx, &no_flags) || errno != EINVAL)
		FAIL("a domain without OFLAGS in comp_mask: %s, want EINVAL", strerror(errno));
	must(ibv_close_xrcd(c), "closing a second handle");
	must(ibv_close_xrcd(b), "closing the file's domain");
	/* Closed everywhere: gone, so O_CREAT is needed again. */
	if (open_domain(fd, 0, &err) || err != EAGAIN)
		FAIL("a closed file domain, without O_CREAT: %s, want EAGAIN", strerror(err));
	must(ibv_close_xrcd(a), "closing a domain of its own");
	close(fd);
	unlink(file);
	printf("ok domains\n");
}

int main(int argc, char **argv)
{
	struct ibv_xrcd *x, *other;
	struct ibv_pd *pd, *pd2;
	struct srq s1, s2, s3, sx;
	struct ibv_qp *ini, *tgt;
	struct ibv_cq *icq;
	struct ibv_mr *src;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_recv_wr rwr = { .wr_id = 1 }, *bad;
	struct ibv_send_wr swr = { .wr_id = 1, .opcode = IBV_WR_SEND }, *sbad;
	struct ibv_wc wc;
	uint8_t *data;
	int i, err;

	if (argc != 3)
		FAIL("usage: xrcpair DEVICE DOMAIN_FILE");
	open_device(argv[1]);
	domains(argv[2]);

	/* XRC SRQs: a domain and a CQ, with numbers of their own. */
	if (!(pd = ibv_alloc_pd(ctx)) || !(pd2 = ibv_alloc_pd(ctx)))
		FAIL("ibv_alloc_pd");
	if (!(x = open_domain(-1, 0, &err)) || !(other = open_domain(-1, 0, &err)))
		FAIL("ibv_open_xrcd: %s", strerror(err));
	{
		struct ibv_srq_init_attr_ex a = { .attr = { .max_wr = 8, .max_sge = 1 },
			.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_PD,
			.srq_type = IBV_SRQT_XRC, .xrcd = x, .pd = pd };

		errno = 0;
		if (ibv_create_srq_ex(ctx, &a) || errno != EINVAL)
			FAIL("an XRC SRQ without a CQ: %s, want EINVAL", strerror(errno));
	}
	make_srq(&s1, x, pd);
	make_srq(&s2, x, pd2);
	make_srq(&s3, x, pd);
	make_srq(&sx, other, pd);
	if (!s1.num || s1.num == s2.num || s2.num == s3.num || s1.num == sx.num)
		FAIL("SRQ numbers %#x %#x %#x %#x, want distinct", s1.num, s2.num, s3.num, sx.num);
	if (ibv_close_xrcd(x) != EBUSY)
		FAIL("closing a domain with SRQs did not answer EBUSY");
	if (ibv_destroy_cq(s1.cq) != EBUSY)
		FAIL("destroying an XRC SRQ's CQ did not answer EBUSY");
	{
		struct ibv_qp_init_attr ra = { .qp_type = IBV_QPT_RC, .send_cq = s1.cq, .recv_cq = s1.cq, .srq = s1.srq,
			.cap = { .max_send_wr = 1, .max_send_sge = 1 } };

		errno = 0;
		if (ibv_create_qp(pd, &ra) || errno != EINVAL)
			FAIL("an RC QP on an XRC SRQ: %s, want EINVAL", strerror(errno));
	}
	printf("ok srqs\n");

	/* A send through a target lands in the SRQ it names, completes into
	 * that SRQ's CQ under the target's QPN, and not elsewhere. */
	xrc_pair(pd, x, &ini, &icq, &tgt);
	if (!(data = calloc(1, LEN)) || !(src = ibv_reg_mr(pd, data, LEN, IBV_ACCESS_LOCAL_WRITE)))
		FAIL("source buffer");
	for (i = 0; i < LEN; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	srq_recv(&s1, 11);
	srq_recv(&s3, 33);
	post(ini, 1, IBV_WR_SEND, src, LEN, s3.num, 0, 0);
	expect(wait_wc(icq, "send to s3"), 1, IBV_WC_SUCCESS, "send to s3");
	wc = wait_wc(s3.cq, "s3's receive");
	expect(wc, 33, IBV_WC_SUCCESS, "s3's receive");
	if (wc.qp_num != tgt->qp_num || wc.byte_len != LEN || wc.opcode != IBV_WC_RECV || memcmp(s3.buf, data, LEN))
		FAIL("s3's receive: qp_num %#x byte_len %u opcode %d (data %s), want %#x %u RECV", wc.qp_num, wc.byte_len,
		     wc.opcode, memcmp(s3.buf, data, LEN) ? "differs" : "same", tgt->qp_num, LEN);
	nothing(s1.cq, "s1, not named");
	post(ini, 2, IBV_WR_SEND, src, 100, s1.num, 0, 0);
	expect(wait_wc(icq, "send to s1"), 2, IBV_WC_SUCCESS, "send to s1");
	expect(wait_wc(s1.cq, "s1's receive"), 11, IBV_WC_SUCCESS, "s1's receive");
	printf("ok send\n");

	/* No receive in the SRQ: RNR, until one is posted. */
	post(ini, 3, IBV_WR_SEND, src, 64, s1.num, 0, 0);
	usleep(200000);
	nothing(icq, "a send with no receive");
	srq_recv(&s1, 12);
	expect(wait_wc(icq, "send after RNR"), 3, IBV_WC_SUCCESS, "send after RNR");
	expect(wait_wc(s1.cq, "s1's late receive"), 12, IBV_WC_SUCCESS, "s1's late receive");
	printf("ok rnr\n");

	/* RDMA goes by the named SRQ's PD: s2's is pd2, s1's pd. */
	post(ini, 4, IBV_WR_RDMA_WRITE, src, LEN, s1.num, (uintptr_t)s1.buf, s1.mr->rkey);
	expect(wait_wc(icq, "write"), 4, IBV_WC_SUCCESS, "write");
	memset(data, 0, 64);
	post(ini, 5, IBV_WR_RDMA_READ, src, 64, s1.num, (uintptr_t)s1.buf, s1.mr->rkey);
	expect(wait_wc(icq, "read"), 5, IBV_WC_SUCCESS, "read");
	if (memcmp(data, s1.buf, 64) || s1.buf[64] != (uint8_t)(64 * 7 + 3))
		FAIL("the write or read moved the wrong bytes");
	memset(s1.buf, 0, 8);
	post(ini, 6, IBV_WR_ATOMIC_FETCH_AND_ADD, src, 8, s1.num, (uintptr_t)s1.buf, s1.mr->rkey);
	expect(wait_wc(icq, "fetch-add"), 6, IBV_WC_SUCCESS, "fetch-add");
	if (*(uint64_t *)s1.buf != 5)
		FAIL("fetch-add left %llu, want 5", (unsigned long long)*(uint64_t *)s1.buf);
	/* A write with immediate takes a receive of the SRQ it names. */
	srq_recv(&s1, 13);
	post(ini, 9, IBV_WR_RDMA_WRITE_WITH_IMM, src, 64, s1.num, (uintptr_t)s1.buf, s1.mr->rkey);
	expect(wait_wc(icq, "write with immediate"), 9, IBV_WC_SUCCESS, "write with immediate");
	wc = wait_wc(s1.cq, "s1's receive for the immediate");
	expect(wc, 13, IBV_WC_SUCCESS, "s1's receive for the immediate");
	if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || wc.qp_num != tgt->qp_num || !(wc.wc_flags & IBV_WC_WITH_IMM))
		FAIL("the immediate's completion: opcode %d qp_num %#x flags %#x", wc.opcode, wc.qp_num, wc.wc_flags);
	post(ini, 7, IBV_WR_RDMA_WRITE, src, 64, s2.num, (uintptr_t)s1.buf, s1.mr->rkey);
	expect(wait_wc(icq, "write with another PD's key"), 7, IBV_WC_REM_ACCESS_ERR, "write with another PD's key");
	printf("ok rdma\n");

	/* An SRQ of another domain, or one destroyed: the target refuses
	 * the request. */
	unpair(ini, icq, tgt);
	xrc_pair(pd, x, &ini, &icq, &tgt);
	srq_recv(&sx, 44);
	post(ini, 8, IBV_WR_SEND, src, 64, sx.num, 0, 0);
	expect(wait_wc(icq, "send to another domain's SRQ"), 8, IBV_WC_REM_INV_REQ_ERR, "send to another domain's SRQ");
	nothing(sx.cq, "another domain's SRQ");
	unpair(ini, icq, tgt);
	xrc_pair(pd, x, &ini, &icq, &tgt);
	{
		uint32_t gone = s3.num;

		must(ibv_destroy_srq(s3.srq), "ibv_destroy_srq");
		must(ibv_destroy_cq(s3.cq), "destroying a CQ no SRQ uses");
		post(ini, 10, IBV_WR_SEND, src, 64, gone, 0, 0);
		expect(wait_wc(icq, "send to a destroyed SRQ"), 10, IBV_WC_REM_INV_REQ_ERR, "send to a destroyed SRQ");
	}
	printf("ok domain-violation\n");

	/* Neither type takes receives of its own; a target sends nothing;
	 * a target has no queues to tell of. */
	unpair(ini, icq, tgt);
	xrc_pair(pd, x, &ini, &icq, &tgt);
	/* mlx5: neither has a receive queue, and a queue of no entries is
	 * full. (A send on a target would reach its missing CQ there.) */
	if (ibv_post_recv(ini, &rwr, &bad) != ENOMEM || ibv_post_recv(tgt, &rwr, &bad) != ENOMEM)
		FAIL("ibv_post_recv on an XRC QP did not answer ENOMEM");
	if (ibv_post_send(tgt, &swr, &sbad) != EINVAL)
		FAIL("ibv_post_send on a target did not answer EINVAL");
	must(ibv_query_qp(tgt, &qa, IBV_QP_CAP, &qi), "ibv_query_qp");
	if (qa.cap.max_send_wr || qa.cap.max_recv_wr || qi.qp_type != IBV_QPT_XRC_RECV || qa.qp_state != IBV_QPS_RTS)
		FAIL("a target's query: send_wr %u recv_wr %u type %d state %d", qa.cap.max_send_wr, qa.cap.max_recv_wr,
		     qi.qp_type, qa.qp_state);
	{
		/* Two initiators connected to each other: one only sends,
		 * so the other's request is invalid. */
		struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_XRC_SEND, .comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
			.send_cq = icq, .cap = { .max_send_wr = 4, .max_send_sge = 1 } };
		struct ibv_qp *peer = ibv_create_qp_ex(ctx, &ia);

		if (!peer)
			FAIL("create XRC_SEND: %s", strerror(errno));
		must(modify(peer, IBV_QPS_INIT, 0, TO_INIT), "to INIT");
		must(modify(peer, IBV_QPS_RTR, peer->qp_num, INI_RTR), "to RTR");
		must(modify(peer, IBV_QPS_RTS, 0, INI_RTS), "to RTS");
		post(peer, 14, IBV_WR_SEND, src, 64, s1.num, 0, 0);
		expect(wait_wc(icq, "a send to an initiator"), 14, IBV_WC_REM_INV_REQ_ERR, "a send to an initiator");
		must(ibv_destroy_qp(peer), "destroying an initiator");
	}
	printf("ok refusals\n");

	/* Handles close once nothing made through them lives: a second
	 * handle with only a target. */
	unpair(ini, icq, tgt);
	{
		int fd = open(argv[2], O_RDONLY | O_CREAT, 0600);
		struct ibv_xrcd *y = open_domain(fd, O_CREAT, &err), *y2 = open_domain(fd, 0, &err);

		if (fd < 0 || !y || !y2)
			FAIL("a file's domain, twice: %s", strerror(err));
		xrc_pair(pd, y2, &ini, &icq, &tgt);
		if (ibv_close_xrcd(y2) != EBUSY)
			FAIL("closing a handle with a target did not answer EBUSY");
		unpair(ini, icq, tgt);
		must(ibv_close_xrcd(y2), "closing a handle whose target is gone");
		must(ibv_close_xrcd(y), "closing the file's domain");
		close(fd);
		unlink(argv[2]);
	}
	must(ibv_destroy_srq(s1.srq), "ibv_destroy_srq");
	must(ibv_destroy_srq(s2.srq), "ibv_destroy_srq");
	must(ibv_destroy_cq(s1.cq), "destroying a CQ no SRQ uses");
	must(ibv_close_xrcd(x), "closing an unused domain");
	must(ibv_destroy_srq(sx.srq), "ibv_destroy_srq");
	must(ibv_close_xrcd(other), "closing an unused domain");
	printf("ok close\n");
	return 0;
}
