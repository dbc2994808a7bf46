//go:build ignore

/*
 * Parent and thread domains, as mlx5 gives them (datapath.h).
 *
 * A parent domain stands for a PD wherever one is taken: the kernel knows
 * it only by its PD's handle, so regions, windows, AHs and SRQs made on it
 * belong to the PD, and may be used by QPs made on the PD or on any parent
 * over it. mlx5 counts the parent's QPs and CQs, and frees neither the
 * parent while they live nor the PD or thread domain while a parent holds
 * them (EBUSY); a parent made over a parent holds the PD beneath. A
 * parent's allocators are called with no lock held, as they may call
 * verbs. A thread domain only spares a real HCA's locks and doorbell
 * sharing, which the mock has not got.
 *
 * A parent domain's allocators give the memory of the queues made on it
 * (QPs, SRQs, and CQs made with IBV_CQ_INIT_ATTR_MASK_PD) and of their
 * doorbell records, with mlx5's resource types and alignments: the mock
 * keeps its work queues and completion rings there. An allocator that
 * answers IBV_ALLOCATOR_USE_DEFAULT leaves it to the provider; NULL fails
 * the creation (ENOMEM).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/mlx5dv.h>

#include "datapath.h"

static struct ibv_td *alloc_td(struct ibv_context *ibctx, struct ibv_td_init_attr *a)
{
	struct nvmock_td *td;

	if (a->comp_mask) {
		errno = EINVAL;
		return NULL;
	}
	td = calloc(1, sizeof(*td));
	if (!td) {
		errno = ENOMEM;
		return NULL;
	}
	td->td.context = ibctx;
	return &td->td;
}

static int dealloc_td(struct ibv_td *t)
{
	struct nvmock_context *ctx = to_ctx(t->context);
	struct nvmock_td *td = container_of(t, struct nvmock_td, td);
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	busy = td->users > 0;
	pthread_mutex_unlock(&ctx->lock);
	if (busy)
		return EBUSY;
	free(td);
	return 0;
}

static struct ibv_pd *alloc_parent_domain(struct ibv_context *ibctx, struct ibv_parent_domain_init_attr *a)
{
	struct nvmock_pd *p;
	struct nvmock_context *ctx;

	if (!a->pd || (a->comp_mask & ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
						 IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT))) {
		errno = EINVAL;
		return NULL;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	ctx = to_ctx(a->pd->context);
	/* mlx5 holds the PD, even through a parent given for it. */
	p->protection = domain_of(a->pd);
	p->pd.context = a->pd->context;
	p->pd.handle = p->protection->pd.handle;
	if (a->td)
		p->td = container_of(a->td, struct nvmock_td, td);
	if (a->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
		p->alloc = a->alloc;
		p->free = a->free;
	}
	if (a->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		p->pd_context = a->pd_context;
	(void)ibctx;
	pthread_mutex_lock(&ctx->lock);
	p->protection->users++;
	if (p->td)
		p->td->users++;
	pthread_mutex_unlock(&ctx->lock);
	return &p->pd;
}

/* ibv_dealloc_pd of a parent domain (objects.c). ctx->lock is held. */
int dealloc_parent(struct nvmock_pd *p)
{
	if (p->users)
		return EBUSY;
	p->protection->users--;
	if (p->td)
		p->td->users--;
	return 0;
}

/* Whether queues made on pd get their memory from the program's
 * allocator: mlx5 then ignores MLX_*_ALLOC_TYPE. */
bool qmem_custom(struct ibv_pd *pd)
{
	struct nvmock_pd *p = pd ? to_pd(pd) : NULL;

	return p && p->protection && p->alloc && p->free;
}

/* Gets size bytes of zeroed queue memory of mlx5's resource type for an
 * object made on pd (NULL: none), from the program's allocator if pd is a
 * parent domain with one. 0 or an errno. */
static int get(struct qmem *m, struct ibv_pd *pd, size_t size, size_t align, uint64_t type, bool custom_only)
{
	struct nvmock_pd *p = pd ? to_pd(pd) : NULL;

	*m = (struct qmem){ .type = type };
	if (qmem_custom(pd)) {
		void *mem = p->alloc(pd, p->pd_context, size, align, type);

		if (mem != IBV_ALLOCATOR_USE_DEFAULT) {
			if (!mem && size)
				return ENOMEM;
			memset(mem, 0, size);
			*m = (struct qmem){ .p = mem, .free = p->free, .pd = pd, .pd_context = p->pd_context, .type = type };
			return 0;
		}
	}
	if (custom_only)
		return 0;
	m->p = calloc(1, size ? size : 1);
	return m->p ? 0 : ENOMEM;
}

int qmem_get(struct qmem *m, struct ibv_pd *pd, size_t size, uint64_t type)
{
	return get(m, pd, size, (size_t)sysconf(_SC_PAGESIZE), type, false);
}

/* A doorbell record: mlx5 takes 8 bytes from the program's allocator, and
 * otherwise from its own pages, which the mock has no use for. */
int qmem_db(struct qmem *m, struct ibv_pd *pd)
{
	return get(m, pd, 8, 8, MLX5DV_RES_TYPE_DBR, true);
}

/* A queue's memory and its doorbell record, in mlx5's order; on failure
 * neither. 0 or an errno. */
int qmem_queue(struct qmem *mem, struct qmem *db, struct ibv_pd *pd, size_t size, uint64_t type)
{
	int err = qmem_get(mem, pd, size, type);

	if (!err && (err = qmem_db(db, pd)))
		qmem_put(mem);
	return err;
}

/* Gives m back to whoever gave it. The parent domain it came from may be
 * gone (mlx5 lets a program free it before an SRQ made on it, and then
 * reads the freed parent): the mock kept the allocator and its arguments. */
void qmem_put(struct qmem *m)
{
	if (m->free)
		m->free(m->pd, m->pd_context, m->p, m->type);
	else
		free(m->p);
	*m = (struct qmem){ 0 };
}

void domain_ops(struct verbs_context_ops *ops)
{
	ops->alloc_td = alloc_td;
	ops->dealloc_td = dealloc_td;
	ops->alloc_parent_domain = alloc_parent_domain;
}
