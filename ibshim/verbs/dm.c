//go:build ignore

/*
 * Device memory (datapath.h): ibv_alloc_dm, ibv_free_dm, the copies in and
 * out of it, and ibv_reg_dm_mr, as mlx5 gives its MEMIC. The memory is the
 * process's here; what the program sees is the device's:
 *   - blocks of 64 bytes, at most max_dm_size in all (ENOMEM past it; a
 *     real device counts every process's, the mock a context's);
 *   - copies in whole 4-byte words at 4-byte offsets (EINVAL), within the
 *     length asked for (EFAULT);
 *   - regions on it are zero-based, with mlx5's access flags (EINVAL
 *     otherwise), and hold it: it cannot be freed while one does (EBUSY).
 * The data path reaches a region on it as any other (mr_ptr).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "datapath.h"

#define DM_BLOCK 64u

struct nvmock_dm {
	struct verbs_dm vdm;
	uint8_t *mem;
	size_t length, size; /* asked for, and taken (whole blocks) */
	uint32_t users;      /* regions on it */
};

static struct nvmock_dm *to_dm(struct ibv_dm *d) { return container_of(d, struct nvmock_dm, vdm.dm); }

/* mlx5_access_dm's checks, in its order. */
static int dm_check(struct nvmock_dm *dm, uint64_t off, size_t len)
{
	if (off + len > dm->length || off + len < off)
		return EFAULT;
	if ((len & 3) || (off & 3))
		return EINVAL;
	return 0;
}

/* A copy into the device memory (in) or out of it, under the lock: the
 * engine may be reading it for a peer. */
static int dm_copy(struct ibv_dm *d, uint64_t off, void *host, size_t len, bool in)
{
	struct nvmock_dm *dm = to_dm(d);
	struct nvmock_context *ctx = to_ctx(d->context);
	int err = dm_check(dm, off, len);

	if (err)
		return err;
	pthread_mutex_lock(&ctx->lock);
	if (in)
		memcpy(dm->mem + off, host, len);
	else
		memcpy(host, dm->mem + off, len);
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static int copy_to_dm(struct ibv_dm *d, uint64_t off, const void *from, size_t len)
{
	return dm_copy(d, off, (void *)from, len, true);
}

static int copy_from_dm(void *to, struct ibv_dm *d, uint64_t off, size_t len) { return dm_copy(d, off, to, len, false); }

static struct ibv_dm *alloc_dm(struct ibv_context *ibctx, struct ibv_alloc_dm_attr *a)
{
	struct nvmock_context *ctx = to_ctx(ibctx);
	struct nvmock_dm *dm;
	size_t size;

	/* mlx5: no comp_mask, at most max_dm_size; its firmware: something. */
	if (a->comp_mask || !a->length || a->length > NVMOCK_DM_SIZE) {
		errno = EINVAL;
		return NULL;
	}
	size = (a->length + DM_BLOCK - 1) / DM_BLOCK * DM_BLOCK;
	dm = calloc(1, sizeof(*dm));
	if (!dm)
		return NULL;
	dm->mem = calloc(1, size ? size : 1);
	if (!dm->mem) {
		free(dm);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&ctx->lock);
	if (ctx->dm_used + size > NVMOCK_DM_SIZE) {
		pthread_mutex_unlock(&ctx->lock);
		free(dm->mem);
		free(dm);
		errno = ENOMEM;
		return NULL;
	}
	ctx->dm_used += size;
	dm->vdm.handle = dm->vdm.dm.handle = ++ctx->next_dm;
	pthread_mutex_unlock(&ctx->lock);
	dm->length = a->length;
	dm->size = size;
	dm->vdm.dm.context = ibctx;
	dm->vdm.dm.comp_mask = IBV_DM_MASK_HANDLE;
	dm->vdm.dm.memcpy_to_dm = copy_to_dm;
	dm->vdm.dm.memcpy_from_dm = copy_from_dm;
	return &dm->vdm.dm;
}

static int free_dm(struct ibv_dm *d)
{
	struct nvmock_dm *dm = to_dm(d);
	struct nvmock_context *ctx = to_ctx(d->context);

	pthread_mutex_lock(&ctx->lock);
	if (dm->users) {
		pthread_mutex_unlock(&ctx->lock);
		return EBUSY; /* uverbs: a region still holds it */
	}
	ctx->dm_used -= dm->size;
	pthread_mutex_unlock(&ctx->lock);
	free(dm->mem);
	free(dm);
	return 0;
}

static struct ibv_mr *reg_dm_mr(struct ibv_pd *pd, struct ibv_dm *d, uint64_t off, size_t len, unsigned int access)
{
	const unsigned int allowed = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_OPTIONAL_RANGE;
	struct nvmock_dm *dm = to_dm(d);
	struct nvmock_context *ctx = to_ctx(pd->context);
	struct nvmock_mr *mr;

	/* mlx5's flags, libibverbs' zero base, the kernel's range. */
	if ((access & ~allowed) || !(access & IBV_ACCESS_ZERO_BASED) || d->context != pd->context ||
	    off > dm->length || len > dm->length - off) {
		errno = EINVAL;
		return NULL;
	}
	mr = new_mr(pd, dm->mem + off, len, 0, access);
	if (!mr)
		return NULL;
	/* libibverbs gives no address: the mapping is the device's. */
	mr->vmr.ibv_mr.addr = NULL;
	pthread_mutex_lock(&ctx->lock);
	mr->dm = &dm->users;
	dm->users++;
	pthread_mutex_unlock(&ctx->lock);
	return &mr->vmr.ibv_mr;
}

void dm_ops(struct verbs_context_ops *ops)
{
	ops->alloc_dm = alloc_dm;
	ops->free_dm = free_dm;
	ops->reg_dm_mr = reg_dm_mr;
}
