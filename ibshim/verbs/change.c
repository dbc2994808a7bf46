//go:build ignore

/*
 * Changing objects the program made (datapath.h), with the checks of
 * mlx5 and the kernel below it:
 *   - ibv_rereg_mr: a region's access, PD or memory changes in place (its
 *     keys stay, as mlx5 keeps them when it can); work already posted that
 *     names the old memory or PD then fails, as on the device;
 *   - ibv_resize_cq: to a power of two less one, keeping what waits in it;
 *     smaller than what waits is refused (EINVAL);
 *   - ibv_advise_mr: prefetching on-demand regions, which here are the
 *     process's memory already: only the checks (and, with
 *     IBV_ADVISE_MR_FLAG_FLUSH, the fault of the range) remain.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "datapath.h"

static int rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	struct nvmock_mr *mr = container_of(vmr, struct nvmock_mr, vmr);
	struct nvmock_context *ctx = to_ctx(vmr->ibv_mr.context);
	int now = flags & IBV_REREG_MR_CHANGE_ACCESS ? access : mr->access;

	/* uverbs: some change, of what it knows; the kernel's access
	 * checks; no device memory's or implicit region's (whose on-demand
	 * nature cannot go either). */
	if (!flags || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) || mr->dm ||
	    ((flags & IBV_REREG_MR_CHANGE_PD) && (!pd || pd->context != vmr->ibv_mr.context)) || !access_known(now) ||
	    ((now & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(now & IBV_ACCESS_LOCAL_WRITE)) ||
	    (mr->implicit && ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) || !(now & IBV_ACCESS_ON_DEMAND)))) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_CMD;
	}
	/* The pages of the region it will be, pinned as reg_mr pins them. */
	if (!(now & IBV_ACCESS_ON_DEMAND) &&
	    !(flags & IBV_REREG_MR_CHANGE_TRANSLATION ? mapped((uintptr_t)addr, length, now & MR_WRITABLE)
						      : mapped((uintptr_t)mr->base, mr->length, now & MR_WRITABLE))) {
		errno = EFAULT;
		return IBV_REREG_MR_ERR_CMD;
	}
	pthread_mutex_lock(&ctx->lock);
	mr->access = now;
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		mr->dom->users--;
		mr->dom = domain_of(pd);
		mr->dom->users++;
		vmr->ibv_mr.pd = pd;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
		/* libibverbs passes the address as the region's iova. */
		mr->base = addr;
		mr->iova = (uintptr_t)addr;
		mr->length = length;
		vmr->ibv_mr.addr = addr;
		vmr->ibv_mr.length = length;
	}
	/* Its windows described the region it was. */
	mw_region_gone(ctx, mr);
	mr_changed(ctx, mr);
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static int resize_cq(struct ibv_cq *c, int cqe)
{
	struct nvmock_cq *cq = to_cq(c);
	struct nvmock_context *ctx = to_ctx(c->context);
	struct qmem m, old;
	struct ibv_wc *ring;
	int64_t *ts = NULL;
	uint32_t size = 1, i;
	int err;

	if (cqe < 1 || cqe > ctx->caps->max_cqe)
		return EINVAL;
	while (size < (uint32_t)cqe + 1)
		size <<= 1;
	if (size == cq->size)
		return 0;
	/* From the CQ's parent domain's allocator, as mlx5 takes it. */
	err = cq_ring(cq, &m, size, &ring, cq->ts ? &ts : NULL);
	if (err)
		return err;
	pthread_mutex_lock(&ctx->lock);
	if (cq->count > size) {
		/* The device cannot move more completions than fit. */
		pthread_mutex_unlock(&ctx->lock);
		qmem_put(&m);
		return EINVAL;
	}
	for (i = 0; i < cq->count; i++) {
		ring[i] = cq->ring[(cq->head + i) % cq->size];
		if (ts)
			ts[i] = cq->ts[(cq->head + i) % cq->size];
	}
	old = cq->mem;
	cq->mem = m;
	cq->ring = ring;
	cq->ts = ts;
	cq->head = 0;
	cq->size = size;
	c->cqe = size - 1;
	pthread_mutex_unlock(&ctx->lock);
	qmem_put(&old); /* not under the lock: a parent domain's free may call verbs */
	return 0;
}

/* The kernel's checks for prefetching (get_prefetchable_mr), and with
 * FLUSH its fault of the range: ENOENT for a key that names no on-demand
 * region, EPERM for another PD's or a write to a read-only one, EFAULT for
 * memory the region has not got. */
static int advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg, uint32_t n)
{
	struct nvmock_context *ctx = to_ctx(pd->context);
	bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	int err = 0;
	uint32_t i;

	if ((flags & ~IBV_ADVISE_MR_FLAG_FLUSH) || !n || !sg)
		return EINVAL;
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && !write && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	pthread_mutex_lock(&ctx->lock);
	for (i = 0; i < n && !err; i++) {
		struct nvmock_mr *mr = find_mr(ctx, sg[i].lkey);

		if (!mr || mr->window || !(mr->access & IBV_ACCESS_ON_DEMAND))
			err = ENOENT;
		else if (mr->dom != domain_of(pd) || (write && !(mr->access & MR_WRITABLE)))
			err = EPERM;
		else if ((flags & IBV_ADVISE_MR_FLAG_FLUSH) && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT &&
			 !mr_ptr(mr, sg[i].addr, sg[i].length, write))
			err = EFAULT;
	}
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

void change_ops(struct verbs_context_ops *ops)
{
	ops->rereg_mr = rereg_mr;
	ops->resize_cq = resize_cq;
	ops->advise_mr = advise_mr;
}
