//go:build ignore

/* Posting work requests: ibv_post_send and ibv_post_recv, and the ibv_qp_ex builder (datapath.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "datapath.h"

/* ---- posting ---- */

static int post_one(struct nvmock_qp *qp, struct ibv_send_wr *wr)
{
	struct swqe *w;
	uint32_t total = 0;
	int i;

	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_RDMA_READ:
		break;
	case IBV_WR_SEND_WITH_INV:
	case IBV_WR_LOCAL_INV:
		/* Memory windows (mw.c): on RC and UC QPs here. */
		if (qp->ud || qp->xrc)
			return EINVAL;
		break;
	case IBV_WR_BIND_MW:
		if (qp->ud || qp->xrc || !wr->bind_mw.mw || wr->bind_mw.mw->context != qp->vqp.qp.context)
			return EINVAL;
		if (wr->bind_mw.bind_info.length > 1UL << 31)
			return EOPNOTSUPP; /* mlx5: a window's KLM takes 2 GiB */
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		/* A misaligned target is posted, as mlx5 does: the responder
		 * refuses it. */
		if (wr->num_sge != 1 || wr->sg_list[0].length != 8)
			return EINVAL;
		break;
	default:
		return EINVAL;
	}
	/* UC sends and writes; mlx5 would post a read or an atomic, whose fate
	 * on the wire is not known here, so the mock refuses it. */
	if (qp->uc && (wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		       wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD))
		return EINVAL;
	if (qp->tgt)
		return EINVAL; /* a target has no send queue */
	/* A datagram: a send to an address handle, of at most the MTU. */
	if (qp->ud && (!wr->wr.ud.ah || wr->wr.ud.ah->context != qp->vqp.qp.context ||
		       (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM)))
		return EINVAL;
	/* mlx5 (qp.c): more gather entries, or more inline data, than the
	 * QP was made for do not fit its work queue entries: ENOMEM. */
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_send_sge)
		return ENOMEM;
	for (i = 0; i < wr->num_sge && wr->opcode != IBV_WR_BIND_MW && wr->opcode != IBV_WR_LOCAL_INV; i++) {
		if (wr->sg_list[i].length > UINT32_MAX - total)
			return EINVAL;
		total += wr->sg_list[i].length;
	}
	if (total > (qp->ud ? 4096u : 0x40000000u)) /* the port's MTU, or max_msg_sz */
		return EINVAL;
	if ((wr->send_flags & IBV_SEND_INLINE) && total > qp->max_inline)
		return ENOMEM;
	if ((wr->send_flags & IBV_SEND_INLINE) && (wr->opcode == IBV_WR_RDMA_READ ||
						  wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD))
		return EINVAL;
	if (qp->sq_tail - qp->sq_head == qp->sq_size)
		return ENOMEM;
	w = &qp->sq[qp->sq_tail % qp->sq_size];
	*w = (struct swqe){
		.wr_id = wr->wr_id, .opcode = wr->opcode, .total = total, .nsge = wr->num_sge, .imm = wr->imm_data,
		.signaled = qp->sig_all || (wr->send_flags & IBV_SEND_SIGNALED),
		.solicited = (wr->send_flags & IBV_SEND_SOLICITED) != 0,
		.sge = &qp->sq_sge[(size_t)(qp->sq_tail % qp->sq_size) * qp->max_send_sge],
		.srqn = qp->xrc ? wr->qp_type.xrc.remote_srqn : 0,
	};
	if (wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV)
		qp->local_run++;
	else {
		w->gap = qp->local_run;
		qp->local_run = 0;
	}
	if (wr->opcode == IBV_WR_BIND_MW) {
		w->nsge = 0;
		w->mw_handle = wr->bind_mw.mw->handle;
		w->rkey = wr->bind_mw.rkey;
		w->bind = wr->bind_mw.bind_info;
		w->bind_lkey = w->bind.mr ? w->bind.mr->lkey : 0;
		w->bind.mr = NULL;
		qp->sq_tail++;
		return 0;
	}
	if (wr->opcode == IBV_WR_LOCAL_INV) {
		w->nsge = 0;
		w->rkey = wr->invalidate_rkey;
		qp->sq_tail++;
		return 0;
	}
	memcpy(w->sge, wr->sg_list, sizeof(*w->sge) * wr->num_sge);
	if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w->raddr = wr->wr.atomic.remote_addr;
		w->rkey = wr->wr.atomic.rkey;
		w->atomic[0] = wr->wr.atomic.compare_add;
		w->atomic[1] = wr->wr.atomic.swap;
	} else if (qp->ud) {
		struct nvmock_ah *ah = container_of(wr->wr.ud.ah, struct nvmock_ah, ah);

		w->ud_dlid = ah->attr.dlid;
		w->ud_grh = ah->attr.is_global;
		if (ah->attr.dlid >= 0xc000 && ah->attr.is_global)
			memcpy(w->ud_dgid, ah->attr.grh.dgid.raw, 16);
		else
			memset(w->ud_dgid, 0, 16);
		w->ud_qpn = wr->wr.ud.remote_qpn;
		/* A Q_Key with its high bit set means the QP's own (IBA 10.2.5). */
		w->ud_qkey = wr->wr.ud.remote_qkey & 0x80000000u ? qp->qkey : wr->wr.ud.remote_qkey;
	} else {
		w->raddr = wr->wr.rdma.remote_addr;
		w->rkey = wr->wr.rdma.rkey;
	}
	if ((wr->send_flags & IBV_SEND_INLINE) && total) {
		uint32_t off = 0;

		w->inl = &qp->sq_inl[(size_t)(qp->sq_tail % qp->sq_size) * qp->max_inline];
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(w->inl + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
			off += wr->sg_list[i].length;
		}
	}
	qp->sq_tail++;
	return 0;
}

/* Posts a list of work requests: up to the first bad one, or (whole)
 * none of them if one is bad. */
int post_send_locked(struct nvmock_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad, bool whole)
{
	uint32_t tail = qp->sq_tail, run = qp->local_run;
	struct ibv_send_wr *first = wr;
	int err = 0;

	/* mlx5 takes sends from RTS on, until a RESET (its SQ's gather limit
	 * is -1 before: every post is ENOMEM); in ERR they flush. */
	if (!qp->sq_open || qp->state == IBV_QPS_SQD) {
		trace("QP %#x: post_send in state %d", qp->vqp.qp.qp_num, qp->state);
		*bad = wr;
		return qp->state == IBV_QPS_SQD ? EINVAL : ENOMEM;
	}
	if (whole) {
		for (; wr && !err; wr = wr->next)
			err = post_one(qp, wr);
		qp->sq_tail = tail; /* checked: now post for real, or not at all */
		qp->local_run = run;
		if (err) {
			trace("QP %#x: post_send: %s (%u of %u sends outstanding)", qp->vqp.qp.qp_num, strerror(err),
			      qp->sq_tail - qp->sq_head, qp->sq_size);
			*bad = first;
			return err;
		}
		wr = first;
	}
	for (; wr; wr = wr->next) {
		err = post_one(qp, wr);
		if (err) {
			trace("QP %#x: post_send: %s (%u of %u sends outstanding)", qp->vqp.qp.qp_num, strerror(err),
			      qp->sq_tail - qp->sq_head, qp->sq_size);
			*bad = wr;
			break;
		}
		if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_SQE) {
			send_done(qp, &qp->sq[qp->sq_head % qp->sq_size], IBV_WC_WR_FLUSH_ERR);
			qp->sq_head = qp->sq_next = qp->sq_tail;
		}
	}
	kick(qp);
	if (flush(qp->ctx) || qp->deadline)
		wake(qp->ctx);
	return err;
}

int post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct nvmock_qp *qp = to_qp(q);
	int err;

	pthread_mutex_lock(&qp->ctx->lock);
	err = post_send_locked(qp, wr, bad, false);
	pthread_mutex_unlock(&qp->ctx->lock);
	return err;
}

int post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct nvmock_qp *qp = to_qp(q);
	int err = 0;

	pthread_mutex_lock(&qp->ctx->lock);
	/* An SRQ's QP takes no receives of its own, nor an XRC one: mlx5's
	 * receive queue of no entries is full (ENOMEM). In RESET its gather
	 * limit is -1 (EINVAL). */
	if (qp->srq || qp->xrc) {
		*bad = wr;
		err = ENOMEM;
	} else if (qp->state == IBV_QPS_RESET) {
		*bad = wr;
		err = EINVAL;
	}
	for (; !err && wr; wr = wr->next) {
		struct rwqe *r;

		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->max_recv_sge) {
			err = EINVAL;
		} else if (qp->rq_tail - qp->rq_head == qp->rq_size) {
			err = ENOMEM;
		}
		if (err) {
			*bad = wr;
			break;
		}
		r = put_rwqe(qp->rq, qp->rq_sge, qp->rq_size, qp->max_recv_sge, qp->rq_tail++, wr->wr_id, wr->num_sge, wr->sg_list);
		if (qp->state == IBV_QPS_ERR) {
			recv_done(qp, r, IBV_WC_WR_FLUSH_ERR, NULL);
			qp->rq_head++;
		}
	}
	pthread_mutex_unlock(&qp->ctx->lock);
	return err;
}

/* ---- the ibv_qp_ex work-request interface ---- */

static struct nvmock_qp *qpx_qp(struct ibv_qp_ex *x) { return to_qp(&x->qp_base); }

static struct ibv_send_wr *qpx_new(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct nvmock_qp *qp = qpx_qp(x);
	struct ibv_send_wr *wr;

	if (qp->batch_err)
		return NULL;
	if (qp->batch_n == qp->sq_size) {
		qp->batch_err = ENOMEM;
		return NULL;
	}
	wr = &qp->batch[qp->batch_n];
	*wr = (struct ibv_send_wr){
		.wr_id = x->wr_id, .opcode = op, .send_flags = x->wr_flags,
		.sg_list = &qp->batch_sge[(size_t)qp->batch_n * qp->max_send_sge],
	};
	if (qp->batch_n)
		qp->batch[qp->batch_n - 1].next = wr;
	qp->batch_n++;
	return wr;
}

static struct ibv_send_wr *qpx_cur(struct ibv_qp_ex *x)
{
	struct nvmock_qp *qp = qpx_qp(x);

	if (qp->batch_err || !qp->batch_n) {
		if (!qp->batch_err)
			qp->batch_err = EINVAL;
		return NULL;
	}
	return &qp->batch[qp->batch_n - 1];
}

/* wr_start .. wr_complete or wr_abort is a critical section per QP, and
 * the batch goes in whole or not at all (ibv_wr_post(3)). */
static void qpx_start(struct ibv_qp_ex *x)
{
	struct nvmock_qp *qp = qpx_qp(x);

	if (pthread_mutex_lock(&qp->wr_lock))
		return; /* wr_start twice: the open batch goes on */
	pthread_mutex_lock(&qp->ctx->lock);
	qp->batch_open = true;
	pthread_mutex_unlock(&qp->ctx->lock);
	qp->batch_n = 0;
	qp->batch_err = 0;
}

static int qpx_complete(struct ibv_qp_ex *x)
{
	struct nvmock_qp *qp = qpx_qp(x);
	struct ibv_send_wr *bad;
	int err = qp->batch_err;

	pthread_mutex_lock(&qp->ctx->lock);
	if (!qp->batch_open) {
		pthread_mutex_unlock(&qp->ctx->lock);
		return EINVAL; /* no wr_start: nothing of this thread's to post */
	}
	/* mlx5's wr_complete is its error one until RTS: EINVAL. */
	if (!err && !qp->sq_open)
		err = EINVAL;
	if (!err && qp->batch_n)
		err = post_send_locked(qp, qp->batch, &bad, true);
	qp->batch_open = false;
	pthread_mutex_unlock(&qp->ctx->lock);
	qp->batch_n = 0;
	qp->batch_err = 0;
	pthread_mutex_unlock(&qp->wr_lock);
	return err;
}

static void qpx_abort(struct ibv_qp_ex *x)
{
	struct nvmock_qp *qp = qpx_qp(x);

	pthread_mutex_lock(&qp->ctx->lock);
	if (!qp->batch_open) {
		pthread_mutex_unlock(&qp->ctx->lock);
		return;
	}
	qp->batch_open = false;
	pthread_mutex_unlock(&qp->ctx->lock);
	qp->batch_n = 0;
	qp->batch_err = 0;
	pthread_mutex_unlock(&qp->wr_lock);
}

static void qpx_send(struct ibv_qp_ex *x) { qpx_new(x, IBV_WR_SEND); }

/* Memory windows (mw.c): a bind work request, which mlx5 checks no
 * further here (the device does, when it gets to it). */
static void qpx_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b)
{
	struct ibv_send_wr *wr = qpx_new(x, IBV_WR_BIND_MW);

	if (!wr)
		return;
	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *b;
}

static void qpx_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct ibv_send_wr *wr = qpx_new(x, IBV_WR_LOCAL_INV);

	if (wr)
		wr->invalidate_rkey = rkey;
}

static void qpx_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct ibv_send_wr *wr = qpx_new(x, IBV_WR_SEND_WITH_INV);

	if (wr)
		wr->invalidate_rkey = rkey;
}

static void qpx_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct ibv_send_wr *wr = qpx_new(x, IBV_WR_SEND_WITH_IMM);

	if (wr)
		wr->imm_data = imm;
}

static void qpx_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t raddr, __be32 imm)
{
	struct ibv_send_wr *wr = qpx_new(x, op);

	if (wr) {
		wr->wr.rdma.rkey = rkey;
		wr->wr.rdma.remote_addr = raddr;
		wr->imm_data = imm;
	}
}

static void qpx_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) { qpx_rdma(x, IBV_WR_RDMA_WRITE, rkey, raddr, 0); }
static void qpx_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, __be32 imm) { qpx_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, raddr, imm); }
static void qpx_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) { qpx_rdma(x, IBV_WR_RDMA_READ, rkey, raddr, 0); }

static void qpx_atomic(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t raddr, uint64_t a, uint64_t b)
{
	struct ibv_send_wr *wr = qpx_new(x, op);

	if (wr) {
		wr->wr.atomic.rkey = rkey;
		wr->wr.atomic.remote_addr = raddr;
		wr->wr.atomic.compare_add = a;
		wr->wr.atomic.swap = b;
	}
}

static void qpx_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap)
{
	qpx_atomic(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, raddr, compare, swap);
}

static void qpx_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, uint64_t add)
{
	qpx_atomic(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, raddr, add, 0);
}

static void qpx_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct ibv_send_wr *wr = qpx_cur(x);

	if (wr) {
		wr->wr.ud.ah = ah;
		wr->wr.ud.remote_qpn = remote_qpn;
		wr->wr.ud.remote_qkey = remote_qkey;
	}
}

static void qpx_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	struct ibv_send_wr *wr = qpx_cur(x);

	if (wr)
		wr->qp_type.xrc.remote_srqn = srqn;
}

static void qpx_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_send_wr *wr = qpx_cur(x);

	if (wr) {
		wr->sg_list[0] = (struct ibv_sge){ .addr = addr, .length = length, .lkey = lkey };
		wr->num_sge = 1;
	}
}

static void qpx_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *list)
{
	struct ibv_send_wr *wr = qpx_cur(x);

	if (!wr)
		return;
	if (n > qpx_qp(x)->max_send_sge) {
		qpx_qp(x)->batch_err = ENOMEM; /* mlx5 */
		return;
	}
	memcpy(wr->sg_list, list, n * sizeof(*list));
	wr->num_sge = n;
}

static void qpx_set_inline_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct nvmock_qp *qp = qpx_qp(x);
	struct ibv_send_wr *wr = qpx_cur(x);
	uint8_t *slot;
	size_t i, total = 0;

	if (!wr)
		return;
	for (i = 0; i < n; i++)
		total += bufs[i].length;
	if (total > qp->max_inline) {
		qp->batch_err = ENOMEM; /* mlx5 */
		return;
	}
	wr->send_flags |= IBV_SEND_INLINE;
	wr->num_sge = 0;
	if (!total)
		return;
	/* Copied now: the caller may reuse its buffers at once. */
	slot = &qp->batch_inl[(size_t)(qp->batch_n - 1) * qp->max_inline];
	for (total = 0, i = 0; i < n; i++) {
		memcpy(slot + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	wr->sg_list[0] = (struct ibv_sge){ .addr = (uintptr_t)slot, .length = total };
	wr->num_sge = 1;
}

static void qpx_set_inline(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = { .addr = addr, .length = length };

	qpx_set_inline_list(x, 1, &b);
}

void qpx_setup(struct nvmock_qp *qp)
{
	struct ibv_qp_ex *x = &qp->vqp.qp_ex;

	qp->vqp.comp_mask |= VERBS_QP_EX;
	x->wr_start = qpx_start;
	x->wr_complete = qpx_complete;
	x->wr_abort = qpx_abort;
	x->wr_send = qpx_send;
	x->wr_bind_mw = qpx_bind_mw;
	x->wr_local_inv = qpx_local_inv;
	x->wr_send_inv = qpx_send_inv;
	x->wr_send_imm = qpx_send_imm;
	x->wr_rdma_write = qpx_write;
	x->wr_rdma_write_imm = qpx_write_imm;
	x->wr_rdma_read = qpx_read;
	x->wr_atomic_cmp_swp = qpx_cmp_swp;
	x->wr_atomic_fetch_add = qpx_fetch_add;
	x->wr_set_sge = qpx_set_sge;
	x->wr_set_ud_addr = qpx_set_ud_addr;
	x->wr_set_xrc_srqn = qpx_set_xrc_srqn;
	x->wr_set_sge_list = qpx_set_sge_list;
	x->wr_set_inline_data = qpx_set_inline;
	x->wr_set_inline_data_list = qpx_set_inline_list;
}
