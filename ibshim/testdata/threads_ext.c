/*
 * threads_ext: the verbs APIs threads.c leaves out, from many threads on
 * one mock HCA at once: extended CQs polled by two threads (one CQ left
 * thread-safe, one made single-threaded and locked by the program, as its
 * contract asks), ibv_qp_ex batches (one QP's builder shared by two
 * threads, whose batches are critical sections), memory windows of both
 * types bound and invalidated, device memory copied, registered and
 * reached by RDMA, a region re-registered while another thread's work
 * uses it, and a thread that forks while the others post (not under
 * ThreadSanitizer, below). The errors a
 * mlx5 device gives (EOPNOTSUPP for what it lacks, EBUSY, EINVAL) are
 * asked for on the way. Built with ThreadSanitizer by ibshim/tsan_test.go
 * and run in `nvmock exec`; every thread checks its completions and data,
 * prints its counts, and the program exits 0, or non-zero at the first
 * thing that goes wrong.
 *
 * Usage: threads_ext DEVICE [SECONDS]
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

#define BUF 8192
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ibv_device **devs;
static int dev_index;
static struct ibv_pd *pd;
static int stop;

static int stopped(void) { return __atomic_load_n(&stop, __ATOMIC_ACQUIRE); }

/* Page-aligned and whole pages: ibv_fork_init marks registered memory
 * MADV_DONTFORK, which must not take the heap around it. */
static uint8_t *pages(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n))
		FAIL("posix_memalign");
	memset(p, 0, n);
	return p;
}

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint8_t *buf;
	struct ibv_mr *mr;
};

/* make_end makes an RC QP completing into cq (its own if NULL), with a
 * buffer of BUF bytes registered with access. */
static void make_end(struct end *e, struct ibv_cq *cq, int access)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 32, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64 } };

	e->cq = cq ? cq : ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!e->cq)
		FAIL("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = e->cq;
	if (!(e->qp = ibv_create_qp(pd, &ia)))
		FAIL("ibv_create_qp: %s", strerror(errno));
	e->buf = pages(BUF);
	if (!(e->mr = ibv_reg_mr(pd, e->buf, BUF, access)))
		FAIL("ibv_reg_mr: %s", strerror(errno));
}

static void connect_ends(struct end *a, struct end *b)
{
	to_rts_access(a->qp, b->qp->qp_num, ACCESS);
	to_rts_access(b->qp, a->qp->qp_num, ACCESS);
}

static void post_recv(struct end *e, uint64_t id, uint32_t off)
{
	struct ibv_sge s = { (uintptr_t)e->buf + off, 64, e->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(e->qp, &wr, &bad);

	if (err)
		FAIL("ibv_post_recv: %s", strerror(err));
}

/* post posts one signaled request of op on e's QP: len bytes from
 * (lkey, laddr) to (rkey, raddr). */
static void post(struct end *e, uint64_t id, enum ibv_wr_opcode op, uint32_t lkey, uint64_t laddr, uint32_t len,
		 uint32_t rkey, uint64_t raddr)
{
	struct ibv_sge s = { laddr, len, lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { raddr, rkey } }, *bad;
	int err;

	if ((err = ibv_post_send(e->qp, &wr, &bad)))
		FAIL("ibv_post_send: %s", strerror(err));
}

/* The next completion of cq, which must be wr_id's, successful, of op. */
static void expect(struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_opcode op, const char *what)
{
	struct ibv_wc wc = wait_wc(cq, what);

	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id || wc.opcode != op)
		FAIL("%s: wr_id %llu (want %llu) opcode %d (want %d): %s", what, (unsigned long long)wc.wr_id,
		     (unsigned long long)wr_id, wc.opcode, op, ibv_wc_status_str(wc.status));
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 31 + i * 7);
}

/* ---- extended CQs: two posters each, both polling ---- */

#define XPOSTERS 4

struct xcq {
	struct ibv_cq_ex *cq;
	pthread_mutex_t lock; /* the program's, for a single-threaded CQ */
	bool single;
};

static struct xcq xcqs[2];

struct xposter {
	struct xcq *x;
	struct end s, r;
	long sent, seen; /* seen: receives of its taken by either poller */
};

static struct xposter xposters[XPOSTERS];

static uint64_t wall_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* One receive off an extended CQ, whoever's it is: checked, then counted
 * for its poster. */
static void xcheck(struct ibv_cq_ex *cq)
{
	uint64_t tag = cq->wr_id, got, now = wall_ns(), wall;
	struct xposter *p;
	long seq = (long)(uint32_t)tag;
	int who = (int)(tag >> 32) - 1;

	if (cq->status != IBV_WC_SUCCESS)
		FAIL("cq_ex: wr_id %#llx: %s", (unsigned long long)tag, ibv_wc_status_str(cq->status));
	if (who < 0 || who >= XPOSTERS)
		FAIL("cq_ex: a completion of no poster's (wr_id %#llx)", (unsigned long long)tag);
	p = &xposters[who];
	if (ibv_wc_read_opcode(cq) != IBV_WC_RECV || ibv_wc_read_byte_len(cq) != 64 ||
	    ibv_wc_read_qp_num(cq) != p->r.qp->qp_num)
		FAIL("cq_ex: opcode %d, %u bytes, QP %#x", ibv_wc_read_opcode(cq), ibv_wc_read_byte_len(cq),
		     ibv_wc_read_qp_num(cq));
	wall = ibv_wc_read_completion_wallclock_ns(cq);
	if (!ibv_wc_read_completion_ts(cq) || wall > now || now - wall > 60000000000ULL)
		FAIL("cq_ex: completion times %llu ticks, %llu ns (now %llu)",
		     (unsigned long long)ibv_wc_read_completion_ts(cq), (unsigned long long)wall, (unsigned long long)now);
	memcpy(&got, p->r.buf, 8);
	if (got != tag)
		FAIL("cq_ex: poster %d's receive %ld holds %#llx", who, seq, (unsigned long long)got);
	if (seq != __atomic_load_n(&p->seen, __ATOMIC_RELAXED))
		FAIL("cq_ex: poster %d's receive %ld came when %ld was due", who, seq, p->seen);
	__atomic_store_n(&p->seen, seq + 1, __ATOMIC_RELEASE);
}

/* Polls x once: start_poll .. end_poll, under the program's lock if the
 * CQ was made single-threaded. */
static void xpoll(struct xcq *x)
{
	struct ibv_poll_cq_attr attr = { 0 };
	int err;

	if (x->single)
		pthread_mutex_lock(&x->lock);
	err = ibv_start_poll(x->cq, &attr);
	if (!err) {
		do
			xcheck(x->cq);
		while (!(err = ibv_next_poll(x->cq)));
		ibv_end_poll(x->cq);
	}
	if (x->single)
		pthread_mutex_unlock(&x->lock);
	if (err != ENOENT)
		FAIL("cq_ex: poll: %s", strerror(err));
}

static void *xposter_thread(void *arg)
{
	struct xposter *p = arg;
	uint64_t id = (uint64_t)(p - xposters) + 1;
	int i;

	while (!stopped()) {
		uint64_t tag = id << 32 | (uint32_t)p->sent;

		memcpy(p->s.buf, &tag, 8);
		post_recv(&p->r, tag, 0);
		post(&p->s, tag, IBV_WR_SEND, p->s.mr->lkey, (uintptr_t)p->s.buf, 64, 0, 0);
		expect(p->s.cq, tag, IBV_WC_SEND, "cq_ex: send");
		/* Either poller may take it: wait until one has. */
		for (i = 0; __atomic_load_n(&p->seen, __ATOMIC_ACQUIRE) <= p->sent; i++) {
			if (i == 100000)
				FAIL("cq_ex: receive %ld not seen in 10 s", p->sent);
			xpoll(p->x);
			usleep(100);
		}
		p->sent++;
	}
	return NULL;
}

static void make_xcq(struct xcq *x, bool single)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = 64,
		.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
			    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS, .flags = single ? IBV_CREATE_CQ_ATTR_SINGLE_THREADED : 0 };

	if (!(x->cq = ibv_create_cq_ex(ctx, &ca)))
		FAIL("ibv_create_cq_ex: %s", strerror(errno));
	x->single = single;
	pthread_mutex_init(&x->lock, NULL);
}

/* ---- ibv_qp_ex batches: one QP of its own, one shared by two ---- */

struct qx {
	struct end a, b;
	struct ibv_qp_ex *x;
	long done[2]; /* completions per sharer, whoever polled them */
};

static struct qx qxs[2];

struct qx_arg {
	struct qx *q;
	int slot;
	long batches, aborted, refused;
};

/* Takes what a's CQ holds, counting each for the sharer its wr_id names
 * (slot in bit 8, the request's number in the batch below). */
static void qx_drain(struct qx *q)
{
	struct ibv_wc wc[8];
	int i, n = ibv_poll_cq(q->a.cq, 8, wc);

	if (n < 0)
		FAIL("qp_ex: ibv_poll_cq: %d", n);
	for (i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			FAIL("qp_ex: wr_id %#llx: %s", (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
		__atomic_fetch_add(&q->done[wc[i].wr_id >> 8 & 1], 1, __ATOMIC_ACQ_REL);
	}
}

/* EOPNOTSUPP, as mlx5 gives it, for send operations an RC QP has not. */
static void qx_refused(void)
{
	struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_RC, .send_cq = qxs[0].a.cq, .recv_cq = qxs[0].a.cq, .pd = pd,
		.cap = { .max_send_wr = 4, .max_send_sge = 1 }, .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO };
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);

	if (qp || errno != EOPNOTSUPP)
		FAIL("qp_ex: TSO on RC: %s, want EOPNOTSUPP", qp ? "made" : strerror(errno));
}

static void *qx_thread(void *arg)
{
	struct qx_arg *t = arg;
	struct qx *q = t->q;
	struct ibv_qp_ex *x = q->x;
	uint32_t off = (uint32_t)t->slot * 2048; /* the sharer's part of each buffer */
	uint8_t *src = q->a.buf + off, *back = q->a.buf + off + 1024, *dst = q->b.buf + off;
	long want = 0;
	int i, err;

	while (!stopped()) {
		uint8_t inl[32];
		uint64_t base = (uint64_t)t->slot << 8;

		fill(src, 256, (uint64_t)t->batches);
		fill(inl, sizeof(inl), (uint64_t)t->batches + 1);
		memset(back, 0, 256);
		ibv_wr_start(x);
		x->wr_id = base | 1;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, q->b.mr->rkey, (uintptr_t)dst);
		ibv_wr_set_sge(x, q->a.mr->lkey, (uintptr_t)src, 256);
		x->wr_id = base | 2;
		x->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_rdma_write(x, q->b.mr->rkey, (uintptr_t)dst + 256);
		ibv_wr_set_inline_data(x, inl, sizeof(inl));
		/* Reads after writes on one QP see them. */
		x->wr_id = base | 3;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_read(x, q->b.mr->rkey, (uintptr_t)dst);
		ibv_wr_set_sge(x, q->a.mr->lkey, (uintptr_t)back, 256 + sizeof(inl));
		if ((err = ibv_wr_complete(x)))
			FAIL("qp_ex: ibv_wr_complete: %s", strerror(err));
		want += 3;
		for (i = 0; __atomic_load_n(&q->done[t->slot], __ATOMIC_ACQUIRE) < want; i++) {
			if (i == 100000)
				FAIL("qp_ex: batch %ld not complete in 10 s", t->batches);
			qx_drain(q);
			usleep(100);
		}
		if (memcmp(back, src, 256) || memcmp(back + 256, inl, sizeof(inl)))
			FAIL("qp_ex: batch %ld read back other data", t->batches);
		t->batches++;
		if (t->batches % 16 == 0) {
			/* A batch dropped: nothing of it is posted. */
			ibv_wr_start(x);
			x->wr_id = base | 4;
			x->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(x);
			ibv_wr_set_sge(x, q->a.mr->lkey, (uintptr_t)src, 64);
			ibv_wr_abort(x);
			t->aborted++;
			qx_refused();
			t->refused++;
		}
	}
	return NULL;
}

static void make_qx(struct qx *q)
{
	struct ibv_qp_init_attr_ex ia = { .qp_type = IBV_QPT_RC, .pd = pd,
		.cap = { .max_send_wr = 32, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 1, .max_inline_data = 64 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ };
	struct ibv_qp *qp;

	make_end(&q->b, NULL, ACCESS);
	if (!(q->a.cq = ibv_create_cq(ctx, 256, NULL, NULL, 0)))
		FAIL("ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = q->a.cq;
	if (!(qp = ibv_create_qp_ex(ctx, &ia)) || !(q->x = ibv_qp_to_qp_ex(qp)))
		FAIL("ibv_create_qp_ex: %s", strerror(errno));
	q->a.qp = qp;
	q->a.buf = pages(BUF);
	if (!(q->a.mr = ibv_reg_mr(pd, q->a.buf, BUF, ACCESS)))
		FAIL("ibv_reg_mr: %s", strerror(errno));
	connect_ends(&q->a, &q->b);
}

/* ---- memory windows, bound and invalidated while the others run ---- */

static long mw_rounds;

/* a writes 64 bytes of seed through rkey at raddr, which is at b's buffer's
 * off: they must arrive. */
static void write_through(struct end *a, struct end *b, uint32_t rkey, uint64_t raddr, uint32_t off, uint64_t seed)
{
	fill(a->buf, 64, seed);
	post(a, seed, IBV_WR_RDMA_WRITE, a->mr->lkey, (uintptr_t)a->buf, 64, rkey, raddr);
	expect(a->cq, seed, IBV_WC_RDMA_WRITE, "mw: a write through a window");
	if (memcmp(b->buf + off, a->buf, 64))
		FAIL("mw: a write through a window left other data");
}

/* A type 1 bind the queue reaches later, in the engine: posted behind a
 * send that waits out b's RNR timer, then left alone, the thread making
 * no verbs call until it is done. */
static void deferred_bind(struct end *a, struct end *b, struct ibv_mw *w)
{
	struct ibv_mw_bind mb = { .wr_id = 7, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { b->mr, (uintptr_t)b->buf + 2048, 1024, IBV_ACCESS_REMOTE_WRITE } };
	int err;

	post(a, 6, IBV_WR_SEND, a->mr->lkey, (uintptr_t)a->buf, 64, 0, 0);
	usleep(3000); /* its RNR NAK is back */
	post_recv(b, 8, 4096);
	if ((err = ibv_bind_mw(a->qp, w, &mb)))
		FAIL("mw: a bind behind a send: %s", strerror(err));
	usleep(30000);
	expect(a->cq, 6, IBV_WC_SEND, "mw: a send waiting out an RNR");
	expect(a->cq, 7, IBV_WC_BIND_MW, "mw: a bind behind it");
	expect(b->cq, 8, IBV_WC_RECV, "mw: the send's receive");
	write_through(a, b, w->rkey, (uintptr_t)b->buf + 2048, 2048, 99);
}

static void *mw_thread(void *arg)
{
	struct end a, b;
	struct ibv_mw *w1 = NULL, *w2 = NULL;
	int err;

	(void)arg;
	make_end(&a, NULL, ACCESS);
	make_end(&b, NULL, ACCESS | IBV_ACCESS_MW_BIND);
	connect_ends(&a, &b);
	/* b asks for 10 ms before a send it had no receive for comes again. */
	if (ibv_modify_qp(b.qp, &(struct ibv_qp_attr){ .min_rnr_timer = 20 }, IBV_QP_MIN_RNR_TIMER))
		FAIL("mw: b's RNR timer");
	while (!stopped()) {
		uint64_t n = (uint64_t)mw_rounds;
		struct ibv_mw_bind mb = { .wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
			.bind_info = { b.mr, (uintptr_t)b.buf, 1024, IBV_ACCESS_REMOTE_WRITE } };
		struct ibv_send_wr wr = { .wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad;
		uint32_t k2;

		if (n % 16 == 0) {
			if ((w1 && ibv_dealloc_mw(w1)) || (w2 && ibv_dealloc_mw(w2)))
				FAIL("mw: ibv_dealloc_mw");
			if (!(w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1)) || !(w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2)))
				FAIL("mw: ibv_alloc_mw: %s", strerror(errno));
		}
		/* Type 1, bound through a's QP, used by a. */
		if ((err = ibv_bind_mw(a.qp, w1, &mb)))
			FAIL("mw: ibv_bind_mw: %s", strerror(err));
		expect(a.cq, 1, IBV_WC_BIND_MW, "mw: type 1 bind");
		write_through(&a, &b, w1->rkey, (uintptr_t)b.buf + 128, 128, n * 2);

		if (n % 8 == 4)
			deferred_bind(&a, &b, w1);

		/* Type 2, bound through b's QP: a's requests reach it. */
		/* The key's index is the window's; its tag, the program's. */
		k2 = (w2->rkey & ~0xffu) | (uint32_t)(n & 0xff);
		wr.bind_mw.mw = w2;
		wr.bind_mw.rkey = k2;
		wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ b.mr, (uintptr_t)b.buf + 1024, 1024, IBV_ACCESS_REMOTE_WRITE };
		if ((err = ibv_post_send(b.qp, &wr, &bad)))
			FAIL("mw: post a type 2 bind: %s", strerror(err));
		expect(b.cq, 2, IBV_WC_BIND_MW, "mw: type 2 bind");
		write_through(&a, &b, k2, (uintptr_t)b.buf + 1024, 1024, n * 2 + 1);
		if (n % 2) {
			struct ibv_send_wr inv = { .wr_id = 3, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				.invalidate_rkey = k2 };

			if ((err = ibv_post_send(b.qp, &inv, &bad)))
				FAIL("mw: post a local invalidate: %s", strerror(err));
			expect(b.cq, 3, IBV_WC_LOCAL_INV, "mw: local invalidate");
		} else {
			struct ibv_sge s = { (uintptr_t)a.buf, 64, a.mr->lkey };
			struct ibv_send_wr si = { .wr_id = 4, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				.send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = k2 };
			struct ibv_wc wc;

			post_recv(&b, 5, 4096);
			if ((err = ibv_post_send(a.qp, &si, &bad)))
				FAIL("mw: post a send with invalidate: %s", strerror(err));
			expect(a.cq, 4, IBV_WC_SEND, "mw: send with invalidate");
			wc = wait_wc(b.cq, "mw: a receive with invalidate");
			if (wc.status != IBV_WC_SUCCESS || !(wc.wc_flags & IBV_WC_WITH_INV) || wc.invalidated_rkey != k2)
				FAIL("mw: a receive with invalidate: %s, flags %#x, rkey %#x (want %#x)",
				     ibv_wc_status_str(wc.status), wc.wc_flags, wc.invalidated_rkey, k2);
		}
		/* A window's KLM takes 2 GiB on mlx5. */
		wr.bind_mw.bind_info.length = (1ULL << 31) + 4096;
		if ((err = ibv_post_send(b.qp, &wr, &bad)) != EOPNOTSUPP)
			FAIL("mw: a bind of over 2 GiB: %s, want EOPNOTSUPP", strerror(err));
		__atomic_store_n(&mw_rounds, mw_rounds + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* ---- device memory: copied, registered, and reached by RDMA ---- */

#define DM_LEN 4096

static struct ibv_dm *shared_dm; /* each DM thread copies to its half */

struct dm_arg {
	int id;
	long rounds;
};

static void *dm_thread(void *arg)
{
	struct dm_arg *t = arg;
	struct end a, b;
	struct ibv_dm *dm = NULL;
	uint8_t want[DM_LEN], got[DM_LEN];
	const int access = IBV_ACCESS_ZERO_BASED | ACCESS;
	int err;

	make_end(&a, NULL, ACCESS);
	make_end(&b, NULL, ACCESS);
	connect_ends(&a, &b);
	while (!stopped()) {
		struct ibv_alloc_dm_attr da = { .length = DM_LEN };
		struct ibv_mr *mr;
		uint64_t seed = (uint64_t)t->id << 32 | (uint64_t)t->rounds;

		if (!dm && !(dm = ibv_alloc_dm(ctx, &da)))
			FAIL("dm: ibv_alloc_dm: %s", strerror(errno));
		fill(want, DM_LEN, seed);
		if ((err = ibv_memcpy_to_dm(dm, 0, want, DM_LEN)))
			FAIL("dm: ibv_memcpy_to_dm: %s", strerror(err));
		if (!(mr = ibv_reg_dm_mr(pd, dm, 0, DM_LEN, access)))
			FAIL("dm: ibv_reg_dm_mr: %s", strerror(errno));
		/* The peer writes into it (zero-based), and reads from it. */
		fill(b.buf, 512, seed + 1);
		post(&b, 1, IBV_WR_RDMA_WRITE, b.mr->lkey, (uintptr_t)b.buf, 512, mr->rkey, 1024);
		expect(b.cq, 1, IBV_WC_RDMA_WRITE, "dm: a write into it");
		memcpy(want + 1024, b.buf, 512);
		post(&b, 2, IBV_WR_RDMA_READ, b.mr->lkey, (uintptr_t)b.buf + 4096, 2048, mr->rkey, 0);
		expect(b.cq, 2, IBV_WC_RDMA_READ, "dm: a read from it");
		if (memcmp(b.buf + 4096, want, 2048))
			FAIL("dm: a read from it got other data");
		/* Its region as a local source. */
		post(&a, 3, IBV_WR_RDMA_WRITE, mr->lkey, 2048, 256, b.mr->rkey, (uintptr_t)b.buf + 6144);
		expect(a.cq, 3, IBV_WC_RDMA_WRITE, "dm: a write from it");
		if (memcmp(b.buf + 6144, want + 2048, 256))
			FAIL("dm: a write from it sent other data");
		if ((err = ibv_memcpy_from_dm(got, dm, 0, DM_LEN)))
			FAIL("dm: ibv_memcpy_from_dm: %s", strerror(err));
		if (memcmp(got, want, DM_LEN))
			FAIL("dm: its copy out differs");
		/* Its own half of the shared memory, copied in and out while
		 * the other thread copies the other half. */
		fill(want, DM_LEN / 2, seed + 2);
		if ((err = ibv_memcpy_to_dm(shared_dm, (uint64_t)t->id * DM_LEN / 2, want, DM_LEN / 2)) ||
		    (err = ibv_memcpy_from_dm(got, shared_dm, (uint64_t)t->id * DM_LEN / 2, DM_LEN / 2)))
			FAIL("dm: the shared memory: %s", strerror(err));
		if (memcmp(got, want, DM_LEN / 2))
			FAIL("dm: the shared memory's half differs");
		/* Neither a device memory region's rereg nor a held memory's
		 * free. */
		if (!ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, access))
			FAIL("dm: ibv_rereg_mr of a device memory region worked");
		if (t->rounds % 8 == 7) {
			if ((err = ibv_free_dm(dm)) != EBUSY)
				FAIL("dm: freed under a region: %s, want EBUSY", strerror(err));
		}
		if (ibv_dereg_mr(mr))
			FAIL("dm: ibv_dereg_mr");
		if (t->rounds % 8 == 7) {
			if ((err = ibv_free_dm(dm)))
				FAIL("dm: ibv_free_dm: %s", strerror(err));
			dm = NULL;
		}
		t->rounds++;
	}
	if (dm && ibv_free_dm(dm))
		FAIL("dm: ibv_free_dm");
	return NULL;
}

/* ---- a region re-registered while another thread's work uses it ---- */

static struct ibv_mr *rr_mr;
static uint8_t *rr_buf;
static long rereg_rounds, rr_writes;

/* Changes the region's access (keeping what the user needs) and its
 * translation (to the same pages), as a pinning cache does. */
static void *rereg_thread(void *arg)
{
	(void)arg;
	while (!stopped()) {
		int flags = rereg_rounds % 2 ? IBV_REREG_MR_CHANGE_ACCESS
					     : IBV_REREG_MR_CHANGE_ACCESS | IBV_REREG_MR_CHANGE_TRANSLATION;
		int access = rereg_rounds % 4 < 2 ? ACCESS : ACCESS | IBV_ACCESS_REMOTE_ATOMIC;
		int err = ibv_rereg_mr(rr_mr, flags, NULL, rr_buf, BUF, access);

		if (err)
			FAIL("rereg: ibv_rereg_mr: %d (%s)", err, strerror(errno));
		rereg_rounds++;
		usleep(500);
	}
	return NULL;
}

/* Writes from the region and into it, by its keys, which stay. */
static void *rr_user(void *arg)
{
	struct end a, b;

	(void)arg;
	make_end(&a, NULL, ACCESS);
	make_end(&b, NULL, ACCESS);
	connect_ends(&a, &b);
	while (!stopped()) {
		uint64_t n = (uint64_t)rr_writes;

		fill(rr_buf, 1024, n);
		post(&a, 1, IBV_WR_RDMA_WRITE, rr_mr->lkey, (uintptr_t)rr_buf, 1024, b.mr->rkey, (uintptr_t)b.buf);
		expect(a.cq, 1, IBV_WC_RDMA_WRITE, "rereg: a write from the region");
		if (memcmp(b.buf, rr_buf, 1024))
			FAIL("rereg: a write from the region sent other data");
		fill(b.buf + 4096, 1024, n + 1);
		post(&b, 2, IBV_WR_RDMA_WRITE, b.mr->lkey, (uintptr_t)b.buf + 4096, 1024, rr_mr->rkey, (uintptr_t)rr_buf + 4096);
		expect(b.cq, 2, IBV_WC_RDMA_WRITE, "rereg: a write into the region");
		if (memcmp(rr_buf + 4096, b.buf + 4096, 1024))
			FAIL("rereg: a write into the region left other data");
		__atomic_store_n(&rr_writes, rr_writes + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/* ---- fork while the others post ---- */

/* Not under ThreadSanitizer: it disables itself in the child of a
 * multithreaded fork and can still deadlock there (its author, in
 * llvm-project pull request 96600); a child here once hung inside fork.
 * The normal build forks. */
#if defined(__SANITIZE_THREAD__)
#define FORKS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FORKS 0
#endif
#endif
#ifndef FORKS
#define FORKS 1
#endif

static long forks;

/* The child (one thread: no engine may start in it) opens a context of
 * its own, queries it, makes and drops a PD, and closes it and its
 * parent's. It must not use its parent's objects (ibv_fork_init(3)), nor
 * register memory: libibverbs' lock for ibv_fork_init's page ranges,
 * which other threads' ibv_reg_mr and ibv_rereg_mr take, has no fork
 * handler, and a child forked while one held it waits for ever (seen
 * here with Debian's libibverbs 44, as it would be on any device). */
static void child(void)
{
	struct ibv_context *c = ibv_open_device(devs[dev_index]);
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct ibv_pd *p;

	alarm(20);
	if (!c || ibv_query_device(c, &da) || ibv_query_port(c, 1, &pa) || pa.lid != lid || !(p = ibv_alloc_pd(c)) ||
	    ibv_dealloc_pd(p) || ibv_close_device(c))
		_exit(2);
	_exit(ibv_close_device(ctx) ? 3 : 0);
}

static void *fork_thread(void *arg)
{
	(void)arg;
	while (!stopped()) {
		int st, i;
		pid_t pid = fork();

		if (pid < 0)
			FAIL("fork: %s", strerror(errno));
		if (pid == 0)
			child();
		for (i = 0; waitpid(pid, &st, WNOHANG) == 0; i++) {
			if (i == 30000)
				FAIL("fork: child %d not done in 30 s", pid);
			usleep(1000);
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			FAIL("fork: the child %s %d", WIFEXITED(st) ? "exited" : "died of signal",
			     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
		__atomic_store_n(&forks, forks + 1, __ATOMIC_RELAXED);
		usleep(20000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct ibv_alloc_dm_attr da = { .length = DM_LEN };
	struct ibv_cq_init_attr_ex bad_ca = { .cqe = 4, .wc_flags = 1ULL << 40 };
	struct qx_arg qa[3] = { { .q = &qxs[0] }, { .q = &qxs[1] }, { .q = &qxs[1], .slot = 1 } };
	struct dm_arg dm[2] = { { .id = 0 }, { .id = 1 } };
	pthread_t th[32];
	int i, n = 0, secs, fork_init, nd;

	if (argc < 2)
		FAIL("usage: threads_ext DEVICE [SECONDS]");
	secs = argc > 2 ? atoi(argv[2]) : 3;
	/* Before any region, as ibv_fork_init(3) asks. */
	fork_init = ibv_fork_init();
	if (fork_init)
		FAIL("ibv_fork_init: %s", strerror(fork_init));
	open_device(argv[1]);
	devs = ibv_get_device_list(&nd);
	for (dev_index = 0; dev_index < nd && strcmp(ibv_get_device_name(devs[dev_index]), argv[1]); dev_index++)
		;
	if (dev_index == nd || !(pd = ibv_alloc_pd(ctx)))
		FAIL("no %s, or no PD", argv[1]);
	{
		struct ibv_cq_ex *x = ibv_create_cq_ex(ctx, &bad_ca);

		if (x || errno != EOPNOTSUPP)
			FAIL("ibv_create_cq_ex with unknown fields: %s, want EOPNOTSUPP", x ? "made" : strerror(errno));
	}

	for (i = 0; i < 2; i++)
		make_xcq(&xcqs[i], i == 1);
	for (i = 0; i < XPOSTERS; i++) {
		xposters[i].x = &xcqs[i / 2];
		make_end(&xposters[i].s, NULL, ACCESS);
		make_end(&xposters[i].r, ibv_cq_ex_to_cq(xposters[i].x->cq), ACCESS);
		connect_ends(&xposters[i].s, &xposters[i].r);
	}
	for (i = 0; i < 2; i++)
		make_qx(&qxs[i]);
	if (!(shared_dm = ibv_alloc_dm(ctx, &da)))
		FAIL("ibv_alloc_dm: %s", strerror(errno));
	rr_buf = pages(BUF);
	if (!(rr_mr = ibv_reg_mr(pd, rr_buf, BUF, ACCESS)))
		FAIL("ibv_reg_mr: %s", strerror(errno));

	for (i = 0; i < XPOSTERS; i++)
		pthread_create(&th[n++], NULL, xposter_thread, &xposters[i]);
	for (i = 0; i < 3; i++)
		pthread_create(&th[n++], NULL, qx_thread, &qa[i]);
	pthread_create(&th[n++], NULL, mw_thread, NULL);
	for (i = 0; i < 2; i++)
		pthread_create(&th[n++], NULL, dm_thread, &dm[i]);
	pthread_create(&th[n++], NULL, rereg_thread, NULL);
	pthread_create(&th[n++], NULL, rr_user, NULL);
	if (FORKS)
		pthread_create(&th[n++], NULL, fork_thread, NULL);

	sleep(secs);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (i = 0; i < n; i++)
		pthread_join(th[i], NULL);

	printf("fork support: %d (0 none, 1 ibv_fork_init's, 2 the kernel's)\n", ibv_is_fork_initialized());
	for (i = 0; i < XPOSTERS; i++)
		printf("cq_ex %s: poster %d: %ld sent, %ld seen\n", xcqs[i / 2].single ? "single-threaded" : "shared", i,
		       xposters[i].sent, xposters[i].seen);
	for (i = 0; i < 3; i++)
		printf("qp_ex %d slot %d: %ld batches, %ld aborted, %ld refused\n", (int)(qa[i].q - qxs), qa[i].slot,
		       qa[i].batches, qa[i].aborted, qa[i].refused);
	printf("mw: %ld rounds\n", mw_rounds);
	printf("dm: %ld + %ld rounds\n", dm[0].rounds, dm[1].rounds);
	printf("rereg: %ld changes under %ld writes each way\n", rereg_rounds, rr_writes);
	printf("fork: %ld children\n", forks);
	for (i = 0; i < XPOSTERS; i++)
		if (!xposters[i].sent || xposters[i].seen != xposters[i].sent)
			FAIL("cq_ex poster %d: %ld sent, %ld seen", i, xposters[i].sent, xposters[i].seen);
	for (i = 0; i < 3; i++)
		if (!qa[i].batches)
			FAIL("qp_ex thread %d did nothing", i);
	if (!mw_rounds || !dm[0].rounds || !dm[1].rounds || !rereg_rounds || !rr_writes || (FORKS && !forks))
		FAIL("a thread did nothing");
	puts("ok threads_ext");
	return 0;
}
