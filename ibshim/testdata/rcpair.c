/*
 * rcpair: a verbs program that checks, on one mock HCA, what an HCA does
 * for RC queue pairs connected through the fabric (and UC and UD ones):
 * data arrives intact, and the errors come as real HCAs report them. Built and run by
 * ibshim/datapath_test.go inside `nvmock exec`; prints "ok <check>" per check and
 * exits non-zero at the first that fails.
 *
 * Usage: rcpair DEVICE UNREACHABLE_LID [event-after-destroy|event-then-destroy]
 *
 * event-after-destroy runs that check alone (the test runs it under
 * valgrind, which sees what a freed QP would do); event-then-destroy
 * acknowledges the event first. Both close the device at the end, where
 * NVMOCK_TRACE says what the provider kept.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BIG (100 * 1024 + 7) /* several packets, not a multiple of any */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static uint16_t lid;

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
};

static size_t buf_size = BIG;

static enum ibv_qp_type qp_type = IBV_QPT_RC; /* what make_end makes */

static void make_end_on(struct end *e, int access, struct ibv_comp_channel *ch)
{
	struct ibv_qp_init_attr ia = { .qp_type = qp_type, .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2 } };

	e->cq = ibv_create_cq(ctx, 64, e, ch, 0);
	if (!e->cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = e->cq;
	e->qp = ibv_create_qp(pd, &ia);
	if (!e->qp)
		FAIL("ibv_create_qp: %s", strerror(errno));
	e->buf = calloc(1, buf_size);
	e->mr = ibv_reg_mr(pd, e->buf, buf_size, access);
	if (!e->mr)
		FAIL("ibv_reg_mr: %s", strerror(errno));
}

static void make_end(struct end *e, int access) { make_end_on(e, access, NULL); }

static void connect_to(struct end *e, uint16_t dlid, uint32_t dqpn, uint8_t timeout, uint8_t retry, uint8_t rnr_retry)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	int err;

	if ((err = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		FAIL("to INIT: %s", strerror(err));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dqpn,
		.max_dest_rd_atomic = 16, .min_rnr_timer = 1, .ah_attr = { .dlid = dlid, .port_num = 1 } };
	if ((err = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		FAIL("to RTR: %s", strerror(err));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = timeout, .retry_cnt = retry,
		.rnr_retry = rnr_retry, .max_rd_atomic = 16 };
	if ((err = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		FAIL("to RTS: %s", strerror(err));
}

static void pair_with(struct end *a, struct end *b, uint8_t timeout, uint8_t retry, uint8_t rnr_retry)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

	make_end(a, acc);
	make_end(b, acc);
	connect_to(a, lid, b->qp->qp_num, timeout, retry, rnr_retry);
	connect_to(b, lid, a->qp->qp_num, timeout, retry, rnr_retry);
}

static void pair(struct end *a, struct end *b, uint8_t rnr_retry) { pair_with(a, b, 14, 7, rnr_retry); }

static struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct timespec t0, t;
	struct ibv_wc wc;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			FAIL("%s: ibv_poll_cq: %d", what, n);
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			FAIL("%s: no completion in 10 s", what);
		usleep(100);
	}
}

static void expect(struct ibv_wc wc, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op, const char *what)
{
	if (wc.wr_id != wr_id || wc.status != st || (st == IBV_WC_SUCCESS && wc.opcode != op))
		FAIL("%s: completion wr_id %llu status %s opcode %d, want wr_id %llu status %s opcode %d", what,
		     (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode,
		     (unsigned long long)wr_id, ibv_wc_status_str(st), op);
}

static void post_recv(struct end *e, uint64_t id, uint32_t len)
{
	struct ibv_sge s = { (uintptr_t)e->buf, len, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(e->qp, &wr, &bad);

	if (err)
		FAIL("ibv_post_recv: %s", strerror(err));
}

static void post(struct end *e, uint64_t id, enum ibv_wr_opcode op, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge s[2] = { { (uintptr_t)e->buf, len / 2, e->mr->lkey }, { (uintptr_t)e->buf + len / 2, len - len / 2, e->mr->lkey } };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = s, .num_sge = 2, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htobe32(0x1234) }, *bad;
	int err;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if ((err = ibv_post_send(e->qp, &wr, &bad)))
		FAIL("ibv_post_send: %s", strerror(err));
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed);
}

/* ready says whether the channel has an event within ms. */
static int ready(struct ibv_comp_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int n = poll(&p, 1, ms);

	if (n < 0)
		FAIL("poll on the channel: %s", strerror(errno));
	return n;
}

static void send_to(struct end *a, uint64_t id, int flags)
{
	struct ibv_sge s = { (uintptr_t)a->buf, 64, a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | flags }, *bad;

	if (ibv_post_send(a->qp, &wr, &bad))
		FAIL("events: ibv_post_send");
	expect(wait_wc(a->cq, "events: send"), id, IBV_WC_SUCCESS, IBV_WC_SEND, "events: send");
}

static void get_event(struct ibv_comp_channel *ch, struct end *b, const char *what)
{
	struct ibv_cq *cq;
	void *cq_ctx;

	if (!ready(ch, 5000))
		FAIL("%s: no event in 5 s", what);
	if (ibv_get_cq_event(ch, &cq, &cq_ctx))
		FAIL("%s: ibv_get_cq_event", what);
	if (cq != b->cq || cq_ctx != b)
		FAIL("%s: the event names CQ %p (context %p), want %p (%p)", what, (void *)cq, cq_ctx, (void *)b->cq, (void *)b);
	ibv_ack_cq_events(cq, 1);
}

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		FAIL("opendir /proc/self/fd: %s", strerror(errno));
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* Completion channels: an armed CQ raises one event, for solicited
 * messages only if asked, and none once taken; a destroyed CQ's unread
 * event is gone with it. */
static void events(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	int fds = open_fds(), fd, i;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx), fake;
	struct end a, b, c2, d2;
	char c[4];

	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	if (ch->fd <= 2)
		FAIL("the channel is fd %d", ch->fd);
	make_end_on(&a, acc, NULL);
	make_end_on(&b, acc, ch);
	connect_to(&a, lid, b.qp->qp_num, 14, 7, 7);
	connect_to(&b, lid, a.qp->qp_num, 14, 7, 7);
	for (i = 0; i < 8; i++)
		post_recv(&b, 50 + i, 64);

	if (ibv_req_notify_cq(b.cq, 0))
		FAIL("ibv_req_notify_cq");
	if (ready(ch, 100))
		FAIL("events: an event before any completion");
	send_to(&a, 60, 0);
	get_event(ch, &b, "events: next completion");
	expect(wait_wc(b.cq, "events: receive"), 50, IBV_WC_SUCCESS, IBV_WC_RECV, "events: receive");
	send_to(&a, 61, 0);
	if (ready(ch, 300))
		FAIL("events: an event without arming");
	expect(wait_wc(b.cq, "events: receive"), 51, IBV_WC_SUCCESS, IBV_WC_RECV, "events: receive");

	if (ibv_req_notify_cq(b.cq, 1))
		FAIL("ibv_req_notify_cq(solicited)");
	send_to(&a, 62, 0);
	if (ready(ch, 300))
		FAIL("events: an unsolicited message raised a solicited-only event");
	send_to(&a, 63, IBV_SEND_SOLICITED);
	get_event(ch, &b, "events: solicited");
	/* Two receives wait unpolled: arming raises the event at once. A
	 * read shorter than it fails and leaves it there. */
	if (ibv_req_notify_cq(b.cq, 0))
		FAIL("ibv_req_notify_cq");
	if (!ready(ch, 5000))
		FAIL("events: arming a CQ with unpolled completions raised no event");
	if (read(ch->fd, c, sizeof(c)) != -1 || errno != EINVAL)
		FAIL("events: a 4-byte read of the channel did not fail with EINVAL");
	get_event(ch, &b, "events: arming a CQ with unpolled completions");
	for (i = 52; i < 54; i++)
		expect(wait_wc(b.cq, "events: receive"), i, IBV_WC_SUCCESS, IBV_WC_RECV, "events: receive");

	if (write(ch->fd, c, sizeof(c)) != -1 || errno != EBADF)
		FAIL("events: a write to the channel did not fail with EBADF");
	fake = (struct ibv_comp_channel){ .context = ctx, .fd = 1 };
	if (ibv_create_cq(ctx, 4, NULL, &fake, 0) || errno != EINVAL)
		FAIL("events: a CQ on fd 1 as its channel was made (or not with EINVAL)");

	/* An event nobody read goes with its CQ; another CQ's on the same
	 * channel stays. */
	make_end_on(&c2, acc, NULL);
	make_end_on(&d2, acc, ch);
	connect_to(&c2, lid, d2.qp->qp_num, 14, 7, 7);
	connect_to(&d2, lid, c2.qp->qp_num, 14, 7, 7);
	post_recv(&d2, 70, 64);
	if (ibv_req_notify_cq(b.cq, 0) || ibv_req_notify_cq(d2.cq, 0))
		FAIL("ibv_req_notify_cq");
	send_to(&a, 64, 0);
	if (!ready(ch, 5000))
		FAIL("events: no event in 5 s");
	send_to(&c2, 65, 0); /* answered once d2's event is sent */
	if (ibv_destroy_comp_channel(ch) != EBUSY)
		FAIL("events: a channel with a CQ on it was destroyed");
	if (ibv_destroy_qp(b.qp) || ibv_destroy_cq(b.cq))
		FAIL("events: destroying the QP and CQ");
	get_event(ch, &d2, "events: the other CQ's event");
	if (ready(ch, 0))
		FAIL("events: the destroyed CQ's event is still in the channel");
	if (ibv_destroy_qp(d2.qp) || ibv_destroy_cq(d2.cq))
		FAIL("events: destroying the other QP and CQ");
	fd = ch->fd;
	if (ibv_destroy_comp_channel(ch))
		FAIL("events: ibv_destroy_comp_channel");
	if (fcntl(fd, F_GETFD) != -1)
		FAIL("events: the channel's fd is still open");
	if (open_fds() != fds)
		FAIL("events: %d fds open after the channel went, %d before it", open_fds(), fds);
}

/* next_async is the context's next async event, within 5 s. */
static struct ibv_async_event next_async(const char *what)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	if (poll(&p, 1, 5000) != 1)
		FAIL("%s: no async event in 5 s", what);
	if (ibv_get_async_event(ctx, &ev))
		FAIL("%s: ibv_get_async_event", what);
	ibv_ack_async_event(&ev);
	return ev;
}

/* no_async fails if an async event comes within 200 ms. */
static void no_async(const char *what)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	if (poll(&p, 1, 200) == 0)
		return;
	if (ibv_get_async_event(ctx, &ev))
		FAIL("%s: ibv_get_async_event", what);
	FAIL("%s: unexpected async event %s", what, ibv_event_type_str(ev.event_type));
}

/* qp_event fails unless the next async event is type, for qp, and qp
 * is then in state. */
static void qp_event(enum ibv_event_type type, struct ibv_qp *qp, enum ibv_qp_state state, const char *what)
{
	struct ibv_async_event ev = next_async(what);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;

	if (ev.event_type != type || ev.element.qp != qp)
		FAIL("%s: async event %s, want %s for the QP", what, ibv_event_type_str(ev.event_type), ibv_event_type_str(type));
	if (ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) || qa.qp_state != state)
		FAIL("%s: the QP is in state %d, want %d", what, qa.qp_state, state);
}

/* Shared receive queues: two QPs take their receives from one, in turn;
 * one QP's error leaves the SRQ's receives alone; and what the mock does
 * not do (limits, resizing) or the verbs forbid fails. */
static void srq_check(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_send_sge = 1 } };
	struct ibv_srq_attr attr = { .srq_limit = 2 };
	struct ibv_recv_wr rw = { .num_sge = 1 }, *rbad;
	struct ibv_qp_attr err_attr = { .qp_state = IBV_QPS_ERR };
	struct end s[2], r[2];
	struct ibv_srq *srq;
	struct ibv_sge sge;
	struct ibv_wc wc;
	uint8_t *rbuf = calloc(1, 4096);
	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, 4096, IBV_ACCESS_LOCAL_WRITE);
	int i;

	sa.attr.srq_limit = 5; /* ignored at creation, as ibv_create_srq(3) says */
	if (!(srq = ibv_create_srq(pd, &sa)))
		FAIL("ibv_create_srq: %s", strerror(errno));
	attr.max_wr = 1;
	if (ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR) != EINVAL)
		FAIL("srq: resizing did not fail with EINVAL");
	for (i = 0; i < 2; i++) {
		make_end_on(&s[i], acc, NULL);
		r[i].buf = rbuf;
		r[i].mr = rmr;
		r[i].cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		ia.send_cq = ia.recv_cq = r[i].cq;
		ia.srq = srq;
		if (!r[i].cq || !(r[i].qp = ibv_create_qp(pd, &ia)))
			FAIL("srq: a QP on the SRQ: %s", strerror(errno));
		{
			struct ibv_qp_attr qa;
			struct ibv_qp_init_attr qi;

			if (r[i].qp->srq != srq || ibv_query_qp(r[i].qp, &qa, IBV_QP_CAP, &qi) || qi.srq != srq ||
			    qa.cap.max_recv_wr != 0 || ia.cap.max_recv_wr != 0)
				FAIL("srq: the QP does not say it is on the SRQ with no receive queue of its own");
		}
		connect_to(&s[i], lid, r[i].qp->qp_num, 14, 7, 7);
		connect_to(&r[i], lid, s[i].qp->qp_num, 14, 7, 7);
	}
	rw.sg_list = &sge;
	sge = (struct ibv_sge){ (uintptr_t)rbuf, 64, rmr->lkey };
	/* mlx5: the QP's receive queue has no entries, so it is full. */
	if (ibv_post_recv(r[0].qp, &rw, &rbad) != ENOMEM)
		FAIL("srq: a receive posted to an SRQ's QP did not fail with ENOMEM");
	for (i = 0; i < 3; i++) {
		rw.wr_id = 80 + i;
		if (ibv_post_srq_recv(srq, &rw, &rbad))
			FAIL("ibv_post_srq_recv");
	}
	/* Armed at 2 with 3 posted: the second receive taken raises it. */
	attr.srq_limit = 2;
	if (ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) || ibv_query_srq(srq, &attr) || attr.srq_limit != 2)
		FAIL("srq: arming the limit at 2 (query says %u)", attr.srq_limit);
	/* Each QP's message takes the SRQ's next receive. */
	send_to(&s[1], 90, 0);
	wc = wait_wc(r[1].cq, "srq: receive on the second QP");
	if (wc.wr_id != 80 || wc.status != IBV_WC_SUCCESS || wc.qp_num != r[1].qp->qp_num)
		FAIL("srq: second QP: wr_id %llu status %s qp %#x", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.qp_num);
	no_async("srq: 2 receives left of a limit of 2");
	send_to(&s[0], 91, 0);
	wc = wait_wc(r[0].cq, "srq: receive on the first QP");
	if (wc.wr_id != 81 || wc.qp_num != r[0].qp->qp_num)
		FAIL("srq: first QP: wr_id %llu qp %#x", (unsigned long long)wc.wr_id, wc.qp_num);
	{
		struct ibv_async_event ev = next_async("srq: limit");

		if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED || ev.element.srq != srq)
			FAIL("srq: async event %s for %p, want IBV_EVENT_SRQ_LIMIT_REACHED for the SRQ",
			     ibv_event_type_str(ev.event_type), (void *)ev.element.srq);
		if (ibv_query_srq(srq, &attr) || attr.srq_limit != 0)
			FAIL("srq: the limit is still armed (%u) after its event", attr.srq_limit);
	}
	/* The first QP's error flushes nothing of the SRQ's. */
	if (ibv_modify_qp(r[0].qp, &err_attr, IBV_QP_STATE))
		FAIL("srq: to ERR");
	qp_event(IBV_EVENT_QP_LAST_WQE_REACHED, r[0].qp, IBV_QPS_ERR, "srq: last WQE");
	usleep(100000);
	if (ibv_poll_cq(r[0].cq, 1, &wc) != 0)
		FAIL("srq: the QP's error flushed receive %llu of the SRQ", (unsigned long long)wc.wr_id);
	send_to(&s[1], 92, 0);
	if (wait_wc(r[1].cq, "srq: the receive left").wr_id != 82)
		FAIL("srq: the second QP did not get the receive left");
	/* Messages of several packets from two QPs, the first pair reset and
	 * connected again: each fills one SRQ receive whole. */
	{
		struct ibv_qp_attr rst = { .qp_state = IBV_QPS_RESET };
		uint8_t *big = calloc(2, BIG);
		struct ibv_mr *bmr = ibv_reg_mr(pd, big, 2 * BIG, IBV_ACCESS_LOCAL_WRITE);

		if (!bmr || ibv_modify_qp(r[0].qp, &rst, IBV_QP_STATE) || ibv_modify_qp(s[0].qp, &rst, IBV_QP_STATE))
			FAIL("srq: resetting the first pair");
		connect_to(&s[0], lid, r[0].qp->qp_num, 14, 7, 7);
		connect_to(&r[0], lid, s[0].qp->qp_num, 14, 7, 7);
		for (i = 0; i < 2; i++) {
			sge = (struct ibv_sge){ (uintptr_t)big + i * BIG, BIG, bmr->lkey };
			rw.wr_id = 85 + i;
			if (ibv_post_srq_recv(srq, &rw, &rbad))
				FAIL("srq: posting a big receive");
		}
		for (i = 0; i < 2; i++) {
			fill(s[i].buf, BIG, 10 + i);
			post(&s[i], 95 + i, IBV_WR_SEND, BIG, 0, 0);
		}
		for (i = 0; i < 2; i++) {
			expect(wait_wc(s[i].cq, "srq: big send"), 95 + i, IBV_WC_SUCCESS, IBV_WC_SEND, "srq: big send");
			wc = wait_wc(r[i].cq, "srq: big receive");
			if (wc.status != IBV_WC_SUCCESS || wc.byte_len != BIG || wc.wr_id < 85 || wc.wr_id > 86 ||
			    memcmp(big + (wc.wr_id - 85) * BIG, s[i].buf, BIG))
				FAIL("srq: QP %d's big message: wr_id %llu status %s, %u bytes, or they differ", i,
				     (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.byte_len);
		}
	}
	if (ibv_destroy_srq(srq) != EBUSY)
		FAIL("srq: an SRQ with QPs on it was destroyed");
	for (i = 0; i < 2; i++)
		if (ibv_destroy_qp(r[i].qp))
			FAIL("srq: ibv_destroy_qp");
	if (ibv_destroy_srq(srq))
		FAIL("ibv_destroy_srq");
}

/* A CQ that overruns raises IBV_EVENT_CQ_ERR (and says so on stderr); the
 * QP whose completion it lost gets IBV_EVENT_QP_FATAL and goes to ERR, and
 * so does another QP completing into it later, though it has room again. */
static void cq_overrun(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_async_event ev;
	struct end x, y;
	int i;

	make_end_on(&x, acc, NULL);
	y.buf = calloc(1, 4096);
	y.mr = ibv_reg_mr(pd, y.buf, 4096, acc);
	y.cq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = y.cq;
	if (!y.mr || !y.cq || !(y.qp = ibv_create_qp(pd, &ia)))
		FAIL("overrun: making the QP: %s", strerror(errno));
	connect_to(&x, lid, y.qp->qp_num, 14, 7, 7);
	connect_to(&y, lid, x.qp->qp_num, 14, 7, 7);
	for (i = 0; i < 3; i++)
		post_recv(&y, 100 + i, 64);
	for (i = 0; i < 3; i++)
		send_to(&x, 110 + i, 0);
	ev = next_async("overrun");
	if (ev.event_type != IBV_EVENT_CQ_ERR || ev.element.cq != y.cq)
		FAIL("overrun: async event %s, want IBV_EVENT_CQ_ERR for the CQ", ibv_event_type_str(ev.event_type));
	qp_event(IBV_EVENT_QP_FATAL, y.qp, IBV_QPS_ERR, "overrun: the QP");
	no_async("overrun: after the QP's event");
	{
		struct ibv_wc wc[4];
		struct end x2, z;

		while (ibv_poll_cq(y.cq, 4, wc) > 0)
			;
		make_end(&x2, acc);
		z.buf = y.buf;
		z.mr = y.mr;
		z.cq = y.cq;
		if (!(z.qp = ibv_create_qp(pd, &ia)))
			FAIL("overrun: a second QP on the CQ: %s", strerror(errno));
		connect_to(&x2, lid, z.qp->qp_num, 14, 7, 7);
		connect_to(&z, lid, x2.qp->qp_num, 14, 7, 7);
		post_recv(&z, 130, 64);
		send_to(&x2, 131, 0);
		qp_event(IBV_EVENT_QP_FATAL, z.qp, IBV_QPS_ERR, "overrun: a second QP on the CQ");
	}
	/* A datagram QP's send error that cannot be reported is fatal too:
	 * ERR, not the SQE a reported one leaves it in. */
	{
		struct ibv_qp_init_attr ua = { .qp_type = IBV_QPT_UD, .send_cq = y.cq, .recv_cq = y.cq,
			.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 } };
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
		struct ibv_ah_attr aa = { .dlid = lid, .port_num = 1 };
		struct ibv_sge bad_sge = { (uintptr_t)y.buf, 64, y.mr->lkey + 0x100 };
		struct ibv_send_wr wr = { .wr_id = 132, .sg_list = &bad_sge, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED }, *bad;
		struct ibv_qp *u = ibv_create_qp(pd, &ua);
		struct ibv_ah *ah = ibv_create_ah(pd, &aa);

		if (!u || !ah || ibv_modify_qp(u, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
			FAIL("overrun: a datagram QP on the CQ");
		at.qp_state = IBV_QPS_RTR;
		if (ibv_modify_qp(u, &at, IBV_QP_STATE))
			FAIL("overrun: datagram QP to RTR");
		at.qp_state = IBV_QPS_RTS;
		if (ibv_modify_qp(u, &at, IBV_QP_STATE | IBV_QP_SQ_PSN))
			FAIL("overrun: datagram QP to RTS");
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = u->qp_num;
		wr.wr.ud.remote_qkey = 0x11111111;
		if (ibv_post_send(u, &wr, &bad))
			FAIL("overrun: datagram with a bad lkey: post");
		qp_event(IBV_EVENT_QP_FATAL, u, IBV_QPS_ERR, "overrun: a datagram QP's lost send error");
	}
}

/* Communication Established: a message to a QP still in RTR is received
 * and raises IBV_EVENT_COMM_EST, once; a QP already in RTS raises none. */
static void comm_est(void)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
	struct end x, y;
	int err;

	pair(&x, &y, 7);
	post_recv(&y, 119, 64);
	send_to(&x, 118, 0);
	expect(wait_wc(y.cq, "comm-est: receive in RTS"), 119, IBV_WC_SUCCESS, IBV_WC_RECV, "comm-est: receive in RTS");
	no_async("comm-est: a QP in RTS receives");

	make_end(&x, acc);
	make_end(&y, acc);
	connect_to(&x, lid, y.qp->qp_num, 14, 7, 7);
	{
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

		if ((err = ibv_modify_qp(y.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
			FAIL("comm-est: to INIT: %s", strerror(err));
		a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = x.qp->qp_num,
			.max_dest_rd_atomic = 1, .min_rnr_timer = 1, .ah_attr = { .dlid = lid, .port_num = 1 } };
		if ((err = ibv_modify_qp(y.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
			FAIL("comm-est: to RTR: %s", strerror(err));
	}
	post_recv(&y, 120, 64);
	send_to(&x, 121, 0);
	expect(wait_wc(y.cq, "comm-est: receive in RTR"), 120, IBV_WC_SUCCESS, IBV_WC_RECV, "comm-est: receive in RTR");
	qp_event(IBV_EVENT_COMM_EST, y.qp, IBV_QPS_RTR, "comm-est");
	post_recv(&y, 122, 64);
	send_to(&x, 123, 0);
	expect(wait_wc(y.cq, "comm-est: second receive"), 122, IBV_WC_SUCCESS, IBV_WC_RECV, "comm-est: second receive");
	no_async("comm-est: a second message in RTR");
	if ((err = ibv_modify_qp(y.qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		FAIL("comm-est: to RTS: %s", strerror(err));
	post_recv(&y, 124, 64);
	send_to(&x, 125, 0);
	expect(wait_wc(y.cq, "comm-est: receive after RTS"), 124, IBV_WC_SUCCESS, IBV_WC_RECV, "comm-est: receive after RTS");
	no_async("comm-est: a message after RTS");
}

/* A program that destroys a QP on an error completion may read the
 * responder's event afterwards: it still names the QP, and acknowledging it
 * (which locks the QP's mutex) touches no freed memory. */
/* The responder's QP gets an async event; the program reads it after
 * destroying the QP (after), or reads and acknowledges it first. */
static void event_and_destroy(bool after)
{
	struct ibv_async_event ev;
	struct pollfd p = { .events = POLLIN };
	struct ibv_qp *gone;
	struct end a, b;

	pair(&a, &b, 7);
	post(&a, 140, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf, b.mr->rkey + 0x100);
	expect(wait_wc(a.cq, "event and destroy"), 140, IBV_WC_REM_ACCESS_ERR, 0, "event and destroy");
	gone = b.qp;
	if (after && ibv_destroy_qp(b.qp))
		FAIL("event after destroy: ibv_destroy_qp");
	p.fd = ctx->async_fd;
	if (poll(&p, 1, 5000) != 1 || ibv_get_async_event(ctx, &ev))
		FAIL("event and destroy: no event");
	if (ev.event_type != IBV_EVENT_QP_ACCESS_ERR || ev.element.qp != gone)
		FAIL("event and destroy: %s, want IBV_EVENT_QP_ACCESS_ERR for the QP", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	if (!after && ibv_destroy_qp(b.qp))
		FAIL("event then destroy: ibv_destroy_qp");
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		FAIL("ibv_query_qp");
	return a.qp_state;
}

/* Nothing completes on cq within 200 ms. */
static void nothing(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;

	usleep(200000);
	if (ibv_poll_cq(cq, 1, &wc) != 0)
		FAIL("%s: a completion came (wr_id %llu, %s)", what, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
}

/* UC: connected, unanswered. What the responder cannot take is dropped
 * without a word; its own errors end it, as on RC. */
static void connect_uc(struct end *e, uint32_t dqpn, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	int err;

	if ((err = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		FAIL("uc: to INIT: %s", strerror(err));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dqpn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1, .ah_attr = { .dlid = lid, .port_num = 1 } };
	/* RC's responder attributes are not UC's (the kernel's state table). */
	if (!ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("uc: to RTR with RC's attributes: accepted");
	if ((err = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)))
		FAIL("uc: to RTR: %s", strerror(err));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14 };
	if (!ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT))
		FAIL("uc: to RTS with a timeout: accepted");
	if ((err = ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)))
		FAIL("uc: to RTS: %s", strerror(err));
}

static void uc_pair(struct end *a, struct end *b)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

	qp_type = IBV_QPT_UC;
	make_end(a, acc);
	make_end(b, acc);
	qp_type = IBV_QPT_RC;
	connect_uc(a, b->qp->qp_num, IBV_ACCESS_REMOTE_WRITE);
	connect_uc(b, a->qp->qp_num, IBV_ACCESS_REMOTE_WRITE);
}

/* Writes a marker from a into b's buffer, away from its start, and waits
 * until it is there: what a sent before has been taken in by then (a
 * QP's packets arrive in order). No receive is needed, so a send that
 * found none before cannot take it. */
static void probe(struct end *a, struct end *b, uint64_t id, const char *what)
{
	struct timespec t0, t;
	struct ibv_wc wc;

	fill(a->buf + 8192, 64, (unsigned)id);
	b->buf[8192] = (uint8_t)~a->buf[8192];
	{
		struct ibv_sge g = { (uintptr_t)a->buf + 8192, 64, a->mr->lkey };
		struct ibv_send_wr wr = { .wr_id = id, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { (uintptr_t)b->buf + 8192, b->mr->rkey } }, *bad;

		if (ibv_post_send(a->qp, &wr, &bad))
			FAIL("%s: probe: post", what);
	}
	do
		wc = wait_wc(a->cq, what);
	while (wc.wr_id != id && wc.status == IBV_WC_SUCCESS);
	expect(wc, id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, what);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (memcmp((const void *)(b->buf + 8192), a->buf + 8192, 64)) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 10)
			FAIL("%s: the probe's write did not arrive in 10 s", what);
		usleep(100);
	}
	usleep(1000); /* the engine finishes the packet it copied */
}

/* The same, by a send into a receive posted now (for a QP that takes no
 * writes): only once no earlier send can be waiting for one. */
static void probe_send(struct end *a, struct end *b, uint64_t id, const char *what)
{
	struct ibv_sge d = { (uintptr_t)b->buf + 8192, 64, b->mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = id, .sg_list = &d, .num_sge = 1 }, *rbad;
	struct ibv_wc wc;

	if (ibv_post_recv(b->qp, &rw, &rbad))
		FAIL("%s: post_recv", what);
	post(a, id, IBV_WR_SEND, 64, 0, 0);
	do
		wc = wait_wc(a->cq, what);
	while (wc.wr_id != id && wc.status == IBV_WC_SUCCESS);
	expect(wc, id, IBV_WC_SUCCESS, IBV_WC_SEND, what);
	expect(wait_wc(b->cq, what), id, IBV_WC_SUCCESS, IBV_WC_RECV, what);
}

/* A write with immediate of one packet (post's two pieces make two). */
static void write_imm_one(struct end *a, uint64_t id, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge g = { (uintptr_t)a->buf, 64, a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { raddr, rkey } }, *bad;

	if (ibv_post_send(a->qp, &wr, &bad))
		FAIL("write with immediate: post");
}

/* Sends a message that its sender's memory going cuts short, then a
 * short one, to qp (with its receives in srq, or its own). The memory
 * goes right after the post; on a loaded machine the engine may send all
 * 8 MiB first (the whole message arrives), so it tries again, a few times. */
static void cut_message(struct end *a, struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_srq *srq)
{
	size_t big = 8 << 20;
	uint8_t *src = malloc(big), *dst = malloc(big);
	struct ibv_mr *smr, *dmr = ibv_reg_mr(pd, dst, big, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge s = { (uintptr_t)src, big, 0 }, d = { (uintptr_t)dst, big, dmr ? dmr->lkey : 0 };
	struct ibv_send_wr sw = { .wr_id = 71, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_recv_wr rw = { .wr_id = 72, .sg_list = &d, .num_sge = 1 }, *rbad;
	struct ibv_wc wc;
	int err, tries = 0;

	if (!src || !dst || !dmr)
		FAIL("uc cut: buffers");
	if (srq ? ibv_post_srq_recv(srq, &rw, &rbad) : ibv_post_recv(qp, &rw, &rbad))
		FAIL("uc cut: post_recv");
	for (;;) {
		if (!(smr = ibv_reg_mr(pd, src, big, 0)))
			FAIL("uc cut: reg_mr");
		s.lkey = smr->lkey;
		if (ibv_post_send(a->qp, &sw, &bad))
			FAIL("uc cut: post");
		ibv_dereg_mr(smr);
		wc = wait_wc(a->cq, "uc cut");
		if (wc.status != IBV_WC_SUCCESS || ++tries == 5)
			break;
		/* The race lost: the message went whole, into the receive. */
		expect(wait_wc(cq, "uc cut, sent whole"), 72, IBV_WC_SUCCESS, IBV_WC_RECV, "uc cut, sent whole");
		if (srq ? ibv_post_srq_recv(srq, &rw, &rbad) : ibv_post_recv(qp, &rw, &rbad))
			FAIL("uc cut: post_recv again");
	}
	expect(wc, 71, IBV_WC_LOC_PROT_ERR, 0, "uc cut");
	nothing(cq, "uc cut");
	if ((err = ibv_modify_qp(a->qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS }, IBV_QP_STATE)))
		FAIL("uc cut: SQE to RTS: %s", strerror(err));
	if (srq) {
		rw.wr_id = 73;
		if (ibv_post_srq_recv(srq, &rw, &rbad))
			FAIL("uc cut: post to the SRQ");
	}
	fill(a->buf, 64, 23);
	post(a, 74, IBV_WR_SEND, 64, 0, 0);
	if (srq)
		expect(wait_wc(cq, "uc cut, srq"), 72, IBV_WC_REM_INV_REQ_ERR, 0, "uc cut, srq");
	wc = wait_wc(cq, "uc after a cut");
	expect(wc, srq ? 73 : 72, IBV_WC_SUCCESS, IBV_WC_RECV, "uc after a cut");
	if (wc.byte_len != 64 || memcmp(dst, a->buf, 64))
		FAIL("uc after a cut: %u bytes, or they differ from what was sent", wc.byte_len);
	expect(wait_wc(a->cq, "uc after a cut"), 74, IBV_WC_SUCCESS, IBV_WC_SEND, "uc after a cut");
	ibv_dereg_mr(dmr);
	free(src);
	free(dst);
}

static void uc_check(void)
{
	struct end a, b, r;
	struct ibv_wc wc;
	struct ibv_send_wr wr = { .opcode = IBV_WR_RDMA_READ }, *bad;
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTS };
	int err;

	uc_pair(&a, &b);
	/* Several packets, by send and by write, arrive whole. */
	fill(a.buf, BIG, 21);
	post_recv(&b, 60, BIG);
	post(&a, 61, IBV_WR_SEND, BIG, 0, 0);
	expect(wait_wc(a.cq, "uc send"), 61, IBV_WC_SUCCESS, IBV_WC_SEND, "uc send");
	wc = wait_wc(b.cq, "uc send: receive");
	expect(wc, 60, IBV_WC_SUCCESS, IBV_WC_RECV, "uc send: receive");
	if (wc.byte_len != BIG || memcmp(a.buf, b.buf, BIG))
		FAIL("uc send: %u bytes, or they differ from what was sent", wc.byte_len);
	fill(a.buf, BIG, 22);
	post(&a, 62, IBV_WR_RDMA_WRITE, BIG, (uintptr_t)b.buf, b.mr->rkey);
	expect(wait_wc(a.cq, "uc write"), 62, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "uc write");
	usleep(50000); /* done when sent, not when written */
	if (memcmp(a.buf, b.buf, BIG))
		FAIL("uc write: the target differs from what was written");
	post_recv(&b, 63, 0);
	post(&a, 64, IBV_WR_RDMA_WRITE_WITH_IMM, 4096, (uintptr_t)b.buf, b.mr->rkey);
	expect(wait_wc(a.cq, "uc write with immediate"), 64, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "uc write with immediate");
	expect(wait_wc(b.cq, "uc write with immediate: receive"), 63, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
	       "uc write with immediate: receive");

	/* Reads and atomics are not UC's. */
	wr.sg_list = &(struct ibv_sge){ (uintptr_t)a.buf, 8, a.mr->lkey };
	wr.num_sge = 1;
	if ((err = ibv_post_send(a.qp, &wr, &bad)) != EINVAL)
		FAIL("uc read: ibv_post_send gave %d, want EINVAL", err);
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	if ((err = ibv_post_send(a.qp, &wr, &bad)) != EINVAL)
		FAIL("uc fetch-add: ibv_post_send gave %d, want EINVAL", err);

	/* Dropped without a word, and the QPs go on: a send with no receive,
	 * a write with a bad R_Key, a write with immediate with no receive
	 * (not written either), a write the QP does not allow. A send that
	 * arrives after them (in order, as packets of one QP do) shows they
	 * were taken in. */
	memset(b.buf, 0, BIG);
	post(&a, 65, IBV_WR_SEND, 64, 0, 0);
	post(&a, 66, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf, b.mr->rkey + 0x100);
	write_imm_one(&a, 80, (uintptr_t)b.buf, b.mr->rkey);
	probe(&a, &b, 68, "uc drops");
	qa.qp_access_flags = 0;
	if ((err = ibv_modify_qp(b.qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)))
		FAIL("uc: RTS to RTS, no remote write: %s", strerror(err));
	post(&a, 67, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf, b.mr->rkey);
	probe_send(&a, &b, 69, "uc write not allowed");
	if (b.buf[0] || qp_state(b.qp) != IBV_QPS_RTS)
		FAIL("uc drops: the target changed, or the QP is in state %d", qp_state(b.qp));
	qa.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if ((err = ibv_modify_qp(b.qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)))
		FAIL("uc: RTS to RTS, remote write: %s", strerror(err));

	/* The sender's own error: SQE, and back to RTS. The send posted
	 * before it still goes. */
	{
		struct ibv_sge s = { (uintptr_t)a.buf, 64, a.mr->lkey + 0x100 }, g = { (uintptr_t)a.buf, 64, a.mr->lkey };
		struct ibv_send_wr sw = { .wr_id = 70, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr good = { .wr_id = 79, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED, .next = &sw };

		post_recv(&b, 78, 64);
		if (ibv_post_send(a.qp, &good, &bad))
			FAIL("uc send, bad lkey: post");
		expect(wait_wc(a.cq, "uc send before a bad lkey"), 79, IBV_WC_SUCCESS, IBV_WC_SEND, "uc send before a bad lkey");
		expect(wait_wc(b.cq, "uc send before a bad lkey: receive"), 78, IBV_WC_SUCCESS, IBV_WC_RECV,
		       "uc send before a bad lkey: receive");
		expect(wait_wc(a.cq, "uc send, bad lkey"), 70, IBV_WC_LOC_PROT_ERR, 0, "uc send, bad lkey");
		if (qp_state(a.qp) != IBV_QPS_SQE)
			FAIL("uc send, bad lkey: the QP is in state %d, want SQE", qp_state(a.qp));
	}
	if ((err = ibv_modify_qp(a.qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS }, IBV_QP_STATE)))
		FAIL("uc: SQE to RTS: %s", strerror(err));

	/* Windows on UC QPs, as mlx5 takes them: a type 2 window bound
	 * through b serves a's writes, a send with invalidate takes it back
	 * (a write to it is then dropped), and a type 1 window and a local
	 * invalidate work too. */
	{
		struct ibv_mr *wmr = ibv_reg_mr(pd, b.buf + 16384, 4096,
						IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
		struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1), *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		struct ibv_send_wr bw = { .wr_id = 100, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
			.bind_mw = { w2, w2 ? ibv_inc_rkey(w2->rkey) : 0,
				     { wmr, (uintptr_t)b.buf + 16384, 1024, IBV_ACCESS_REMOTE_WRITE } } };
		struct ibv_mw_bind mb = { .wr_id = 103, .send_flags = IBV_SEND_SIGNALED,
			.bind_info = { wmr, (uintptr_t)b.buf + 18432, 1024, IBV_ACCESS_REMOTE_WRITE } };
		struct ibv_sge is = { (uintptr_t)a.buf, 64, a.mr->lkey };
		struct ibv_send_wr iw = { .wr_id = 102, .sg_list = &is, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
			.send_flags = IBV_SEND_SIGNALED }, lw = { .wr_id = 105, .opcode = IBV_WR_LOCAL_INV,
			.send_flags = IBV_SEND_SIGNALED };

		if (!wmr || !w1 || !w2)
			FAIL("uc windows: %s", strerror(errno));
		if ((err = ibv_post_send(b.qp, &bw, &bad)))
			FAIL("uc: bind a type 2 window: %s", strerror(err));
		expect(wait_wc(b.cq, "uc bind"), 100, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "uc: bind a type 2 window");
		fill(a.buf, 64, 31);
		post(&a, 101, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf + 16384, bw.bind_mw.rkey);
		expect(wait_wc(a.cq, "uc write in a window"), 101, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "uc write in a window");
		probe(&a, &b, 106, "uc write in a window");
		if (memcmp(a.buf, b.buf + 16384, 64))
			FAIL("uc write in a window: not written");
		iw.invalidate_rkey = bw.bind_mw.rkey;
		post_recv(&b, 107, 64);
		if ((err = ibv_post_send(a.qp, &iw, &bad)))
			FAIL("uc: post a send with invalidate: %s", strerror(err));
		wc = wait_wc(b.cq, "uc receive with invalidate");
		expect(wc, 107, IBV_WC_SUCCESS, IBV_WC_RECV, "uc receive with invalidate");
		if (!(wc.wc_flags & IBV_WC_WITH_INV) || wc.invalidated_rkey != bw.bind_mw.rkey)
			FAIL("uc receive with invalidate: flags %#x, key %#x", wc.wc_flags, wc.invalidated_rkey);
		expect(wait_wc(a.cq, "uc send with invalidate"), 102, IBV_WC_SUCCESS, IBV_WC_SEND, "uc send with invalidate");
		fill(a.buf, 64, 32);
		post(&a, 104, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf + 16384, bw.bind_mw.rkey);
		expect(wait_wc(a.cq, "uc write to a window gone"), 104, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "uc write to a window gone");
		probe(&a, &b, 108, "uc write to a window gone");
		if (!memcmp(a.buf, b.buf + 16384, 64))
			FAIL("uc write to an invalidated window: written");
		if ((err = ibv_bind_mw(b.qp, w1, &mb)))
			FAIL("uc: bind a type 1 window: %s", strerror(err));
		expect(wait_wc(b.cq, "uc bind type 1"), 103, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "uc: bind a type 1 window");
		bw.bind_mw.rkey = ibv_inc_rkey(bw.bind_mw.rkey);
		lw.invalidate_rkey = bw.bind_mw.rkey;
		bw.next = &lw;
		if ((err = ibv_post_send(b.qp, &bw, &bad)))
			FAIL("uc: bind and invalidate: %s", strerror(err));
		expect(wait_wc(b.cq, "uc bind again"), 100, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "uc: bind again");
		expect(wait_wc(b.cq, "uc local invalidate"), 105, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, "uc: local invalidate");
		if (ibv_dealloc_mw(w1) || ibv_dealloc_mw(w2) || ibv_dereg_mr(wmr))
			FAIL("uc windows: free");
	}

	/* A message cut short (its memory deregistered while it went out)
	 * leaves its receive to the next message, or, an SRQ's, completes in
	 * error. */
	cut_message(&a, b.qp, b.cq, NULL);
	{
		struct ibv_srq_init_attr si = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_srq *srq = ibv_create_srq(pd, &si);
		struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UC, .send_cq = b.cq, .recv_cq = b.cq, .srq = srq,
			.cap = { .max_send_wr = 4, .max_send_sge = 1 } };
		struct end s = b;

		if (!srq || !(s.qp = ibv_create_qp(pd, &ia)))
			FAIL("uc cut, srq: %s", strerror(errno));
		connect_uc(&s, a.qp->qp_num, IBV_ACCESS_REMOTE_WRITE);
		if ((err = ibv_modify_qp(a.qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET }, IBV_QP_STATE)))
			FAIL("uc: to RESET: %s", strerror(err));
		connect_uc(&a, s.qp->qp_num, 0);
		cut_message(&a, s.qp, b.cq, srq);
		/* rxe's UC class D: a one-packet write with immediate and a
		 * bad R_Key has taken an SRQ receive, which completes in error. */
		{
			struct ibv_sge d = { (uintptr_t)b.buf, 64, b.mr->lkey };
			struct ibv_recv_wr rw = { .wr_id = 83, .sg_list = &d, .num_sge = 1 }, *rbad;

			if (ibv_post_srq_recv(srq, &rw, &rbad))
				FAIL("uc srq, bad rkey: post");
			write_imm_one(&a, 84, (uintptr_t)b.buf, b.mr->rkey + 0x100);
			expect(wait_wc(a.cq, "uc srq, bad rkey"), 84, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "uc srq, bad rkey");
			expect(wait_wc(b.cq, "uc srq, bad rkey: receive"), 83, IBV_WC_REM_ACCESS_ERR, 0, "uc srq, bad rkey: receive");
		}
		if ((err = ibv_modify_qp(a.qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET }, IBV_QP_STATE)))
			FAIL("uc: to RESET: %s", strerror(err));
		connect_uc(&a, b.qp->qp_num, 0);
	}

	/* An RC QP hears no UC packets. */
	make_end(&r, IBV_ACCESS_LOCAL_WRITE);
	connect_to(&r, lid, a.qp->qp_num, 14, 7, 7);
	if ((err = ibv_modify_qp(a.qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET }, IBV_QP_STATE)))
		FAIL("uc: to RESET: %s", strerror(err));
	connect_uc(&a, r.qp->qp_num, 0);
	post_recv(&r, 74, 64);
	post(&a, 75, IBV_WR_SEND, 64, 0, 0);
	expect(wait_wc(a.cq, "uc to rc"), 75, IBV_WC_SUCCESS, IBV_WC_SEND, "uc to rc");
	nothing(r.cq, "uc to rc");

	/* The responder's own error ends it: a receive too short. */
	post_recv(&b, 76, 16);
	if ((err = ibv_modify_qp(a.qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET }, IBV_QP_STATE)))
		FAIL("uc: to RESET: %s", strerror(err));
	connect_uc(&a, b.qp->qp_num, 0);
	post(&a, 77, IBV_WR_SEND, 64, 0, 0);
	expect(wait_wc(b.cq, "uc too long"), 76, IBV_WC_LOC_LEN_ERR, 0, "uc too long");
	if (qp_state(b.qp) != IBV_QPS_ERR)
		FAIL("uc too long: the receiver is in state %d, want ERR", qp_state(b.qp));

	/* mlx5's send operations for UC: no reads or atomics; for UD, sends
	 * alone. */
	{
		struct ibv_qp_init_attr_ex x = { .qp_type = IBV_QPT_UC, .send_cq = a.cq, .recv_cq = a.cq, .pd = pd,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
			.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_READ };
		struct ibv_qp *q = ibv_create_qp_ex(ctx, &x);

		if (q || errno != EOPNOTSUPP)
			FAIL("uc create_qp_ex with reads: %s, want EOPNOTSUPP", q ? "made" : strerror(errno));
		x.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
		if (!(q = ibv_create_qp_ex(ctx, &x)))
			FAIL("uc create_qp_ex with sends and writes: %s", strerror(errno));
		ibv_destroy_qp(q);
		x.qp_type = IBV_QPT_UD;
		if ((q = ibv_create_qp_ex(ctx, &x)) || errno != EOPNOTSUPP)
			FAIL("ud create_qp_ex with writes: %s, want EOPNOTSUPP", q ? "made" : strerror(errno));
		x.send_ops_flags = IBV_QP_EX_WITH_SEND_WITH_IMM;
		if (!(q = ibv_create_qp_ex(ctx, &x)))
			FAIL("ud create_qp_ex with sends: %s", strerror(errno));
		ibv_destroy_qp(q);
	}
}

/* A remote write of 64 bytes from a to addr under rkey, which the responder
 * must refuse without harm: REM_ACCESS_ERR. */
static void write_refused(struct end *a, uint64_t id, uint64_t addr, uint32_t rkey, const char *what)
{
	post(a, id, IBV_WR_RDMA_WRITE, 64, addr, rkey);
	expect(wait_wc(a->cq, what), id, IBV_WC_REM_ACCESS_ERR, 0, what);
}

/* Memory regions and the verbs around them: on demand (the memory may be
 * gone), device memory, rereg, advise, resize, the device clock, and what a
 * receive's own bad memory and a reset do to the completions. */
static void regions_check(void)
{
	const long pg = sysconf(_SC_PAGESIZE);
	struct ibv_values_ex v0 = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK }, v1 = v0;
	struct ibv_device_attr_ex dx;
	struct ibv_alloc_dm_attr da = { .length = 64 * 1024 };
	struct ibv_dm *dm[3];
	struct ibv_mr *mr, *imp;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .wr_id = 40, .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	struct end a, b, c, d;
	uint8_t *pages, word[8] = { 0 };
	int err, i;
	double ms;

	/* A receive whose own memory fails it: LOC_PROT_ERR there, the IBA's
	 * Remote Operational Error at the sender. Reset, the receiver's QP
	 * leaves nothing in its CQ. */
	pair(&a, &b, 7);
	sge = (struct ibv_sge){ (uintptr_t)b.buf, 64, b.mr->lkey + 0x100 };
	if ((err = ibv_post_recv(b.qp, &rwr, &rbad)))
		FAIL("post a receive: %s", strerror(err));
	post(&a, 41, IBV_WR_SEND, 64, 0, 0);
	expect(wait_wc(a.cq, "send into a bad receive"), 41, IBV_WC_REM_OP_ERR, 0, "send into a bad receive");
	if ((err = ibv_modify_qp(b.qp, &(struct ibv_qp_attr){ .qp_state = IBV_QPS_RESET }, IBV_QP_STATE)))
		FAIL("reset: %s", strerror(err));
	nothing(b.cq, "a reset QP's CQ");

	/* A resized CQ keeps what waits in it, in order, and cannot shrink
	 * below it. */
	pair(&c, &d, 7);
	for (i = 0; i < 3; i++)
		post_recv(&d, 50 + i, 64);
	for (i = 0; i < 3; i++)
		post(&c, 60 + i, IBV_WR_SEND, 64, 0, 0);
	for (i = 0; i < 3; i++)
		expect(wait_wc(c.cq, "sends"), 60 + i, IBV_WC_SUCCESS, IBV_WC_SEND, "sends");
	if ((err = ibv_resize_cq(d.cq, 1)) != EINVAL)
		FAIL("resize a CQ of 3 completions to 1: %d, want EINVAL", err);
	if ((err = ibv_resize_cq(d.cq, 100)) || d.cq->cqe != 127)
		FAIL("resize to 100: %d, %d entries, want 127", err, d.cq->cqe);
	for (i = 0; i < 3; i++)
		expect(wait_wc(d.cq, "after resize"), 50 + i, IBV_WC_SUCCESS, IBV_WC_RECV, "after resize");

	/* The kernel pins a plain region's pages: a hole fails it (EFAULT).
	 * An on-demand one pins nothing; a write into its hole, or through
	 * an implicit region into memory gone or read-only, is refused. */
	pages = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pages == MAP_FAILED || munmap(pages + pg, pg) || mprotect(pages + 2 * pg, pg, PROT_READ))
		FAIL("map pages");
	if ((mr = ibv_reg_mr(pd, pages, 3 * pg, IBV_ACCESS_LOCAL_WRITE)) || errno != EFAULT)
		FAIL("register a hole: %s, want EFAULT", mr ? "made" : strerror(errno));
	if ((mr = ibv_reg_mr(pd, pages + 2 * pg, pg, IBV_ACCESS_LOCAL_WRITE)) || errno != EFAULT)
		FAIL("register read-only memory for writing: %s, want EFAULT", mr ? "made" : strerror(errno));
	mr = ibv_reg_mr(pd, pages, 3 * pg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND);
	imp = ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ON_DEMAND);
	if (!mr || !imp)
		FAIL("on-demand regions: %s", strerror(errno));
	pair(&a, &b, 7);
	post(&a, 70, IBV_WR_RDMA_WRITE, 64, (uintptr_t)pages, mr->rkey);
	expect(wait_wc(a.cq, "on-demand write"), 70, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "on-demand write");
	write_refused(&a, 71, (uintptr_t)pages + pg, mr->rkey, "on-demand write into a hole");
	pair(&a, &b, 7);
	write_refused(&a, 72, (uintptr_t)pages + pg, imp->rkey, "implicit write into a hole");
	pair(&a, &b, 7);
	write_refused(&a, 73, (uintptr_t)pages + 2 * pg, imp->rkey, "implicit write into read-only memory");

	/* Advice: the kernel's checks, and with FLUSH the range's fault. */
	sge = (struct ibv_sge){ (uintptr_t)pages, 64, a.mr->lkey };
	if ((err = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1)) != ENOENT)
		FAIL("advise a region not on demand: %d, want ENOENT", err);
	sge.lkey = mr->lkey;
	if ((err = ibv_advise_mr(pd2, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1)) != EPERM)
		FAIL("advise through another PD: %d, want EPERM", err);
	if ((err = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 2, &sge, 1)) != EINVAL ||
	    (err = ibv_advise_mr(pd, 7, 0, &sge, 1)) != EOPNOTSUPP)
		FAIL("advise with an unknown flag or advice: %d, want EINVAL, then EOPNOTSUPP", err);
	if ((err = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1)))
		FAIL("prefetch: %s", strerror(err));
	sge.addr += pg;
	if ((err = ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1)) != EFAULT)
		FAIL("prefetch a hole: %d, want EFAULT", err);

	/* Rereg: uverbs' and the kernel's checks, then a move that works. */
	errno = 0;
	if (!ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) || errno != EINVAL)
		FAIL("rereg with no change: errno %d, want EINVAL", errno);
	if (!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 1 << 15) || errno != EINVAL)
		FAIL("rereg to an unknown access flag: errno %d, want EINVAL", errno);
	if (!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL, pages + pg, pg,
			  IBV_ACCESS_LOCAL_WRITE) || errno != EFAULT)
		FAIL("rereg onto a hole: errno %d, want EFAULT", errno);
	if ((err = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, word, sizeof(word), 0)) || mr->addr != word)
		FAIL("rereg onto other memory: %d", err);
	if (ibv_dereg_mr(mr) || ibv_dereg_mr(imp) || munmap(pages, pg) || munmap(pages + 2 * pg, pg))
		FAIL("deregister");

	/* Device memory: 128 KiB in all, 4-byte words, regions that hold it. */
	if (ibv_query_device_ex(ctx, NULL, &dx) || dx.max_dm_size != 128 * 1024)
		FAIL("max_dm_size %llu, want 131072", (unsigned long long)dx.max_dm_size);
	for (i = 0; i < 2; i++)
		if (!(dm[i] = ibv_alloc_dm(ctx, &da)))
			FAIL("allocate 64 KiB of device memory: %s", strerror(errno));
	da.length = 1;
	if ((dm[2] = ibv_alloc_dm(ctx, &da)) || errno != ENOMEM)
		FAIL("allocate past 128 KiB: %s, want ENOMEM", dm[2] ? "made" : strerror(errno));
	da.length = 0;
	if ((dm[2] = ibv_alloc_dm(ctx, &da)) || errno != EINVAL)
		FAIL("allocate nothing: %s, want EINVAL", dm[2] ? "made" : strerror(errno));
	if (ibv_memcpy_to_dm(dm[0], 2, word, 4) != EINVAL || ibv_memcpy_to_dm(dm[0], 64 * 1024 - 4, word, 8) != EFAULT)
		FAIL("copy to device memory unaligned or past its end: want EINVAL, then EFAULT");
	if ((mr = ibv_reg_dm_mr(pd, dm[0], 0, 64, IBV_ACCESS_LOCAL_WRITE)) || errno != EINVAL)
		FAIL("a device memory region not zero-based: %s, want EINVAL", mr ? "made" : strerror(errno));
	if (!(mr = ibv_reg_dm_mr(pd, dm[0], 0, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED)) || mr->addr)
		FAIL("a device memory region: %s", mr ? "an address" : strerror(errno));
	if ((err = ibv_free_dm(dm[0])) != EBUSY)
		FAIL("free device memory a region holds: %d, want EBUSY", err);
	if (ibv_dereg_mr(mr) || ibv_free_dm(dm[0]) || ibv_free_dm(dm[1]))
		FAIL("free device memory");

	/* Memory windows: a type 1 window bound by ibv_bind_mw, a type 2 one
	 * by a work request, each granting what it was bound with, to whom. */
	{
		struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1), *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		struct ibv_mw_bind mb = { .wr_id = 80, .send_flags = IBV_SEND_SIGNALED };
		struct ibv_send_wr bw = { .wr_id = 84, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bbad;
		struct ibv_sge ws;
		struct ibv_send_wr sw = { .wr_id = 86, .sg_list = &ws, .num_sge = 1, .opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED };
		struct ibv_mr *wmr;
		struct end e, f;

		pair(&c, &d, 7);
		wmr = ibv_reg_mr(pd, d.buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
		if (!w1 || !w2 || !wmr)
			FAIL("windows: %s", strerror(errno));
		if (ibv_alloc_mw(pd, 3) || errno != EINVAL)
			FAIL("a window of type 3: want EINVAL");
		mb.bind_info = (struct ibv_mw_bind_info){ wmr, (uintptr_t)d.buf, 1024, IBV_ACCESS_REMOTE_WRITE };
		if ((err = ibv_bind_mw(d.qp, w1, &mb)))
			FAIL("bind a type 1 window: %s", strerror(err));
		expect(wait_wc(d.cq, "bind"), 80, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "bind a type 1 window");
		bw.bind_mw.bind_info = (struct ibv_mw_bind_info){ wmr, (uintptr_t)d.buf + 2048, 1024, IBV_ACCESS_REMOTE_WRITE };
		bw.bind_mw.mw = w2;
		bw.bind_mw.rkey = ibv_inc_rkey(w2->rkey);
		if ((err = ibv_post_send(d.qp, &bw, &bbad)))
			FAIL("bind a type 2 window: %s", strerror(err));
		expect(wait_wc(d.cq, "bind"), 84, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "bind a type 2 window");
		post(&c, 81, IBV_WR_RDMA_WRITE, 64, (uintptr_t)d.buf + 960, w1->rkey);
		expect(wait_wc(c.cq, "a write in a type 1 window"), 81, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "a write in a window");
		post(&c, 85, IBV_WR_RDMA_WRITE, 64, (uintptr_t)d.buf + 2048, bw.bind_mw.rkey);
		expect(wait_wc(c.cq, "a write in a type 2 window"), 85, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "a write in a window");
		/* A send with invalidate takes the type 2 window back, and the
		 * receive says which key; bound again, with the next key. */
		{
			struct ibv_sge is = { (uintptr_t)c.buf, 64, c.mr->lkey };
			struct ibv_send_wr iw = { .wr_id = 92, .sg_list = &is, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = bw.bind_mw.rkey };
			struct ibv_wc rc;

			post_recv(&d, 91, 64);
			if ((err = ibv_post_send(c.qp, &iw, &bbad)))
				FAIL("post a send with invalidate: %s", strerror(err));
			rc = wait_wc(d.cq, "a receive with invalidate");
			expect(rc, 91, IBV_WC_SUCCESS, IBV_WC_RECV, "a receive with invalidate");
			if (!(rc.wc_flags & IBV_WC_WITH_INV) || rc.invalidated_rkey != bw.bind_mw.rkey)
				FAIL("a receive with invalidate: flags %#x, key %#x, want WITH_INV and %#x", rc.wc_flags,
				     rc.invalidated_rkey, bw.bind_mw.rkey);
			expect(wait_wc(c.cq, "a send with invalidate"), 92, IBV_WC_SUCCESS, IBV_WC_SEND, "a send with invalidate");
			bw.bind_mw.rkey = ibv_inc_rkey(bw.bind_mw.rkey);
			if ((err = ibv_post_send(d.qp, &bw, &bbad)))
				FAIL("bind a type 2 window again: %s", strerror(err));
			expect(wait_wc(d.cq, "bind again"), 84, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "bind a type 2 window again");
		}
		write_refused(&c, 82, (uintptr_t)d.buf + 1000, w1->rkey, "a write past a window");
		/* A type 2 window serves the QP it was bound through alone. */
		pair(&e, &f, 7);
		write_refused(&e, 87, (uintptr_t)d.buf + 2048, bw.bind_mw.rkey, "a write to a type 2 window of another QP");
		/* A bind to a region that does not allow binds fails on the
		 * queue. */
		pair(&e, &f, 7);
		mb.bind_info.mr = f.mr;
		mb.bind_info.addr = (uintptr_t)f.buf;
		mb.wr_id = 83;
		if ((err = ibv_bind_mw(f.qp, w1, &mb)))
			FAIL("post a bind: %s", strerror(err));
		expect(wait_wc(f.cq, "a bind to a region without MW_BIND"), 83, IBV_WC_MW_BIND_ERR, 0, "a bind to a region without MW_BIND");
		/* A window's key is no local key. */
		pair(&e, &f, 7);
		ws = (struct ibv_sge){ (uintptr_t)d.buf + 2048, 64, bw.bind_mw.rkey };
		if ((err = ibv_post_send(f.qp, &sw, &bbad)))
			FAIL("post a send: %s", strerror(err));
		expect(wait_wc(f.cq, "a window's key as a local key"), 86, IBV_WC_LOC_PROT_ERR, 0, "a window's key as a local key");
		/* A region that goes takes its windows along. */
		pair(&e, &f, 7);
		mb.bind_info = (struct ibv_mw_bind_info){ wmr, (uintptr_t)d.buf, 1024, IBV_ACCESS_REMOTE_WRITE };
		mb.wr_id = 89;
		if ((err = ibv_bind_mw(f.qp, w1, &mb)))
			FAIL("bind again: %s", strerror(err));
		expect(wait_wc(f.cq, "bind again"), 89, IBV_WC_SUCCESS, IBV_WC_BIND_MW, "bind again");
		post(&e, 90, IBV_WR_RDMA_WRITE, 64, (uintptr_t)d.buf, w1->rkey);
		expect(wait_wc(e.cq, "a write in a window bound again"), 90, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "a write in a window");
		if (ibv_dereg_mr(wmr))
			FAIL("deregister a region with a window");
		write_refused(&e, 88, (uintptr_t)d.buf, w1->rkey, "a write to the window of a region gone");
		if (ibv_dealloc_mw(w1) || ibv_dealloc_mw(w2))
			FAIL("free the windows");
	}

	/* A PD a region or a QP uses cannot go (EBUSY, as uverbs answers). */
	{
		struct ibv_pd *keep = pd;
		struct end e;

		pd = pd2;
		make_end(&e, IBV_ACCESS_LOCAL_WRITE);
		pd = keep;
		if ((err = ibv_dealloc_pd(pd2)) != EBUSY)
			FAIL("free a PD in use: %d, want EBUSY", err);
		if (ibv_dereg_mr(e.mr) || (err = ibv_dealloc_pd(pd2)) != EBUSY)
			FAIL("free a PD a QP uses: %d, want EBUSY", err);
		if (ibv_destroy_qp(e.qp) || (err = ibv_dealloc_pd(pd2)))
			FAIL("free a PD nothing uses: %s", strerror(err));
	}

	/* The device's clock runs at hca_core_clock. */
	if (ibv_query_rt_values_ex(ctx, &v0) || usleep(20000) || ibv_query_rt_values_ex(ctx, &v1) ||
	    v1.comp_mask != IBV_VALUES_MASK_RAW_CLOCK)
		FAIL("ibv_query_rt_values_ex: %s", strerror(errno));
	ms = (double)(v1.raw_clock.tv_nsec - v0.raw_clock.tv_nsec) / dx.hca_core_clock;
	if (ms < 20 || ms > 2000)
		FAIL("20 ms of the device's clock: %.1f ms", ms);
	v0.comp_mask = 2;
	if (ibv_query_rt_values_ex(ctx, &v0) != EINVAL)
		FAIL("ibv_query_rt_values_ex of another value: want EINVAL");
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_port_attr pa;
	struct end a, b;
	struct ibv_wc wc;
	int i, n, err;

	if (argc != 3 && argc != 4)
		FAIL("usage: rcpair DEVICE UNREACHABLE_LID [event-after-destroy|event-then-destroy]");
	list = ibv_get_device_list(&n);
	for (i = 0; i < n && strcmp(ibv_get_device_name(list[i]), argv[1]); i++)
		;
	if (i == n || !(ctx = ibv_open_device(list[i])))
		FAIL("open %s", argv[1]);
	if (ibv_query_port(ctx, 1, &pa))
		FAIL("ibv_query_port");
	lid = pa.lid;
	pd = ibv_alloc_pd(ctx);
	if (argc == 4) {
		if (strcmp(argv[3], "event-after-destroy") && strcmp(argv[3], "event-then-destroy"))
			FAIL("no check %s", argv[3]);
		event_and_destroy(!strcmp(argv[3], "event-after-destroy"));
		printf("ok %s\n", argv[3]);
		fflush(stdout);
		ibv_close_device(ctx);
		return 0;
	}

	/* Data of several packets arrives whole, by each operation. */
	pair(&a, &b, 7);
	fill(a.buf, BIG, 1);
	post_recv(&b, 10, BIG);
	post(&a, 1, IBV_WR_SEND_WITH_IMM, BIG, 0, 0);
	expect(wait_wc(b.cq, "send: receive"), 10, IBV_WC_SUCCESS, IBV_WC_RECV, "send: receive");
	wc = wait_wc(a.cq, "send");
	expect(wc, 1, IBV_WC_SUCCESS, IBV_WC_SEND, "send");
	if (memcmp(a.buf, b.buf, BIG))
		FAIL("send: the receive buffer differs from what was sent");
	puts("ok send");

	fill(a.buf, BIG, 2);
	post(&a, 2, IBV_WR_RDMA_WRITE, BIG, (uintptr_t)b.buf, b.mr->rkey);
	expect(wait_wc(a.cq, "write"), 2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write");
	if (memcmp(a.buf, b.buf, BIG))
		FAIL("write: the target differs from what was written");
	puts("ok write");

	post_recv(&b, 11, 0);
	fill(a.buf, 4096, 3);
	post(&a, 3, IBV_WR_RDMA_WRITE_WITH_IMM, 4096, (uintptr_t)b.buf, b.mr->rkey);
	wc = wait_wc(b.cq, "write with immediate: receive");
	expect(wc, 11, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, "write with immediate: receive");
	if (!(wc.wc_flags & IBV_WC_WITH_IMM) || be32toh(wc.imm_data) != 0x1234 || wc.byte_len != 4096)
		FAIL("write with immediate: flags %#x imm %#x len %u", wc.wc_flags, be32toh(wc.imm_data), wc.byte_len);
	expect(wait_wc(a.cq, "write with immediate"), 3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "write with immediate");
	puts("ok write-with-immediate");

	fill(b.buf, BIG, 4);
	memset(a.buf, 0, BIG);
	post(&a, 4, IBV_WR_RDMA_READ, BIG, (uintptr_t)b.buf, b.mr->rkey);
	wc = wait_wc(a.cq, "read");
	expect(wc, 4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, "read");
	if (memcmp(a.buf, b.buf, BIG) || wc.byte_len != BIG)
		FAIL("read: %u bytes, or they differ from the source", wc.byte_len);
	puts("ok read");

	{
		uint64_t *word = (uint64_t *)(b.buf + 64), *got = (uint64_t *)a.buf;
		struct ibv_sge s = { (uintptr_t)a.buf, 8, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 5, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
			.send_flags = IBV_SEND_SIGNALED }, *bad;

		*word = 40;
		wr.wr.atomic.remote_addr = (uintptr_t)word;
		wr.wr.atomic.rkey = b.mr->rkey;
		wr.wr.atomic.compare_add = 2;
		if ((err = ibv_post_send(a.qp, &wr, &bad)))
			FAIL("fetch-add: %s", strerror(err));
		expect(wait_wc(a.cq, "fetch-add"), 5, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD, "fetch-add");
		if (*got != 40 || *word != 42)
			FAIL("fetch-add: got %llu, memory %llu; want 40, 42", (unsigned long long)*got, (unsigned long long)*word);
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr.atomic.compare_add = 42;
		wr.wr.atomic.swap = 7;
		if ((err = ibv_post_send(a.qp, &wr, &bad)))
			FAIL("compare-swap: %s", strerror(err));
		expect(wait_wc(a.cq, "compare-swap"), 5, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP, "compare-swap");
		if (*got != 42 || *word != 7)
			FAIL("compare-swap: got %llu, memory %llu; want 42, 7", (unsigned long long)*got, (unsigned long long)*word);
	}
	puts("ok atomics");

	/* A send that finds no receive waits (RNR, retried for ever with
	 * rnr_retry 7) and completes once one is posted. */
	post(&a, 6, IBV_WR_SEND, 64, 0, 0);
	usleep(50000);
	if (ibv_poll_cq(a.cq, 1, &wc) != 0)
		FAIL("rnr: the send completed (status %s) with no receive posted", ibv_wc_status_str(wc.status));
	post_recv(&b, 12, 64);
	expect(wait_wc(b.cq, "rnr: receive"), 12, IBV_WC_SUCCESS, IBV_WC_RECV, "rnr: receive");
	expect(wait_wc(a.cq, "rnr"), 6, IBV_WC_SUCCESS, IBV_WC_SEND, "rnr");
	puts("ok rnr-then-receive");

	/* Posting needs RTS. */
	{
		struct end c;
		struct ibv_sge s = { 0, 0, 0 };
		struct ibv_send_wr wr = { .sg_list = &s, .opcode = IBV_WR_SEND }, *bad;
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTR };

		make_end(&c, IBV_ACCESS_LOCAL_WRITE);
		/* mlx5: before RTS the send queue takes no gather entry. */
		if (ibv_post_send(c.qp, &wr, &bad) != ENOMEM)
			FAIL("post_send in RESET did not fail with ENOMEM");
		if (ibv_modify_qp(c.qp, &at, IBV_QP_STATE) != EINVAL)
			FAIL("RESET to RTR did not fail with EINVAL");
		/* The kernel's table: RESET cannot go to ERR; CUR_STATE only
		 * where a transition takes it (RTS to RTS, not to ERR). */
		at.qp_state = IBV_QPS_ERR;
		if (ibv_modify_qp(c.qp, &at, IBV_QP_STATE) != EINVAL)
			FAIL("RESET to ERR did not fail with EINVAL");
		at = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .cur_qp_state = IBV_QPS_RTS };
		if ((err = ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_CUR_STATE)))
			FAIL("RTS to RTS with CUR_STATE: %s", strerror(err));
		at.qp_state = IBV_QPS_ERR;
		if (ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_CUR_STATE) != EINVAL)
			FAIL("RTS to ERR with CUR_STATE did not fail with EINVAL");
		if ((err = ibv_modify_qp(a.qp, &at, IBV_QP_STATE)))
			FAIL("RTS to ERR: %s", strerror(err));
		at.qp_state = IBV_QPS_RESET;
		if ((err = ibv_modify_qp(a.qp, &at, IBV_QP_STATE)))
			FAIL("ERR to RESET: %s", strerror(err));
	}
	puts("ok states");

	/* Errors, each on a fresh pair (an error ends the QP). */
	pair(&a, &b, 7);
	post(&a, 20, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf, b.mr->rkey + 0x100);
	post(&a, 21, IBV_WR_RDMA_WRITE, 64, (uintptr_t)b.buf, b.mr->rkey);
	expect(wait_wc(a.cq, "bad rkey"), 20, IBV_WC_REM_ACCESS_ERR, 0, "bad rkey");
	expect(wait_wc(a.cq, "after bad rkey"), 21, IBV_WC_WR_FLUSH_ERR, 0, "after bad rkey");
	/* The responder has no completion to report it in: an async event. */
	qp_event(IBV_EVENT_QP_ACCESS_ERR, b.qp, IBV_QPS_ERR, "bad rkey: the responder");
	puts("ok remote-access-error");

	pair(&a, &b, 7);
	post(&a, 22, IBV_WR_RDMA_READ, 64, (uintptr_t)b.buf + BIG - 8, b.mr->rkey);
	expect(wait_wc(a.cq, "read past the region"), 22, IBV_WC_REM_ACCESS_ERR, 0, "read past the region");
	qp_event(IBV_EVENT_QP_ACCESS_ERR, b.qp, IBV_QPS_ERR, "read past the region: the responder");
	puts("ok out-of-range");

	pair(&a, &b, 7);
	{
		struct ibv_sge sg = { (uintptr_t)a.buf, 8, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 27, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
			.send_flags = IBV_SEND_SIGNALED }, *bad;

		wr.wr.atomic.remote_addr = (uintptr_t)b.buf + 4;
		wr.wr.atomic.rkey = b.mr->rkey;
		if ((err = ibv_post_send(a.qp, &wr, &bad)))
			FAIL("misaligned atomic: %s", strerror(err));
	}
	expect(wait_wc(a.cq, "misaligned atomic"), 27, IBV_WC_REM_INV_REQ_ERR, 0, "misaligned atomic");
	qp_event(IBV_EVENT_QP_ACCESS_ERR, b.qp, IBV_QPS_ERR, "misaligned atomic: the responder");
	puts("ok misaligned-atomic");

	/* An operation the responder's QP does not allow: reads are taken
	 * away by RTS to RTS, an optional attribute there. */
	pair(&a, &b, 7);
	{
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_RTS, .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };

		if ((err = ibv_modify_qp(b.qp, &at, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS)))
			FAIL("RTS to RTS with access flags: %s", strerror(err));
	}
	post(&a, 28, IBV_WR_RDMA_READ, 64, (uintptr_t)b.buf, b.mr->rkey);
	expect(wait_wc(a.cq, "read not allowed"), 28, IBV_WC_REM_INV_REQ_ERR, 0, "read not allowed");
	qp_event(IBV_EVENT_QP_REQ_ERR, b.qp, IBV_QPS_ERR, "read not allowed: the responder");
	puts("ok operation-not-allowed");

	pair(&a, &b, 7);
	post_recv(&b, 23, 16);
	post(&a, 24, IBV_WR_SEND, 64, 0, 0);
	expect(wait_wc(b.cq, "too long: receive"), 23, IBV_WC_LOC_LEN_ERR, 0, "too long: receive");
	expect(wait_wc(a.cq, "too long"), 24, IBV_WC_REM_INV_REQ_ERR, 0, "too long");
	/* The receive's completion reports it: no event. */
	no_async("too long");
	puts("ok too-long");

	pair(&a, &b, 1);
	post(&a, 25, IBV_WR_SEND, 64, 0, 0);
	expect(wait_wc(a.cq, "rnr retries"), 25, IBV_WC_RNR_RETRY_EXC_ERR, 0, "rnr retries");
	puts("ok rnr-retry-exceeded");

	/* A message that takes longer to move than the timeout is not taken
	 * for lost: the clock runs from its last packet, and no retry is
	 * allowed here. */
	buf_size = 128 << 20;
	pair_with(&a, &b, 1, 0, 7);
	memset(a.buf, 0x5a, buf_size);
	{
		struct ibv_sge s = { (uintptr_t)a.buf, (uint32_t)buf_size, a.mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 30, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED }, *bad;

		wr.wr.rdma.remote_addr = (uintptr_t)b.buf;
		wr.wr.rdma.rkey = b.mr->rkey;
		if ((err = ibv_post_send(a.qp, &wr, &bad)))
			FAIL("big write: %s", strerror(err));
		expect(wait_wc(a.cq, "big write"), 30, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, "big write");
		if (memcmp(a.buf, b.buf, buf_size))
			FAIL("big write: the target differs");
	}
	buf_size = BIG;
	puts("ok big-write");

	/* Datagrams: to a QP by number, through an address handle. One with
	 * a GRH arrives after it; one with another Q_Key, or for which no
	 * receive is posted, is dropped unanswered. */
	{
		struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UD, .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 1 } };
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111 };
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		uint8_t *ub = calloc(1, 8192);
		struct ibv_mr *mr = ibv_reg_mr(pd, ub, 8192, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_qp *u[2];
		union ibv_gid gid;
		struct ibv_ah_attr aa = { .dlid = lid, .port_num = 1, .is_global = 1 };
		struct ibv_ah *ah;
		struct ibv_sge s = { (uintptr_t)ub, 64, mr->lkey }, rs = { (uintptr_t)ub + 4096, 40 + 64, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 40, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
		struct ibv_recv_wr rw = { .wr_id = 41, .sg_list = &rs, .num_sge = 1 }, *rbad;

		if (!cq || !mr || ibv_query_gid(ctx, 1, 0, &gid))
			FAIL("datagram setup");
		ia.send_cq = ia.recv_cq = cq;
		for (i = 0; i < 2; i++) {
			if (!(u[i] = ibv_create_qp(pd, &ia)))
				FAIL("UD QP: %s", strerror(errno));
			at.qp_state = IBV_QPS_INIT;
			if ((err = ibv_modify_qp(u[i], &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)))
				FAIL("UD to INIT: %s", strerror(err));
			at.qp_state = IBV_QPS_RTR;
			if ((err = ibv_modify_qp(u[i], &at, IBV_QP_STATE)))
				FAIL("UD to RTR: %s", strerror(err));
			at.qp_state = IBV_QPS_RTS;
			if ((err = ibv_modify_qp(u[i], &at, IBV_QP_STATE | IBV_QP_SQ_PSN)))
				FAIL("UD to RTS: %s", strerror(err));
		}
		aa.grh.dgid = gid;
		aa.grh.hop_limit = 1;
		if (!(ah = ibv_create_ah(pd, &aa)))
			FAIL("ibv_create_ah: %s", strerror(errno));
		fill(ub, 64, 5);
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = u[1]->qp_num;
		wr.wr.ud.remote_qkey = 0x11111111;
		if (ibv_post_recv(u[1], &rw, &rbad) || ibv_post_send(u[0], &wr, &bad))
			FAIL("datagram: post");
		for (i = 0; i < 2; i++) {
			wc = wait_wc(cq, "datagram");
			if (wc.wr_id == 41) {
				expect(wc, 41, IBV_WC_SUCCESS, IBV_WC_RECV, "datagram: receive");
				if (wc.byte_len != 40 + 64 || !(wc.wc_flags & IBV_WC_GRH) || wc.src_qp != u[0]->qp_num || wc.slid != lid)
					FAIL("datagram: %u bytes, flags %#x, from QPN %#x LID %u", wc.byte_len, wc.wc_flags, wc.src_qp, wc.slid);
			} else {
				expect(wc, 40, IBV_WC_SUCCESS, IBV_WC_SEND, "datagram: send");
			}
		}
		if (memcmp(ub + 4096 + 40, ub, 64) || memcmp(ub + 4096 + 8, gid.raw, 16) || memcmp(ub + 4096 + 24, gid.raw, 16))
			FAIL("datagram: the payload or the GRH's GIDs differ");
		/* Gathered from two pieces, one datagram. */
		{
			struct ibv_sge two[2] = { { (uintptr_t)ub + 1024, 32, mr->lkey }, { (uintptr_t)ub + 2048, 32, mr->lkey } };

			fill(ub + 1024, 32, 6);
			fill(ub + 2048, 32, 7);
			memset(ub + 4096, 0, 40 + 64);
			wr.sg_list = two;
			wr.num_sge = 2;
			if (ibv_post_recv(u[1], &rw, &rbad) || ibv_post_send(u[0], &wr, &bad))
				FAIL("datagram of two pieces: post");
			wr.sg_list = &s;
			wr.num_sge = 1;
			for (i = 0; i < 2; i++)
				if (wait_wc(cq, "datagram of two pieces").status != IBV_WC_SUCCESS)
					FAIL("datagram of two pieces: an error completion");
			if (memcmp(ub + 4096 + 40, ub + 1024, 32) || memcmp(ub + 4096 + 72, ub + 2048, 32))
				FAIL("datagram of two pieces: the payload differs");
		}
		wr.wr.ud.remote_qkey = 0x22222222;
		if (ibv_post_recv(u[1], &rw, &rbad) || ibv_post_send(u[0], &wr, &bad))
			FAIL("datagram: post");
		expect(wait_wc(cq, "datagram, other Q_Key"), 40, IBV_WC_SUCCESS, IBV_WC_SEND, "datagram, other Q_Key");
		usleep(200000);
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			FAIL("datagram with another Q_Key was received (wr_id %llu)", (unsigned long long)wc.wr_id);
		/* A send error moves a datagram QP to SQE, where it still
		 * receives and flushes sends, until it is moved back to RTS. */
		{
			struct ibv_sge bad_sge = { (uintptr_t)ub, 64, mr->lkey + 0x100 };
			struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTS };
			struct ibv_qp_init_attr qi;

			wr.wr.ud.remote_qkey = 0x11111111;
			wr.sg_list = &bad_sge;
			if (ibv_post_send(u[0], &wr, &bad))
				FAIL("datagram with a bad lkey: post");
			wr.sg_list = &s;
			expect(wait_wc(cq, "datagram with a bad lkey"), 40, IBV_WC_LOC_PROT_ERR, 0, "datagram with a bad lkey");
			if (ibv_query_qp(u[0], &qa, IBV_QP_STATE, &qi) || qa.qp_state != IBV_QPS_SQE)
				FAIL("datagram with a bad lkey: the QP is in state %d, want SQE", qa.qp_state);
			wr.wr.ud.remote_qpn = u[0]->qp_num;
			if (ibv_post_recv(u[0], &rw, &rbad) || ibv_post_send(u[1], &wr, &bad))
				FAIL("datagram to a QP in SQE: post");
			for (i = 0; i < 2; i++)
				if (wait_wc(cq, "datagram to a QP in SQE").status != IBV_WC_SUCCESS)
					FAIL("datagram to a QP in SQE: an error completion");
			wr.wr.ud.remote_qpn = u[1]->qp_num;
			if (ibv_post_send(u[0], &wr, &bad))
				FAIL("datagram from a QP in SQE: post");
			expect(wait_wc(cq, "datagram from a QP in SQE"), 40, IBV_WC_WR_FLUSH_ERR, 0, "datagram from a QP in SQE");
			qa.qp_state = IBV_QPS_RTS;
			if ((err = ibv_modify_qp(u[0], &qa, IBV_QP_STATE)))
				FAIL("SQE to RTS: %s", strerror(err));
			if (ibv_post_recv(u[1], &rw, &rbad) || ibv_post_send(u[0], &wr, &bad))
				FAIL("datagram after SQE: post");
			for (i = 0; i < 2; i++)
				if (wait_wc(cq, "datagram after SQE").status != IBV_WC_SUCCESS)
					FAIL("datagram after SQE: an error completion");
		}
	}
	puts("ok datagrams");

	events();
	puts("ok events");
	srq_check();
	puts("ok srq");
	cq_overrun();
	puts("ok cq-overrun");
	comm_est();
	puts("ok comm-est");
	uc_check();
	puts("ok uc");
	regions_check();
	puts("ok regions");

	/* Nobody there: a modelled node's port has no such QP. */
	make_end(&a, IBV_ACCESS_LOCAL_WRITE);
	connect_to(&a, (uint16_t)atoi(argv[2]), 0x400, 1, 1, 7);
	post(&a, 26, IBV_WR_SEND, 64, 0, 0);
	expect(wait_wc(a.cq, "unreachable"), 26, IBV_WC_RETRY_EXC_ERR, 0, "unreachable");
	puts("ok retry-exceeded");
	return 0;
}
