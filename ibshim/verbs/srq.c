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
 * Not simulated: resizing, refused as mlx5 refuses it; XRC SRQs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "datapath.h"

static struct ibv_srq *create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	const struct ibv_device_attr *caps = to_ctx(pd->context)->caps;
	struct nvmock_srq *srq;
	uint32_t size = 1;

	if (!a->attr.max_wr || a->attr.max_wr > (uint32_t)caps->max_srq_wr || a->attr.max_sge > (uint32_t)caps->max_srq_sge) {
		errno = EINVAL;
		return NULL;
	}
	/* mlx5 rounds up to a power of two, less one. */
	while (size < a->attr.max_wr + 1)
		size <<= 1;
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	srq->size = size;
	srq->max_sge = a->attr.max_sge ? a->attr.max_sge : 1;
	srq->rq = calloc(size, sizeof(*srq->rq));
	srq->sge = calloc((size_t)size * srq->max_sge, sizeof(*srq->sge));
	if (!srq->rq || !srq->sge) {
		free(srq->rq);
		free(srq->sge);
		free(srq);
		errno = ENOMEM;
		return NULL;
	}
	a->attr.max_wr = size - 1;
	a->attr.max_sge = srq->max_sge;
	return &srq->srq;
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
	struct nvmock_srq *srq = to_srq(s);
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	busy = srq->users > 0;
	pthread_mutex_unlock(&ctx->lock);
	if (busy)
		return EBUSY; /* as the kernel answers while QPs use it */
	free(srq->rq);
	free(srq->sge);
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
		if (raise_event(qp->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &srq->srq))
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
}
