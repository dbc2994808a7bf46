//go:build ignore

/*
 * UC queue pairs (datapath.h): connected as RC ones are, and sending
 * messages of many packets, but unanswered. Sends and RDMA writes only.
 *
 * The requester's work request is done once its last packet has left. The
 * responder has no NAK to give, so what it cannot take is dropped, with no
 * completion and no change of state, as the IBA's error classes (and rxe,
 * the kernel's software HCA) have it for UC: a message with a gap, a write
 * the QP or the R_Key does not allow, a send or a write with immediate
 * that finds no receive (rxe's class D; with an SRQ, a one-packet write
 * with immediate and a bad R_Key completes the receive it took). A
 * message cut short by a lost packet leaves its receive for the next one
 * (with an SRQ it completes in error, REM_INV_REQ); rxe drops that next
 * message too, the mock takes it. A receive too short or not writable is
 * the responder's own error, as on RC: it completes with LOC_LEN_ERR or
 * LOC_PROT_ERR and the QP goes to ERR.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "datapath.h"

/* A failed request's error, once the requests before it have left (or,
 * binds, were done). */
void uc_fail_when_due(struct nvmock_qp *qp)
{
	if (qp->uc_err && qp->sq_head == qp->uc_err_n) {
		qp->uc_err = false;
		sq_error(qp, qp->uc_err_n, qp->uc_err_st);
	}
}

/* The request with message number seq has sent its last packet. */
void uc_sent(struct nvmock_qp *qp, uint32_t seq)
{
	uint32_t n = seq - qp->psn0;

	if ((uint32_t)(n - qp->sq_head) >= qp->sq_next - qp->sq_head)
		return; /* flushed meanwhile */
	qp->sq[n % qp->sq_size].done = true;
	retire(qp);
	uc_fail_when_due(qp);
	settle(qp);
}

/* A request that cannot be sent (its memory): the requests before it
 * still leave, and complete as they do, as an HCA works through its send
 * queue in order; then it fails, those after it flush, and the QP is in
 * SQE. Nothing more is sent meanwhile. Its packets already queued go, a
 * message the responder never sees end. */
void uc_send_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st)
{
	qp->sq_next = n;
	qp->uc_err = true;
	qp->uc_err_n = n;
	qp->uc_err_st = st;
	uc_fail_when_due(qp);
}

/* The message in progress is given up: its receive waits for the next,
 * or, taken from an SRQ, completes in error. */
static void cut(struct nvmock_qp *qp)
{
	if (qp->resp_rwqe && qp->srq) {
		recv_done(qp, &qp->rq[qp->rq_head % qp->rq_size], IBV_WC_REM_INV_REQ_ERR, NULL);
		qp->rq_head++;
	}
	qp->resp_rwqe = false;
	qp->resp_off = 0;
}

/* The responder's own error: the receive completes with st, and the QP
 * goes to ERR. */
static void local_error(struct nvmock_qp *qp, enum ibv_wc_status st)
{
	recv_done(qp, &qp->rq[qp->rq_head % qp->rq_size], st, NULL);
	qp->rq_head++;
	qp->resp_rwqe = false;
	qp->resp_skip = true;
	qp_error(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
}

static void drop(struct nvmock_qp *qp)
{
	qp->resp_skip = true;
}

void uc_respond(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len)
{
	struct nvmock_context *ctx = qp->ctx;
	struct rwqe *r = &qp->rq[qp->rq_head % qp->rq_size];
	bool last = p->flags & NVMOCK_PKT_LAST;
	struct nvmock_mr *mr;
	uint8_t *mem;

	if (p->offset == 0) {
		/* A first packet starts a message, whatever came before: no
		 * duplicates to tell apart, as nothing is sent again. */
		if (qp->resp_off)
			cut(qp);
		qp->resp_seq = p->seq;
		qp->resp_skip = false;
	} else if (qp->resp_skip || p->seq != qp->resp_seq || p->offset != qp->resp_off) {
		if (!qp->resp_skip)
			cut(qp);
		drop(qp);
		return;
	}
	qp->resp_off = p->offset + len;
	if (last && qp->resp_off != p->total) {
		cut(qp);
		drop(qp);
		return;
	}

	switch (p->kind) {
	case NVMOCK_PKT_SEND:
		if (p->offset == 0) {
			if (!take_recv(qp)) {
				drop(qp);
				return;
			}
			if (p->total > rwqe_len(r)) {
				local_error(qp, IBV_WC_LOC_LEN_ERR);
				return;
			}
			qp->resp_rwqe = true;
		}
		if (!scatter(qp, r->sge, r->nsge, p->offset, data, len)) {
			local_error(qp, IBV_WC_LOC_PROT_ERR);
			return;
		}
		if (last) {
			/* A send with invalidate names a type 2 window bound
			 * through this QP (mw.c); another is this side's error. */
			if ((p->flags & NVMOCK_PKT_INV) && !mw_invalidate(qp, p->imm)) {
				local_error(qp, IBV_WC_LOC_PROT_ERR);
				return;
			}
			recv_done(qp, r, IBV_WC_SUCCESS, p);
			qp->rq_head++;
			qp->resp_rwqe = false;
		}
		break;
	case NVMOCK_PKT_WRITE:
		if (p->offset == 0) {
			mr = find_mr(ctx, p->rkey);
			if (!(qp->access & IBV_ACCESS_REMOTE_WRITE)) {
				drop(qp);
				return;
			}
			/* A zero-length write checks no R_Key, as the IBA says. */
			if (p->total && (!mr_ptr(mr, p->raddr, p->total, true) || !mw_for(mr, qp) ||
					 !(mr->access & IBV_ACCESS_REMOTE_WRITE))) {
				/* rxe's UC class D: a one-packet write with
				 * immediate has taken an SRQ's receive by then,
				 * which completes in error. */
				if (last && (p->flags & NVMOCK_PKT_IMM) && qp->srq && take_recv(qp)) {
					recv_done(qp, r, IBV_WC_REM_ACCESS_ERR, NULL);
					qp->rq_head++;
				}
				drop(qp);
				return;
			}
		}
		/* The packet with the immediate needs a receive before it is
		 * written (what came before it stays written). */
		if (last && (p->flags & NVMOCK_PKT_IMM) && !take_recv(qp)) {
			drop(qp);
			return;
		}
		mr = find_mr(ctx, p->rkey);
		mem = len ? mr_ptr(mr, p->raddr + p->offset, len, true) : NULL;
		if (len && (!mem || !mr_copy(mr, mem, data, len, true))) {
			drop(qp); /* deregistered or unmapped meanwhile */
			return;
		}
		if (last && (p->flags & NVMOCK_PKT_IMM)) {
			recv_done(qp, r, IBV_WC_SUCCESS, p);
			qp->rq_head++;
		}
		break;
	default:
		drop(qp);
		return;
	}
	if (last) {
		qp->resp_off = 0;
		qp->resp_seq++;
	}
}
