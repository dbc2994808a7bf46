//go:build ignore

/*
 * XRC (datapath.h): domains, and the two QP types that use XRC SRQs
 * (srq.c). An initiator (XRC_SEND) is an RC requester whose every request
 * names an SRQ at the far end (the IBA's XRCETH, the packet's srqn). A
 * target (XRC_RECV) is an RC responder with no PD, CQs or queues of its
 * own: each message it takes must name an SRQ of the target's domain; a
 * send takes that SRQ's next receive and completes into that SRQ's CQ, and
 * RDMA requests are checked against that SRQ's PD.
 *
 * Domains are opened as the kernel opens them: fd -1 makes one of its own;
 * a file names a shared one, which O_CREAT makes if it does not exist and
 * O_EXCL refuses if it does. A handle closes with EBUSY while SRQs or
 * targets made through it live.
 *
 * The mock knows the domains of one process only: whether another
 * process has a file's domain open is not known (O_CREAT and O_EXCL judge
 * by this process's), and a target takes messages for the SRQs of its own
 * context; one naming another's, even of the same domain, is refused as an
 * invalid request, with a trace. ibv_open_qp (another process's target) is
 * not simulated.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "datapath.h"

struct xrc_domain {
	struct xrc_domain *next;
	bool named; /* by a file: in the list, which open_xrcd searches */
	char ibdev[IBV_SYSFS_NAME_MAX];
	dev_t dev;
	ino_t ino;
	uint32_t refs; /* handles open on it */
};

/* The kernel keeps the file domains per device; these are this process's. */
static pthread_mutex_t domains_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xrc_domain *domains;

static struct xrc_domain *find_domain(const char *ibdev, const struct stat *st)
{
	struct xrc_domain *d;

	for (d = domains; d; d = d->next)
		if (d->dev == st->st_dev && d->ino == st->st_ino && !strcmp(d->ibdev, ibdev))
			return d;
	return NULL;
}

static struct ibv_xrcd *open_xrcd(struct ibv_context *ibctx, struct ibv_xrcd_init_attr *a)
{
	const char *ibdev = ibctx->device->name;
	struct xrc_domain *d = NULL;
	struct nvmock_xrcd *x;
	struct stat st;
	int err = 0;

	/* libibverbs' checks (ibv_cmd_open_xrcd), then the kernel's. */
	if (a->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(a->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
		errno = EINVAL;
		return NULL;
	}
	if (a->fd != -1 && fstat(a->fd, &st)) {
		errno = EBADF;
		return NULL;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	pthread_mutex_lock(&domains_lock);
	if (a->fd != -1) {
		d = find_domain(ibdev, &st);
		if (!d && !(a->oflags & O_CREAT))
			err = EAGAIN;
		else if (d && (a->oflags & O_EXCL))
			err = EINVAL;
	}
	if (!err && !d) {
		d = calloc(1, sizeof(*d));
		if (!d) {
			err = ENOMEM;
		} else if (a->fd != -1) {
			d->named = true;
			snprintf(d->ibdev, sizeof(d->ibdev), "%s", ibdev);
			d->dev = st.st_dev;
			d->ino = st.st_ino;
			d->next = domains;
			domains = d;
		}
	}
	if (!err)
		d->refs++;
	pthread_mutex_unlock(&domains_lock);
	if (err) {
		free(x);
		errno = err;
		return NULL;
	}
	x->dom = d;
	x->vx.xrcd.context = ibctx;
	return &x->vx.xrcd;
}

static int close_xrcd(struct ibv_xrcd *xrcd)
{
	struct nvmock_xrcd *x = container_of(xrcd, struct nvmock_xrcd, vx.xrcd);
	struct nvmock_context *ctx = to_ctx(xrcd->context);
	struct xrc_domain *d = x->dom, **p;
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	busy = x->users > 0;
	pthread_mutex_unlock(&ctx->lock);
	if (busy)
		return EBUSY; /* as uverbs answers while objects use the handle */
	pthread_mutex_lock(&domains_lock);
	if (--d->refs == 0) {
		for (p = &domains; *p; p = &(*p)->next)
			if (*p == d) {
				*p = d->next;
				break;
			}
		free(d);
	}
	pthread_mutex_unlock(&domains_lock);
	free(x);
	return 0;
}

/* xrc_target finds the SRQ a request to a target names, which must be an
 * XRC SRQ of the target's domain, and makes it the SRQ of the message in
 * progress. ctx->lock is held. */
bool xrc_target(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p)
{
	struct nvmock_srq *s = qp->srq;

	if (!s || s->srqn != p->srqn)
		for (s = qp->ctx->srqs; s && s->srqn != p->srqn; s = s->next)
			;
	if (!s || !s->xrcd || s->xrcd->dom != qp->xrcd->dom) {
		trace("XRC target %#x: SRQ %#x is no XRC SRQ of its domain in this process (another process's is not simulated)",
		      qp->vqp.qp.qp_num, p->srqn);
		return false;
	}
	qp->srq = s;
	return true;
}

/* The PD a QP's memory is checked against: an XRC target's is its
 * message's SRQ's, for the receive it scatters into and the R_Keys. */
struct nvmock_pd *resp_pd(struct nvmock_qp *qp)
{
	if (qp->tgt)
		return qp->srq ? qp->srq->dom : NULL;
	return qp->dom;
}

/* An XRC SRQ is destroyed: targets serving a message for it drop the
 * receive they took. ctx->lock is held. */
void xrc_srq_gone(struct nvmock_context *ctx, struct nvmock_srq *srq)
{
	uint32_t i;

	for (i = 0; i < NVMOCK_IBD_QPN_BLOCK; i++) {
		struct nvmock_qp *qp = ctx->qps ? ctx->qps[i] : NULL;

		if (qp && qp->tgt && qp->srq == srq) {
			qp->rq_head = qp->rq_tail;
			qp->resp_rwqe = false;
			qp->srq = NULL;
		}
	}
}

void xrc_ops(struct verbs_context_ops *ops)
{
	ops->open_xrcd = open_xrcd;
	ops->close_xrcd = close_xrcd;
}
