//go:build ignore

/*
 * Extended CQs (datapath.h): ibv_create_cq_ex and the polling API of
 * struct ibv_cq_ex (start_poll, next_poll, end_poll and the read_*
 * functions), over the same ring as ibv_poll_cq's. Completion timestamps
 * are in ticks of the clock the device reports (hca_core_clock, kHz),
 * taken when the completion is written; completion_timestamp_mask lets
 * them run for ever.
 *
 * The work-completion fields a CQ may be asked for are mlx5's: the
 * standard ones, the device's timestamp and the wall clock's; VLANs, flow
 * tags (raw packets') and tag matching's, which no completion here
 * carries. Of the creation flags, single-threaded and IGNORE_OVERRUN (a
 * full CQ then loses completions without an error). A parent domain may
 * give the ring's memory (domain.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>

#include "datapath.h"

static struct nvmock_cq *xcq(struct ibv_cq_ex *x) { return container_of(x, struct nvmock_cq, cqx); }

/* Takes the next completion into cur; ctx->lock is held. */
static int take(struct nvmock_cq *cq)
{
	if (!cq->count)
		return ENOENT;
	cq->cur = cq->ring[cq->head];
	cq->cur_ts = cq->ts[cq->head];
	cq->head = (cq->head + 1) % cq->size;
	cq->count--;
	cq->cqx.wr_id = cq->cur.wr_id;
	cq->cqx.status = cq->cur.status;
	return 0;
}

static int start_poll(struct ibv_cq_ex *x, struct ibv_poll_cq_attr *attr)
{
	struct nvmock_context *ctx = to_ctx(x->context);
	struct nvmock_cq *cq = xcq(x);
	int err;

	if (attr->comp_mask)
		return EINVAL;
	/* As mlx5: from start_poll to end_poll the CQ is this thread's,
	 * unless it was made single-threaded. */
	if (cq->poll_shared)
		pthread_mutex_lock(&cq->poll);
	pthread_mutex_lock(&ctx->lock);
	/* As poll_cq: a program polling an empty CQ moves the traffic. */
	if (!cq->count && progress(ctx))
		wake(ctx);
	err = take(cq);
	pthread_mutex_unlock(&ctx->lock);
	if (err && cq->poll_shared)
		pthread_mutex_unlock(&cq->poll); /* no end_poll follows */
	return err;
}

static int next_poll(struct ibv_cq_ex *x)
{
	struct nvmock_context *ctx = to_ctx(x->context);
	int err;

	pthread_mutex_lock(&ctx->lock);
	err = take(xcq(x));
	pthread_mutex_unlock(&ctx->lock);
	return err;
}

/* take consumed the entries already. */
static void end_poll(struct ibv_cq_ex *x)
{
	struct nvmock_cq *cq = xcq(x);

	if (cq->poll_shared)
		pthread_mutex_unlock(&cq->poll);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *x) { return xcq(x)->cur.opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *x) { return xcq(x)->cur.vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *x) { return xcq(x)->cur.byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex *x) { return xcq(x)->cur.imm_data; }
static uint32_t read_qp_num(struct ibv_cq_ex *x) { return xcq(x)->cur.qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *x) { return xcq(x)->cur.src_qp; }
static unsigned int read_wc_flags(struct ibv_cq_ex *x) { return xcq(x)->cur.wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *x) { return xcq(x)->cur.slid; }
static uint8_t read_sl(struct ibv_cq_ex *x) { return xcq(x)->cur.sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *x) { return xcq(x)->cur.dlid_path_bits; }

/* A time in ticks of the device's clock. */
static uint64_t ticks(uint64_t ns)
{
	return ns / 1000000 * NVMOCK_HCA_CLOCK_KHZ + ns % 1000000 * NVMOCK_HCA_CLOCK_KHZ / 1000000;
}

/* The completion's time in ticks of the device's clock. */
static uint64_t read_completion_ts(struct ibv_cq_ex *x)
{
	struct nvmock_cq *cq = xcq(x);

	return ticks((uint64_t)cq->cur_ts);
}

/* The completion's wall-clock time, in ns: mlx5 converts the device's
 * clock by the kernel's clock page, the mock its own by the offset taken
 * when the CQ was made. */
static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *x)
{
	struct nvmock_cq *cq = xcq(x);

	return (uint64_t)(cq->cur_ts + cq->wall_off);
}

/* Fields no completion of an InfiniBand CQ carries here: VLANs and flow
 * tags are raw packets', and tag matching is not simulated (no TM SRQ can
 * be made); mlx5 takes CQs that ask for them. */
static uint16_t read_cvlan(struct ibv_cq_ex *x) { (void)x; return 0; }
static uint32_t read_flow_tag(struct ibv_cq_ex *x) { (void)x; return 0; }
static void read_tm_info(struct ibv_cq_ex *x, struct ibv_wc_tm_info *info)
{
	(void)x;
	*info = (struct ibv_wc_tm_info){ 0 };
}

/* The device's clock now, as mlx5 gives it (its ticks in raw_clock's
 * nanoseconds field), on the completions' time base. */
static int query_rt_values(struct ibv_context *ibctx, struct ibv_values_ex *v)
{
	uint32_t mask = 0;

	(void)ibctx;
	if (v->comp_mask & ~(uint32_t)IBV_VALUES_MASK_RAW_CLOCK)
		return EINVAL;
	if (v->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		v->raw_clock.tv_sec = 0;
		v->raw_clock.tv_nsec = (long)ticks((uint64_t)now_ns());
		mask |= IBV_VALUES_MASK_RAW_CLOCK;
	}
	v->comp_mask = mask;
	return 0;
}

static struct ibv_cq_ex *create_cq_ex(struct ibv_context *ibctx, struct ibv_cq_init_attr_ex *a)
{
	/* mlx5's fields, masks and flags (create_cq in its verbs.c). */
	const uint64_t fields = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_CVLAN |
				IBV_WC_EX_WITH_FLOW_TAG | IBV_WC_EX_WITH_TM_INFO |
				IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
	const uint32_t masks = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD,
		       flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	const uint32_t asked = a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS ? a->flags : 0;
	struct nvmock_cq *cq;
	struct ibv_cq_ex *x;

	if ((a->comp_mask & ~masks) || (asked & ~flags)) {
		errno = EINVAL;
		return NULL;
	}
	if (a->wc_flags & ~fields) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* mlx5 takes only a parent domain there. */
	if (a->cqe > INT32_MAX ||
	    ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && (!a->parent_domain || !to_pd(a->parent_domain)->protection))) {
		errno = EINVAL;
		return NULL;
	}
	cq = new_cq(ibctx, (int)a->cqe, a->channel, (int)a->comp_vector, true,
		    a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD ? a->parent_domain : NULL);
	if (!cq)
		return NULL;
	/* libibverbs' wrapper sets up the ibv_cq part (verbs_init_cq)
	 * once this returns, the channel's reference with it. */
	cq->poll_shared = !(asked & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
	cq->ignore_overrun = asked & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
	{
		struct timespec rt;

		clock_gettime(CLOCK_REALTIME, &rt);
		cq->wall_off = (int64_t)rt.tv_sec * 1000000000LL + rt.tv_nsec - now_ns();
	}
	pthread_mutex_init(&cq->poll, NULL);
	x = &cq->cqx;
	x->start_poll = start_poll;
	x->next_poll = next_poll;
	x->end_poll = end_poll;
	x->read_opcode = read_opcode;
	x->read_vendor_err = read_vendor_err;
	x->read_byte_len = read_byte_len;
	x->read_imm_data = read_imm_data;
	x->read_qp_num = read_qp_num;
	x->read_src_qp = read_src_qp;
	x->read_wc_flags = read_wc_flags;
	x->read_slid = read_slid;
	x->read_sl = read_sl;
	x->read_dlid_path_bits = read_dlid_path_bits;
	x->read_completion_ts = read_completion_ts;
	x->read_completion_wallclock_ns = read_completion_wallclock_ns;
	x->read_cvlan = read_cvlan;
	x->read_flow_tag = read_flow_tag;
	x->read_tm_info = read_tm_info;
	return x;
}

void cqex_ops(struct verbs_context_ops *ops)
{
	ops->create_cq_ex = create_cq_ex;
	ops->query_rt_values = query_rt_values;
}
