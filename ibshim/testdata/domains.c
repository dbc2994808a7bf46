/*
 * domains: checks parent and thread domains on one mock HCA as mlx5 gives
 * them: what they refuse, what keeps them (EBUSY), that a parent domain
 * stands for its PD, and that its allocators give the queues' memory with
 * mlx5's resource types. Built and run by ibshim/datapath_test.go inside
 * `nvmock exec` (under valgrind); prints "ok <check>" per check and exits
 * non-zero at the first that fails.
 *
 * Usage: domains DEVICE
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

static struct ibv_context *ctx;
static uint16_t lid;

#include "verbs_util.h"

/* The allocator's book: what it gave and has not got back. */
enum { NONE, USE_DEFAULT, REFUSE } mode;
static struct given { void *p; size_t size, align; uint64_t type; } given[64];
static int n_given, n_alloc[6], n_freed;
static void *seen_pd, *seen_context;

static void *alloc(struct ibv_pd *pd, void *pd_context, size_t size, size_t align, uint64_t type)
{
	void *p;

	seen_pd = pd;
	seen_context = pd_context;
	n_alloc[type & 7]++;
	if (mode == USE_DEFAULT)
		return IBV_ALLOCATOR_USE_DEFAULT;
	if (mode == REFUSE || n_given == 64 || posix_memalign(&p, align, size ? size : 1))
		return NULL;
	memset(p, 0xa5, size); /* what a program's memory may hold */
	given[n_given++] = (struct given){ p, size, align, type };
	return p;
}

static void release(struct ibv_pd *pd, void *pd_context, void *p, uint64_t type)
{
	int i;

	(void)pd;
	(void)pd_context;
	/* An allocator may call verbs: one that takes the provider's lock. */
	if (ibv_dealloc_pd(ibv_alloc_pd(ctx)))
		FAIL("a verb in the allocator's free");
	for (i = 0; i < n_given && given[i].p != p; i++)
		;
	if (i == n_given || given[i].type != type)
		FAIL("free of %p (type %#llx) that the allocator did not give", p, (unsigned long long)type);
	free(p);
	given[i] = given[--n_given];
	n_freed++;
}

static int has(uint64_t type, size_t min)
{
	int i, n = 0;

	for (i = 0; i < n_given; i++)
		if (given[i].type == type && given[i].size >= min)
			n++;
	return n;
}

static struct ibv_qp *rc(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = srq ? 0 : 16, .max_send_sge = 2, .max_recv_sge = srq ? 0 : 2,
			 .max_inline_data = 64 } };

	return ibv_create_qp(pd, &a);
}

int main(int argc, char **argv)
{
	struct ibv_pd *pd, *other, *parent, *nested, *plain;
	struct ibv_td *td;
	struct ibv_cq *cq, *pcq;
	struct ibv_cq_ex *xcq;
	struct ibv_qp *qa, *qb, *qc;
	struct ibv_srq *srq;
	struct ibv_mr *mr, *omr;
	struct ibv_wc wc;
	char buf[2][4096];
	int i, err, ctxmark;

	if (argc != 2)
		FAIL("usage: domains DEVICE");
	alarm(60); /* a provider that calls the allocator under its lock hangs */
	open_device(argv[1]);
	pd = ibv_alloc_pd(ctx);
	other = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!pd || !other || !cq)
		FAIL("a PD and a CQ: %s", strerror(errno));

	/* What mlx5 refuses, and what a thread domain and a parent hold. */
	if (ibv_alloc_td(ctx, &(struct ibv_td_init_attr){ .comp_mask = 1 }) || errno != EINVAL)
		FAIL("a thread domain with a comp_mask: want EINVAL");
	if (!(td = ibv_alloc_td(ctx, &(struct ibv_td_init_attr){ 0 })))
		FAIL("ibv_alloc_td: %s", strerror(errno));
	if (ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){ 0 }) || errno != EINVAL)
		FAIL("a parent domain of no PD: want EINVAL");
	if (ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){ .pd = pd, .comp_mask = 4 }) ||
	    errno != EINVAL)
		FAIL("a parent domain with an unknown comp_mask: want EINVAL");
	parent = ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){ .pd = pd, .td = td,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = alloc, .free = release, .pd_context = &ctxmark });
	plain = ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){ .pd = pd });
	if (!parent || !plain)
		FAIL("ibv_alloc_parent_domain: %s", strerror(errno));
	if (parent->context != ctx || parent->handle != pd->handle)
		FAIL("a parent domain's context and handle are its PD's");
	if ((err = ibv_dealloc_pd(pd)) != EBUSY || (err = ibv_dealloc_td(td)) != EBUSY)
		FAIL("freeing a PD or thread domain a parent holds: %s, want EBUSY", strerror(err));
	/* A parent over a parent holds the PD beneath, as mlx5 counts it:
	 * the inner parent may go first. */
	if (!(nested = ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){ .pd = plain })))
		FAIL("a parent domain over a parent: %s", strerror(errno));
	if ((err = ibv_dealloc_pd(plain)))
		FAIL("freeing a parent another was made over: %s, want success", strerror(err));
	if ((err = ibv_dealloc_pd(pd)) != EBUSY)
		FAIL("freeing the PD beneath a parent over a parent: %s, want EBUSY", strerror(err));
	if ((err = ibv_dealloc_pd(nested)))
		FAIL("freeing the outer parent: %s", strerror(err));
	puts("ok hold");

	/* A CQ may take only a parent domain; its ring and doorbell record
	 * come from the allocator, and it holds the parent. */
	struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd };
	if (ibv_create_cq_ex(ctx, &ca) || errno != EINVAL)
		FAIL("an extended CQ with a PD for a parent domain: want EINVAL");
	ca.parent_domain = parent;
	if (!(xcq = ibv_create_cq_ex(ctx, &ca)))
		FAIL("an extended CQ with a parent domain: %s", strerror(errno));
	pcq = ibv_cq_ex_to_cq(xcq);
	if (has(MLX5DV_RES_TYPE_CQ, 64) != 1 || has(MLX5DV_RES_TYPE_DBR, 8) != 1 || seen_pd != parent ||
	    seen_context != &ctxmark)
		FAIL("the CQ's memory: %d CQ and %d doorbell allocations of the parent's, want 1 and 1", has(MLX5DV_RES_TYPE_CQ, 64),
		     has(MLX5DV_RES_TYPE_DBR, 8));
	for (i = 0; i < n_given; i++)
		if (given[i].align != (given[i].type == MLX5DV_RES_TYPE_DBR ? 8 : (size_t)sysconf(_SC_PAGESIZE)))
			FAIL("allocation of type %#llx aligned to %zu", (unsigned long long)given[i].type, given[i].align);
	if ((err = ibv_resize_cq(pcq, 500)) || has(MLX5DV_RES_TYPE_CQ, 500) != 1 || n_freed != 1)
		FAIL("resizing the parent's CQ: %s, %d rings of 500, %d freed; want the old ring freed", strerror(err),
		     has(MLX5DV_RES_TYPE_CQ, 500), n_freed);
	puts("ok cq");

	/* QPs on the parent: their queues come from the allocator. A region
	 * registered on the parent is its PD's: a QP made on the PD uses it,
	 * and the parent's QP uses one made on the PD; another PD's fails. */
	qa = rc(parent, pcq, NULL);
	qb = rc(pd, cq, NULL);
	if (!qa || !qb)
		FAIL("RC QPs on the parent and on its PD: %s", strerror(errno));
	if (qa->pd != parent || has(MLX5DV_RES_TYPE_QP, 1) != 1 || has(MLX5DV_RES_TYPE_DBR, 8) != 2)
		FAIL("the QP's memory: %d QP and %d doorbell allocations, want 1 and 2", has(MLX5DV_RES_TYPE_QP, 1),
		     has(MLX5DV_RES_TYPE_DBR, 8));
	to_rts(qa, qb->qp_num);
	to_rts(qb, qa->qp_num);
	mr = ibv_reg_mr(parent, buf[0], sizeof(buf[0]), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	omr = ibv_reg_mr(pd, buf[1], sizeof(buf[1]), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr || !omr || mr->pd != parent)
		FAIL("regions on the parent and the PD: %s", strerror(errno));
	memset(buf[0], 'x', sizeof(buf[0]));
	{
		struct ibv_sge s = { (uintptr_t)buf[0], 4096, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { (uintptr_t)buf[1], omr->rkey } }, *bad;

		if ((err = ibv_post_send(qa, &w, &bad)))
			FAIL("write from the parent's QP: %s", strerror(err));
		wc = wait_wc(pcq, "write from the parent's QP");
		if (wc.status != IBV_WC_SUCCESS || memcmp(buf[0], buf[1], 4096))
			FAIL("write from the parent's QP into the PD's region: %s", ibv_wc_status_str(wc.status));
		memset(buf[1], 'y', sizeof(buf[1]));
		s = (struct ibv_sge){ (uintptr_t)buf[1], 4096, omr->lkey };
		w.wr.rdma = (typeof(w.wr.rdma)){ (uintptr_t)buf[0], mr->rkey };
		if ((err = ibv_post_send(qb, &w, &bad)))
			FAIL("write from the PD's QP: %s", strerror(err));
		wc = wait_wc(cq, "write from the PD's QP");
		if (wc.status != IBV_WC_SUCCESS || memcmp(buf[0], buf[1], 4096))
			FAIL("write from the PD's QP into the parent's region: %s", ibv_wc_status_str(wc.status));
	}
	{
		struct ibv_mr *xmr = ibv_reg_mr(other, buf[1], sizeof(buf[1]), IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge s = { (uintptr_t)buf[1], 64, xmr ? xmr->lkey : 0 };
		struct ibv_send_wr w = { .wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
			.send_flags = IBV_SEND_SIGNALED, .wr.rdma = { (uintptr_t)buf[0], mr->rkey } }, *bad;

		if (!xmr || (err = ibv_post_send(qa, &w, &bad)))
			FAIL("write from another PD's region: %s", strerror(xmr ? err : errno));
		wc = wait_wc(pcq, "write from another PD's region");
		if (wc.status != IBV_WC_LOC_PROT_ERR)
			FAIL("write from another PD's region: %s, want local protection error", ibv_wc_status_str(wc.status));
		ibv_dereg_mr(xmr);
	}
	puts("ok stands-for-its-pd");

	/* The parent cannot go while its QP and CQ live; an SRQ on it takes
	 * its memory there too. Everything it gave comes back. (mlx5 does not
	 * count SRQs, so it frees a parent with one; the SRQ's destroy then
	 * reads the freed parent for its allocator: not a program's to do.) */
	if ((err = ibv_dealloc_pd(parent)) != EBUSY)
		FAIL("freeing a parent with a QP and a CQ: %s, want EBUSY", strerror(err));
	if (!(srq = ibv_create_srq(parent, &(struct ibv_srq_init_attr){ .attr = { .max_wr = 8, .max_sge = 1 } })) ||
	    has(MLX5DV_RES_TYPE_SRQ, 1) != 1)
		FAIL("an SRQ on the parent: %s", srq ? "not from the allocator" : strerror(errno));
	if (!(qc = rc(parent, cq, NULL)) || ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_destroy_cq(pcq) ||
	    ibv_destroy_srq(srq))
		FAIL("destroying the QPs, the CQ and the SRQ");
	if ((err = ibv_dealloc_pd(parent)) != EBUSY || ibv_destroy_qp(qc))
		FAIL("freeing a parent with a QP: %s, want EBUSY", strerror(err));
	if ((err = ibv_dealloc_pd(parent)) || n_given)
		FAIL("freeing the parent: %s, %d allocations not given back", strerror(err), n_given);
	if ((err = ibv_dealloc_pd(pd)) != EBUSY)
		FAIL("freeing a PD with regions: %s, want EBUSY", strerror(err));
	puts("ok give-back");

	/* An allocator that leaves it to the provider, and one that fails. */
	parent = ibv_alloc_parent_domain(ctx, &(struct ibv_parent_domain_init_attr){ .pd = pd,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, .alloc = alloc, .free = release });
	mode = USE_DEFAULT;
	memset(n_alloc, 0, sizeof(n_alloc));
	if (!(qa = rc(parent, cq, NULL)) || n_alloc[MLX5DV_RES_TYPE_QP & 7] != 1 || n_alloc[MLX5DV_RES_TYPE_DBR & 7] != 1 ||
	    ibv_destroy_qp(qa))
		FAIL("a QP whose allocator answers USE_DEFAULT: %s", qa ? "allocator not asked once for each" : strerror(errno));
	mode = REFUSE;
	if (rc(parent, cq, NULL) || errno != ENOMEM)
		FAIL("a QP whose allocator fails: want ENOMEM");
	if (n_given || ibv_dealloc_pd(parent) || ibv_dealloc_td(td))
		FAIL("freeing the parent and the thread domain");
	puts("ok allocator-answers");

	ibv_dereg_mr(mr);
	ibv_dereg_mr(omr);
	if (ibv_destroy_cq(cq) || ibv_dealloc_pd(pd) || ibv_dealloc_pd(other) || ibv_close_device(ctx))
		FAIL("tearing down");
	return 0;
}
