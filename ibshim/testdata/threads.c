/*
 * threads: many threads on one mock HCA at once, as NCCL and UCX use
 * verbs: RC pairs of their own posting and polling, two threads sharing a
 * CQ and an SRQ, one waiting on a completion channel while another posts,
 * one reading async events while another moves QPs to error, some making
 * and destroying objects (and contexts), some querying, and one doing MAD
 * round trips on umad0. Built with ThreadSanitizer by ibshim/tsan_test.go
 * and run in `nvmock exec`; prints each thread's counts and exits 0, or
 * non-zero at the first thing that goes wrong.
 *
 * Usage: threads DEVICE [SECONDS]
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <rdma/ib_user_mad.h>

#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

#define PAIRS 3
#define BUF 8192

static const char *dev_name;
static struct ibv_pd *pd;
static int stop;

static int stopped(void) { return __atomic_load_n(&stop, __ATOMIC_ACQUIRE); }

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
};

/* make_end makes an RC QP on its own CQ (cq NULL) or on cq, taking its
 * receives from srq if set. */
static void make_end(struct end *e, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .srq = srq,
		.cap = { .max_send_wr = 16, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 1, .max_recv_sge = 1 } };

	e->cq = cq ? cq : ibv_create_cq(ctx, 1024, NULL, NULL, 0);
	if (!e->cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = e->cq;
	if (!(e->qp = ibv_create_qp(pd, &ia)))
		FAIL("ibv_create_qp: %s", strerror(errno));
	e->buf = calloc(1, BUF);
	if (!(e->mr = ibv_reg_mr(pd, e->buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
		FAIL("ibv_reg_mr: %s", strerror(errno));
}

static void connect_ends(struct end *a, struct end *b)
{
	to_rts(a->qp, b->qp->qp_num);
	to_rts(b->qp, a->qp->qp_num);
}

static void post_recv(struct end *e, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)e->buf, 64, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(e->qp, &wr, &bad);

	if (err)
		FAIL("ibv_post_recv: %s", strerror(err));
}

/* post sends 64 bytes, or writes len bytes at the peer's buffer's middle. */
static void post(struct end *a, struct end *b, uint64_t id, enum ibv_wr_opcode op, uint32_t len)
{
	struct ibv_sge s = { (uintptr_t)a->buf, len, a->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED }, *bad;
	int err;

	wr.wr.rdma.remote_addr = (uintptr_t)b->buf + BUF / 2;
	wr.wr.rdma.rkey = b->mr->rkey;
	if ((err = ibv_post_send(a->qp, &wr, &bad)))
		FAIL("ibv_post_send: %s", strerror(err));
}

static void ok_wc(struct ibv_wc wc, const char *what)
{
	if (wc.status != IBV_WC_SUCCESS)
		FAIL("%s: wr_id %llu: %s", what, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
}

/* ---- each thread an RC pair of its own ---- */

static void *pair_thread(void *arg)
{
	long *count = arg;
	struct end a, b;

	make_end(&a, NULL, NULL);
	make_end(&b, NULL, NULL);
	connect_ends(&a, &b);
	while (!stopped()) {
		post_recv(&b, 1);
		post(&a, &b, 2, IBV_WR_SEND, 64);
		post(&a, &b, 3, IBV_WR_RDMA_WRITE, BUF / 2);
		ok_wc(wait_wc(a.cq, "pair: send"), "pair: send");
		ok_wc(wait_wc(a.cq, "pair: write"), "pair: write");
		ok_wc(wait_wc(b.cq, "pair: receive"), "pair: receive");
		(*count)++;
	}
	return NULL;
}

/* ---- two threads, one receive CQ and one SRQ ---- */

static struct ibv_srq *srq;
static struct ibv_cq *shared_cq;
static long shared_sent, shared_got;

struct shared_arg {
	struct end s, r;
	long sent;
};

static void poll_shared(void)
{
	struct ibv_wc wc[4];
	int i, n = ibv_poll_cq(shared_cq, 4, wc);

	if (n < 0)
		FAIL("shared: ibv_poll_cq: %d", n);
	for (i = 0; i < n; i++)
		ok_wc(wc[i], "shared: receive");
	__atomic_fetch_add(&shared_got, n, __ATOMIC_RELAXED);
}

static void *shared_thread(void *arg)
{
	struct shared_arg *t = arg;
	struct ibv_sge sge = { (uintptr_t)t->r.buf, 64, t->r.mr->lkey };
	struct ibv_recv_wr rw = { .sg_list = &sge, .num_sge = 1 }, *bad;

	while (!stopped()) {
		rw.wr_id = t->sent;
		if (ibv_post_srq_recv(srq, &rw, &bad))
			FAIL("ibv_post_srq_recv");
		post(&t->s, &t->r, 4, IBV_WR_SEND, 64);
		ok_wc(wait_wc(t->s.cq, "shared: send"), "shared: send");
		t->sent++;
		__atomic_fetch_add(&shared_sent, 1, __ATOMIC_RELAXED);
		poll_shared();
	}
	return NULL;
}

/* ---- a completion channel's waiter and a poster ---- */

static struct ibv_comp_channel *chan;
static struct end ch_a, ch_b;
static long ch_sent, ch_got, ch_events;

static void drain_chan_cq(void)
{
	struct ibv_wc wc[8];
	int i, n;

	while ((n = ibv_poll_cq(ch_b.cq, 8, wc)) > 0) {
		for (i = 0; i < n; i++)
			ok_wc(wc[i], "channel: receive");
		__atomic_fetch_add(&ch_got, n, __ATOMIC_RELAXED);
	}
	if (n < 0)
		FAIL("channel: ibv_poll_cq: %d", n);
}

static void *chan_poster(void *arg)
{
	(void)arg;
	while (!stopped()) {
		if (ch_sent - __atomic_load_n(&ch_got, __ATOMIC_RELAXED) >= 8) {
			usleep(100);
			continue;
		}
		post_recv(&ch_b, 5);
		post(&ch_a, &ch_b, 6, IBV_WR_SEND, 64);
		ok_wc(wait_wc(ch_a.cq, "channel: send"), "channel: send");
		__atomic_store_n(&ch_sent, ch_sent + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

static void *chan_waiter(void *arg)
{
	struct pollfd p = { .fd = chan->fd, .events = POLLIN };
	struct ibv_cq *cq;
	void *cq_ctx;

	(void)arg;
	if (ibv_req_notify_cq(ch_b.cq, 0))
		FAIL("ibv_req_notify_cq");
	while (!stopped()) {
		drain_chan_cq();
		if (poll(&p, 1, 50) != 1)
			continue;
		if (ibv_get_cq_event(chan, &cq, &cq_ctx))
			FAIL("ibv_get_cq_event");
		if (cq != ch_b.cq)
			FAIL("channel: an event for another CQ");
		ibv_ack_cq_events(cq, 1);
		ch_events++;
		if (ibv_req_notify_cq(cq, 0))
			FAIL("ibv_req_notify_cq");
	}
	drain_chan_cq();
	return NULL;
}

/* ---- async events while QPs on an SRQ go to error ---- */

static long async_events, errored;

static void *async_reader(void *arg)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	(void)arg;
	while (!stopped() || poll(&p, 1, 0) == 1) {
		if (poll(&p, 1, 50) != 1)
			continue;
		if (ibv_get_async_event(ctx, &ev))
			FAIL("ibv_get_async_event");
		if (ev.event_type != IBV_EVENT_QP_LAST_WQE_REACHED && ev.event_type != IBV_EVENT_QP_ACCESS_ERR)
			FAIL("async: unexpected %s", ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
		async_events++;
	}
	return NULL;
}

/* Each QP goes to error (raising Last WQE Reached, as its receives come
 * from an SRQ) and is destroyed, often before its event is read. */
static void *error_mover(void *arg)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 } };
	struct ibv_srq *s = ibv_create_srq(pd, &sa);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct end e;

	(void)arg;
	if (!s)
		FAIL("ibv_create_srq: %s", strerror(errno));
	make_end(&e, NULL, s);
	if (ibv_destroy_qp(e.qp))
		FAIL("ibv_destroy_qp");
	while (!stopped()) {
		struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = e.cq, .recv_cq = e.cq, .srq = s,
			.cap = { .max_send_wr = 4, .max_send_sge = 1 } };
		struct ibv_qp *qp = ibv_create_qp(pd, &ia);
		struct ibv_wc wc;

		if (!qp)
			FAIL("error: ibv_create_qp: %s", strerror(errno));
		to_rts(qp, qp->qp_num);
		if (errored % 2 == 0) {
			if (ibv_modify_qp(qp, &err, IBV_QP_STATE))
				FAIL("error: to ERR");
		} else {
			/* A write with a bad rkey: the HCA moves the QP to
			 * error. Like mlx5, it leaves ibv_qp's state, which the
			 * program owns, as it was: the program may read it. */
			struct ibv_sge sge = { (uintptr_t)e.buf, 64, e.mr->lkey };
			struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED }, *bad;
			int n;

			wr.wr.rdma.remote_addr = (uintptr_t)e.buf;
			wr.wr.rdma.rkey = e.mr->rkey ^ 0x100;
			if (ibv_post_send(qp, &wr, &bad))
				FAIL("error: ibv_post_send");
			while ((n = ibv_poll_cq(e.cq, 1, &wc)) == 0)
				if (qp->state != IBV_QPS_RTS)
					FAIL("error: the QP's state changed under the program to %d", qp->state);
			/* Flushed if the QP, its own responder, failed first. */
			if (n < 0 || (wc.status != IBV_WC_REM_ACCESS_ERR && wc.status != IBV_WC_WR_FLUSH_ERR))
				FAIL("error: a write with a bad rkey completed with %s", n < 0 ? "a poll error" : ibv_wc_status_str(wc.status));
		}
		if (ibv_destroy_qp(qp))
			FAIL("error: ibv_destroy_qp");
		while (ibv_poll_cq(e.cq, 1, &wc) > 0)
			;
		errored++;
	}
	return NULL;
}

/* ---- making and destroying objects ---- */

/* churn makes and destroys a PD, MR, CQ and QP on c; the QP reaches RTS
 * when rts, which connects c to the daemon. */
static void churn(struct ibv_context *c, int rts)
{
	struct ibv_pd *p = ibv_alloc_pd(c);
	uint8_t *buf = malloc(4096);
	struct ibv_mr *mr = p ? ibv_reg_mr(p, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *qp = p && cq ? ibv_create_qp(p, &ia) : NULL;

	if (!qp || !mr)
		FAIL("churn: making objects: %s", strerror(errno));
	if (rts) {
		struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };

		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			FAIL("churn: to INIT");
	}
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(p))
		FAIL("churn: destroying objects");
	free(buf);
}

static void *churn_thread(void *arg)
{
	long *count = arg;

	while (!stopped()) {
		churn(ctx, 1);
		(*count)++;
	}
	return NULL;
}

/* Contexts of their own, opened and closed: two threads make the first
 * QPs at once (each connects the context to the daemon), a completion
 * channel's event comes, and a message goes through the engine. */
struct fresh {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	pthread_barrier_t *go;
};

static void *fresh_qp(void *arg)
{
	struct fresh *f = arg;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = f->cq, .recv_cq = f->cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 } };

	pthread_barrier_wait(f->go);
	if (!(f->qp = ibv_create_qp(f->pd, &ia)))
		FAIL("context: ibv_create_qp: %s", strerror(errno));
	return NULL;
}

static void *context_thread(void *arg)
{
	long *count = arg;
	struct ibv_device **list;
	pthread_barrier_t go;
	int i, n;

	list = ibv_get_device_list(&n);
	for (i = 0; i < n && strcmp(ibv_get_device_name(list[i]), dev_name); i++)
		;
	if (i == n)
		FAIL("context: no %s", dev_name);
	pthread_barrier_init(&go, NULL, 2);
	while (!stopped()) {
		struct ibv_context *c = ibv_open_device(list[i]);
		struct fresh f[2];
		struct end a, b;
		struct ibv_pd *p;
		struct ibv_cq *cq;
		struct ibv_comp_channel *ch;
		pthread_t t;
		uint8_t *buf = calloc(1, BUF);
		struct ibv_mr *mr;
		void *cq_ctx;
		struct ibv_cq *ev_cq;

		if (!c || !(p = ibv_alloc_pd(c)) || !(ch = ibv_create_comp_channel(c)) ||
		    !(cq = ibv_create_cq(c, 16, NULL, ch, 0)) ||
		    !(mr = ibv_reg_mr(p, buf, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)))
			FAIL("context: making objects: %s", strerror(errno));
		f[0] = f[1] = (struct fresh){ .pd = p, .cq = cq, .go = &go };
		pthread_create(&t, NULL, fresh_qp, &f[1]);
		fresh_qp(&f[0]);
		pthread_join(t, NULL);
		churn(c, 0);
		/* One message through the context's engine, its event, then
		 * close it. */
		to_rts(f[0].qp, f[1].qp->qp_num);
		to_rts(f[1].qp, f[0].qp->qp_num);
		if (ibv_req_notify_cq(cq, 0))
			FAIL("context: ibv_req_notify_cq");
		a = (struct end){ .cq = cq, .qp = f[0].qp, .buf = buf, .mr = mr };
		b = (struct end){ .cq = cq, .qp = f[1].qp, .buf = buf, .mr = mr };
		post(&a, &b, 7, IBV_WR_RDMA_WRITE, 64);
		if (ibv_get_cq_event(ch, &ev_cq, &cq_ctx) || ev_cq != cq)
			FAIL("context: ibv_get_cq_event");
		ibv_ack_cq_events(cq, 1);
		ok_wc(wait_wc(cq, "context: write"), "context: write");
		if (ibv_destroy_qp(f[0].qp) || ibv_destroy_qp(f[1].qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) ||
		    ibv_dealloc_pd(p) || ibv_destroy_comp_channel(ch) || ibv_close_device(c))
			FAIL("context: closing");
		free(buf);
		(*count)++;
	}
	pthread_barrier_destroy(&go);
	ibv_free_device_list(list);
	return NULL;
}

/* ---- queries ---- */

static void *query_thread(void *arg)
{
	long *count = arg;

	while (!stopped()) {
		struct ibv_device_attr da;
		struct ibv_port_attr pa;
		union ibv_gid gid;
		uint16_t pkey;

		if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, 0, &gid) ||
		    ibv_query_pkey(ctx, 1, 0, &pkey))
			FAIL("query");
		if (pa.lid != lid || pa.state != IBV_PORT_ACTIVE)
			FAIL("query: port LID %u state %d", pa.lid, pa.state);
		(*count)++;
	}
	return NULL;
}

/* ---- MADs on umad0 ---- */

/* umad_roundtrip sends an SMP Get NodeInfo to the port's LID and reads
 * its answer. */
static void umad_roundtrip(int fd, uint32_t agent, uint64_t tid)
{
	uint8_t buf[64 + 256];
	struct ib_user_mad *u = (void *)buf;
	uint8_t *mad = buf + 64;
	uint64_t be = htobe64(tid);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	memset(buf, 0, sizeof buf);
	u->hdr.id = agent;
	u->hdr.timeout_ms = 1000;
	u->hdr.lid = htobe16(lid);
	mad[0] = 1, mad[1] = 0x01, mad[2] = 1, mad[3] = 0x01; /* SMP Get */
	memcpy(mad + 8, &be, 8);
	mad[16] = 0x00, mad[17] = 0x11; /* NodeInfo */
	if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
		FAIL("umad: write: %s", strerror(errno));
	if (poll(&p, 1, 10000) != 1)
		FAIL("umad: no answer in 10 s");
	memset(buf, 0, sizeof buf);
	/* The TID's high half is the agent's number, which the kernel puts
	 * there (ib_umad_write): only the low half is ours. */
	if (read(fd, buf, sizeof buf) < 64 + 24 || memcmp(mad + 12, (uint8_t *)&be + 4, 4) || u->hdr.status)
		FAIL("umad: a bad answer (status %d)", u->hdr.status);
}

static void *umad_thread(void *arg)
{
	long *count = arg;
	uint64_t tid = 1;

	while (!stopped()) {
		struct ib_user_mad_reg_req req = { .qpn = 0, .mgmt_class = 0x01, .mgmt_class_version = 1 };
		int fd = open("/dev/infiniband/umad0", O_RDWR | O_NONBLOCK), i;

		if (fd < 0 || ioctl(fd, IB_USER_MAD_ENABLE_PKEY, NULL) || ioctl(fd, IB_USER_MAD_REGISTER_AGENT, &req))
			FAIL("umad: open and register: %s", strerror(errno));
		for (i = 0; i < 10 && !stopped(); i++) {
			umad_roundtrip(fd, req.id, tid++);
			(*count)++;
		}
		close(fd);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct shared_arg sh[2];
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 64, .max_sge = 1 } };
	long pairs[PAIRS] = { 0 }, churned = 0, contexts = 0, queries[2] = { 0 }, mads = 0;
	pthread_t th[32];
	int i, n = 0, secs;

	if (argc < 2)
		FAIL("usage: threads DEVICE [SECONDS]");
	dev_name = argv[1];
	secs = argc > 2 ? atoi(argv[2]) : 3;
	open_device(dev_name);
	if (!(pd = ibv_alloc_pd(ctx)))
		FAIL("ibv_alloc_pd");

	if (!(srq = ibv_create_srq(pd, &sa)) || !(shared_cq = ibv_create_cq(ctx, 1024, NULL, NULL, 0)))
		FAIL("shared: making the SRQ and CQ: %s", strerror(errno));
	for (i = 0; i < 2; i++) {
		sh[i].sent = 0;
		make_end(&sh[i].s, NULL, NULL);
		make_end(&sh[i].r, shared_cq, srq);
		connect_ends(&sh[i].s, &sh[i].r);
	}
	if (!(chan = ibv_create_comp_channel(ctx)))
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	make_end(&ch_a, NULL, NULL);
	make_end(&ch_b, ibv_create_cq(ctx, 1024, NULL, chan, 0), NULL);
	connect_ends(&ch_a, &ch_b);

	for (i = 0; i < PAIRS; i++)
		pthread_create(&th[n++], NULL, pair_thread, &pairs[i]);
	for (i = 0; i < 2; i++)
		pthread_create(&th[n++], NULL, shared_thread, &sh[i]);
	pthread_create(&th[n++], NULL, chan_poster, NULL);
	pthread_create(&th[n++], NULL, chan_waiter, NULL);
	pthread_create(&th[n++], NULL, async_reader, NULL);
	pthread_create(&th[n++], NULL, error_mover, NULL);
	pthread_create(&th[n++], NULL, churn_thread, &churned);
	pthread_create(&th[n++], NULL, context_thread, &contexts);
	for (i = 0; i < 2; i++)
		pthread_create(&th[n++], NULL, query_thread, &queries[i]);
	pthread_create(&th[n++], NULL, umad_thread, &mads);

	sleep(secs);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	/* What was sent to the shared CQ and the channel's all arrives. */
	for (i = 0; i < 10000 && __atomic_load_n(&shared_got, __ATOMIC_RELAXED) < shared_sent; i++) {
		poll_shared();
		usleep(1000);
	}
	drain_chan_cq();

	for (i = 0; i < PAIRS; i++)
		printf("pair %d: %ld round trips\n", i, pairs[i]);
	printf("shared: %ld + %ld sent, %ld received\n", sh[0].sent, sh[1].sent, shared_got);
	printf("channel: %ld sent, %ld received, %ld events\n", ch_sent, ch_got, ch_events);
	printf("async: %ld QPs to error, %ld events\n", errored, async_events);
	printf("churn: %ld rounds, %ld contexts\n", churned, contexts);
	printf("queries: %ld + %ld\n", queries[0], queries[1]);
	printf("umad: %ld round trips\n", mads);
	if (shared_got != shared_sent || ch_got != ch_sent)
		FAIL("receives lost: shared %ld of %ld, channel %ld of %ld", shared_got, shared_sent, ch_got, ch_sent);
	for (i = 0; i < PAIRS; i++)
		if (!pairs[i])
			FAIL("pair %d did nothing", i);
	if (!sh[0].sent || !sh[1].sent || !ch_events || !async_events || !churned || !contexts || !queries[0] || !mads)
		FAIL("a thread did nothing");
	puts("ok threads");
	return 0;
}
