//go:build ignore

/*
 * Shared receive queues (datapath.h). QPs made with one take their
 * receives from it, one at a time, when a message needs one: the SRQ's
 * next receive moves into the QP's own one-slot queue, where the responder
 * finds it as it finds a posted receive, and stays there until the message
 * completes it (or the QP's error flushes it). Receives still in the SRQ
 * belong to no QP and survive any QP's error.
 *
 * An armed limit raises IBV_EVENT_SRQ_LIMIT_REACHED when a receive taken
 * leaves fewer than it, and a QP of an SRQ that goes to the error state
 * raises IBV_EVENT_QP_LAST_WQE_REACHED, through the daemon (raise_event).
 * XRC SRQs take messages through XRC targets (xrc.c). Not simulated:
 * resizing, refused as mlx5 refuses it; tag-matching SRQs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/mlx5dv.h>

#include "datapath.h"

/* An SRQ of max_wr receives of max_sge SGEs (rounded as mlx5 rounds
 * them, and told back in attr), with the next number of the context's
 * block, made on pd (its queue memory from a parent domain's allocator). */
static struct nvmock_srq *new_srq(struct nvmock_context *ctx, struct ibv_srq_attr *attr, struct ibv_pd *pd)
{
	const struct ibv_device_attr *caps = ctx->caps;
	struct nvmock_srq *srq;
	uint32_t size = 1, wqe = 32, n;
	size_t sge;
	int err;

	/* mlx5 takes none (a queue that holds nothing) too. */
	if (attr->max_wr > (uint32_t)caps->max_srq_wr || attr->max_sge > (uint32_t)caps->max_srq_sge) {
		errno = EINVAL;
		return NULL;
	}
	if (!qmem_custom(pd) && huge_refused("MLX_SRQ"))
		return NULL;
	/* mlx5 rounds up to a power of two, less one. */
	while (size < attr->max_wr + 1)
		size <<= 1;
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	srq->size = size;
	/* mlx5 sizes a receive as a 16-byte header and the SGEs, at least
	 * 32 bytes and a power of two, and gives all the room it has. */
	while (wqe < 16 + 16 * attr->max_sge)
		wqe <<= 1;
	srq->max_sge = (wqe - 16) / 16;
	sge = QALIGN(size * sizeof(*srq->rq));
	err = qmem_queue(&srq->mem, &srq->db, pd, sge + (size_t)size * srq->max_sge * sizeof(*srq->sge),
			 MLX5DV_RES_TYPE_SRQ);
	if (err) {
		free(srq);
		errno = err;
		return NULL;
	}
	srq->rq = srq->mem.p;
	srq->sge = (struct ibv_sge *)((uint8_t *)srq->mem.p + sge);
	srq->dom = domain_of(pd);
	attr->max_wr = size - 1;
	attr->max_sge = srq->max_sge;
	/* SRQ numbers come from the context's block, as QPNs do, so that
	 * no two of a node's contexts share one (xrc.c); from its top, so
	 * that traces tell them from the QPNs. */
	ensure_connected(ctx);
	pthread_mutex_lock(&ctx->lock);
	for (n = 0; n < NVMOCK_IBD_QPN_BLOCK; n++) {
		uint32_t num = ctx->qpn_base + NVMOCK_IBD_QPN_BLOCK - 1 - ctx->next_srq++ % NVMOCK_IBD_QPN_BLOCK;
		struct nvmock_srq *o;

		for (o = ctx->srqs; o && o->srqn != num; o = o->next)
			;
		if (!o) {
			srq->srqn = num;
			break;
		}
	}
	if (n == NVMOCK_IBD_QPN_BLOCK) { /* every number is in use */
		pthread_mutex_unlock(&ctx->lock);
		qmem_put(&srq->mem);
		qmem_put(&srq->db);
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	srq->next = ctx->srqs;
	ctx->srqs = srq;
	pthread_mutex_unlock(&ctx->lock);
	srq->vsrq.srq_num = srq->srqn;
	return srq;
}

static struct ibv_srq *create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct nvmock_srq *srq = new_srq(to_ctx(pd->context), &a->attr, pd);

	if (!srq)
		return NULL;
	pd_use(pd, 1); /* libibverbs sets its pd once this returns */
	return &srq->vsrq.srq;
}

/* ibv_create_srq_ex: a basic SRQ, or an XRC one (with its domain and CQ,
 * as libibverbs and the kernel require). libibverbs fills in nothing of
 * it: the ibv_srq is set up here, as ibv_cmd_create_srq_ex would. */
static struct ibv_srq *create_srq_ex(struct ibv_context *ibctx, struct ibv_srq_init_attr_ex *a)
{
	struct nvmock_context *ctx = to_ctx(ibctx);
	enum ibv_srq_type type = a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE ? a->srq_type : IBV_SRQT_BASIC;
	bool xrc = type == IBV_SRQT_XRC;
	struct nvmock_srq *srq;
	struct ibv_srq *s;

	if (a->comp_mask >= IBV_SRQ_INIT_ATTR_RESERVED || (type != IBV_SRQT_BASIC && !xrc)) {
		trace("create_srq_ex: comp_mask %#x, type %d: basic and XRC SRQs are simulated", a->comp_mask, type);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd || a->pd->context != ibctx ||
	    (xrc && (!(a->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !(a->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !a->xrcd ||
		     !a->cq || a->xrcd->context != ibctx || a->cq->context != ibctx))) {
		errno = EINVAL;
		return NULL;
	}
	srq = new_srq(ctx, &a->attr, a->pd);
	if (!srq)
		return NULL;
	s = &srq->vsrq.srq;
	s->context = ibctx;
	s->srq_context = a->srq_context;
	s->pd = a->pd;
	pd_use(a->pd, 1);
	pthread_mutex_init(&s->mutex, NULL);
	pthread_cond_init(&s->cond, NULL);
	srq->vsrq.srq_type = type;
	if (a->comp_mask & IBV_SRQ_INIT_ATTR_CQ)
		srq->vsrq.cq = a->cq;
	if (xrc) {
		pthread_mutex_lock(&ctx->lock);
		srq->xrcd = container_of(a->xrcd, struct nvmock_xrcd, vx.xrcd);
		srq->xrcd->users++;
		srq->cq = to_cq(a->cq);
		srq->cq->users++;
		pthread_mutex_unlock(&ctx->lock);
		srq->vsrq.xrcd = &srq->xrcd->vx;
	}
	return s;
}

static int get_srq_num(struct ibv_srq *s, uint32_t *num)
{
	*num = to_srq(s)->srqn;
	return 0;
}

static int modify_srq(struct ibv_srq *s, struct ibv_srq_attr *attr, int mask)
{
	struct nvmock_context *ctx = to_ctx(s->context);
	struct nvmock_srq *srq = to_srq(s);

	if (mask & IBV_SRQ_MAX_WR)
		return EINVAL; /* mlx5 cannot resize an SRQ */
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > srq->size - 1)
			return EINVAL;
		/* Armed: the next receive taken below it raises
		 * IBV_EVENT_SRQ_LIMIT_REACHED, once. */
		pthread_mutex_lock(&ctx->lock);
		srq->limit = attr->srq_limit;
		pthread_mutex_unlock(&ctx->lock);
	}
	return 0;
}

static int query_srq(struct ibv_srq *s, struct ibv_srq_attr *attr)
{
	struct nvmock_srq *srq = to_srq(s);

	*attr = (struct ibv_srq_attr){ .max_wr = srq->size - 1, .max_sge = srq->max_sge, .srq_limit = srq->limit };
	return 0;
}

static int destroy_srq(struct ibv_srq *s)
{
	struct nvmock_context *ctx = to_ctx(s->context);
	struct nvmock_srq *srq = to_srq(s), **p;
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	busy = srq->users > 0;
	if (busy) {
		pthread_mutex_unlock(&ctx->lock);
		return EBUSY; /* as the kernel answers while QPs use it */
	}
	srq->dom->users--;
	for (p = &ctx->srqs; *p; p = &(*p)->next)
		if (*p == srq) {
			*p = srq->next;
			break;
		}
	if (srq->xrcd) {
		srq->xrcd->users--;
		srq->cq->users--;
		xrc_srq_gone(ctx, srq);
	}
	pthread_mutex_unlock(&ctx->lock);
	qmem_put(&srq->mem);
	qmem_put(&srq->db);
	release(ctx, srq, srq->raised != acked(s, &s->events_completed));
	return 0;
}

static int post_srq_recv(struct ibv_srq *s, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct nvmock_context *ctx = to_ctx(s->context);
	struct nvmock_srq *srq = to_srq(s);
	int err = 0;

	pthread_mutex_lock(&ctx->lock);
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > srq->max_sge)
			err = EINVAL;
		else if (srq->tail - srq->head == srq->size - 1)
			err = ENOMEM;
		if (err) {
			*bad = wr;
			break;
		}
		put_rwqe(srq->rq, srq->sge, srq->size, srq->max_sge, srq->tail++, wr->wr_id, wr->num_sge, wr->sg_list);
	}
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

/* take_recv says whether a receive waits for the QP's next message: its
 * own, or its SRQ's next, which it then takes. ctx->lock is held. */
bool take_recv(struct nvmock_qp *qp)
{
	struct nvmock_srq *srq = qp->srq;
	struct rwqe *from;

	if (qp->rq_head != qp->rq_tail)
		return true;
	if (!srq || srq->head == srq->tail)
		return false;
	from = &srq->rq[srq->head++ % srq->size];
	put_rwqe(qp->rq, qp->rq_sge, qp->rq_size, qp->max_recv_sge, qp->rq_tail, from->wr_id, from->nsge, from->sge);
	qp->rq_tail++;
	if (srq->limit && srq->tail - srq->head < srq->limit) {
		srq->limit = 0;
		if (raise_event(qp->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &srq->vsrq.srq))
			srq->raised++;
	}
	return true;
}

void srq_ops(struct verbs_context_ops *ops)
{
	ops->create_srq = create_srq;
	ops->modify_srq = modify_srq;
	ops->query_srq = query_srq;
	ops->destroy_srq = destroy_srq;
	ops->post_srq_recv = post_srq_recv;
	ops->create_srq_ex = create_srq_ex;
	ops->get_srq_num = get_srq_num;
}
