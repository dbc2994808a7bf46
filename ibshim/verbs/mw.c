//go:build ignore

/*
 * Memory windows (datapath.h), as mlx5 gives them: type 1, bound with
 * ibv_bind_mw and unbound by a bind of length 0; type 2, bound with an
 * IBV_WR_BIND_MW work request to the QP that posts it, and invalidated by
 * IBV_WR_LOCAL_INV or a peer's IBV_WR_SEND_WITH_INV; on RC and UC QPs (mlx5
 * also takes XRC's, whose windows are not simulated). A bind is work on the
 * send queue: it takes effect when the queue reaches it, and completes
 * (IBV_WC_BIND_MW) in order after what was posted before it.
 *
 * A bound window is a view of its region: an nvmock_mr under the window's
 * R_Key, over the bound range, with the window's rights, that the
 * responder finds as it finds a region (find_mr), and that local work
 * cannot use. A type 2 window answers only requests to the QP it was bound
 * through (mw_for).
 *
 * What a bind checks (the HCA's, IBV_WC_MW_BIND_ERR otherwise): the
 * region allows binds (IBV_ACCESS_MW_BIND), holds the range, and allows
 * local writes if the window grants remote writes or atomics; window,
 * region and QP share a PD; a type 2 window is not bound already. An
 * invalidate that names no type 2 window bound through this QP fails
 * likewise (inferred: which status mlx5 gives then was not found).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "datapath.h"

struct nvmock_mw {
	struct ibv_mw mw;
	struct nvmock_mw *next;   /* the context's windows */
	struct nvmock_mr view;
	struct nvmock_mr *region; /* bound to, or NULL */
	uint32_t qpn;             /* type 2: bound through */
	struct nvmock_pd *dom;    /* domain_of its PD */
};

static struct nvmock_mw *to_mw(struct ibv_mw *m) { return container_of(m, struct nvmock_mw, mw); }

/* Takes the view off the context's list. ctx->lock is held. */
static void unbind(struct nvmock_context *ctx, struct nvmock_mw *mw)
{
	struct nvmock_mr **p;

	if (!mw->region)
		return;
	for (p = &ctx->mrs; *p; p = &(*p)->next)
		if (*p == &mw->view) {
			*p = mw->view.next;
			break;
		}
	mr_changed(ctx, &mw->view);
	mw->region = NULL;
	mw->qpn = 0;
}

/* Whether a live window has the key index (under the lock). By handle,
 * the index, which never changes: ibv_bind_mw writes mw.rkey unlocked. */
bool mw_uses_key(struct nvmock_context *ctx, uint32_t index)
{
	struct nvmock_mw *mw;

	for (mw = ctx->mws; mw; mw = mw->next)
		if (mw->mw.handle == index)
			return true;
	return false;
}

static struct ibv_mw *alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct nvmock_context *ctx = to_ctx(pd->context);
	struct nvmock_mw *mw;

	if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
		errno = EINVAL;
		return NULL;
	}
	mw = calloc(1, sizeof(*mw));
	if (!mw)
		return NULL;
	mw->mw.context = pd->context;
	mw->mw.pd = pd;
	mw->mw.type = type;
	mw->dom = domain_of(pd);
	pthread_mutex_lock(&ctx->lock);
	mw->mw.handle = new_key(ctx);
	mw->mw.rkey = (mw->mw.handle << 8) | 0x07;
	mw->next = ctx->mws;
	ctx->mws = mw;
	mw->dom->users++;
	pthread_mutex_unlock(&ctx->lock);
	return &mw->mw;
}

static int dealloc_mw(struct ibv_mw *m)
{
	struct nvmock_context *ctx = to_ctx(m->context);
	struct nvmock_mw *mw = to_mw(m);

	struct nvmock_mw **p;

	pthread_mutex_lock(&ctx->lock);
	for (p = &ctx->mws; *p; p = &(*p)->next)
		if (*p == mw) {
			*p = mw->next;
			break;
		}
	unbind(ctx, mw);
	mw->dom->users--;
	pthread_mutex_unlock(&ctx->lock);
	free(mw);
	return 0;
}

/* ibv_bind_mw, for a type 1 window: a bind work request with the next
 * R_Key, which the window takes once posted (mlx5_bind_mw). */
static int bind_mw(struct ibv_qp *q, struct ibv_mw *m, struct ibv_mw_bind *b)
{
	struct ibv_send_wr wr = { .wr_id = b->wr_id, .opcode = IBV_WR_BIND_MW, .send_flags = b->send_flags }, *bad;
	struct nvmock_qp *qp = to_qp(q);
	int err;

	if (b->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	if (b->bind_info.mr && container_of(b->bind_info.mr, struct nvmock_mr, vmr.ibv_mr)->access & IBV_ACCESS_ZERO_BASED)
		return EINVAL;
	wr.bind_mw.mw = m;
	wr.bind_mw.rkey = ibv_inc_rkey(m->rkey);
	wr.bind_mw.bind_info = b->bind_info;
	pthread_mutex_lock(&qp->ctx->lock);
	err = post_send_locked(qp, &wr, &bad, true);
	pthread_mutex_unlock(&qp->ctx->lock);
	if (!err)
		m->rkey = wr.bind_mw.rkey;
	return err;
}

/* Does the bind or invalidate w on qp's send queue; false if it failed
 * (IBV_WC_MW_BIND_ERR). The window and region are looked up now: a bind
 * that names one freed since it was posted fails. The new key is the
 * window's index with the tag the bind gives, as mlx5 builds it. A failed
 * bind leaves the window as it was. ctx->lock is held. */
bool mw_local(struct nvmock_qp *qp, struct swqe *w)
{
	struct nvmock_context *ctx = qp->ctx;
	struct nvmock_pd *pd = qp->dom;
	const struct ibv_mw_bind_info *b = &w->bind;
	struct nvmock_mw *mw;
	struct nvmock_mr *mr = NULL;
	uint32_t key;

	if (w->opcode == IBV_WR_LOCAL_INV)
		return mw_invalidate(qp, w->rkey);
	for (mw = ctx->mws; mw && mw->mw.handle != w->mw_handle; mw = mw->next)
		;
	if (!mw || mw->dom != pd || (mw->mw.type == IBV_MW_TYPE_2 && mw->region))
		return false;
	/* Not from mw.rkey: the program's, which ibv_bind_mw sets after
	 * posting, unlocked, while the engine may apply the bind. */
	key = (mw->mw.handle << 8) | (w->rkey & 0xffu);
	if (b->length) {
		mr = find_mr(ctx, w->bind_lkey);
		if (!mr || mr->window || mr->dom != pd || !(mr->access & IBV_ACCESS_MW_BIND) ||
		    b->addr < mr->iova || b->length > mr->length || b->addr - mr->iova > mr->length - b->length ||
		    ((b->mw_access_flags & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
		     !(mr->access & IBV_ACCESS_LOCAL_WRITE)))
			return false;
	} else if (mw->mw.type != IBV_MW_TYPE_1) {
		return false; /* a type 2 window goes by an invalidate */
	}
	unbind(ctx, mw);
	if (!mr)
		return true; /* a type 1 window unbound */
	mw->view = (struct nvmock_mr){
		.base = mr->base + (b->addr - mr->iova), .iova = b->addr, .length = b->length, .window = mw,
		.access = (int)b->mw_access_flags | (mr->access & IBV_ACCESS_ON_DEMAND), .dom = pd,
	};
	mw->view.vmr.ibv_mr = (struct ibv_mr){ .context = &ctx->vctx.context, .pd = &pd->pd, .length = b->length,
					       .lkey = key, .rkey = key };
	mw->view.next = ctx->mrs;
	ctx->mrs = &mw->view;
	mw->region = mr;
	mw->qpn = mw->mw.type == IBV_MW_TYPE_2 ? qp->vqp.qp.qp_num : 0;
	return true;
}

/* Whether a request to qp may use region mr: its PD's, and for a type 2
 * window, bound through qp. */
bool mw_for(struct nvmock_mr *mr, struct nvmock_qp *qp)
{
	return mr->dom == resp_pd(qp) && (!mr->window || !mr->window->qpn || mr->window->qpn == qp->vqp.qp.qp_num);
}

/* Invalidates the type 2 window of rkey bound through qp (a local
 * invalidate, or a peer's send with invalidate); false if there is none.
 * ctx->lock is held. */
bool mw_invalidate(struct nvmock_qp *qp, uint32_t rkey)
{
	struct nvmock_mr *mr = find_mr(qp->ctx, rkey);

	if (!mr || !mr->window || mr->window->mw.type != IBV_MW_TYPE_2 || mr->window->qpn != qp->vqp.qp.qp_num)
		return false;
	unbind(qp->ctx, mr->window);
	return true;
}

/* A region went: the windows bound to it go with it. ctx->lock is held. */
void mw_region_gone(struct nvmock_context *ctx, struct nvmock_mr *mr)
{
	struct nvmock_mr *v, *next;

	for (v = ctx->mrs; v; v = next) {
		next = v->next;
		if (v->window && v->window->region == mr)
			unbind(ctx, v->window);
	}
}

void mw_ops(struct verbs_context_ops *ops)
{
	ops->alloc_mw = alloc_mw;
	ops->dealloc_mw = dealloc_mw;
	ops->bind_mw = bind_mw;
}
