//go:build ignore

/* The responder: what a QP does with the requests that reach it (datapath.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "datapath.h"

/* ---- the responder ---- */

static void answer(struct nvmock_qp *qp, uint8_t kind, uint32_t seq, uint8_t syndrome)
{
	struct out_pkt *o = new_pkt(qp, kind, seq);

	if (!o)
		return; /* lost: the requester retries */
	o->hdr.flags |= NVMOCK_PKT_LAST;
	o->hdr.syndrome = syndrome;
	if (syndrome == NVMOCK_NAK_RNR)
		o->hdr.timer = qp->min_rnr_timer;
	queue(qp->ctx, o);
}

/* No async event: the error is in a completion, or there is none. */
#define NO_EVENT (-1)

/* The responder refuses a message: NAK, and the rest of it is dropped.
 * Access and request errors also end the responder's QP, as an HCA's: its
 * own work is flushed. Where no receive carries the error, the responder
 * learns of it by an affiliated async event (NVIDIA's RDMA Aware
 * Programming manual): QP_ACCESS_ERR for an R_Key violation or a
 * misaligned atomic, QP_REQ_ERR for an operation the QP does not take. */
static void refuse(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, uint8_t syndrome, int event)
{
	answer(qp, NVMOCK_PKT_NAK, p->seq, syndrome);
	qp->resp_skip = true;
	if (syndrome == NVMOCK_NAK_RNR)
		return;
	if (event != NO_EVENT)
		raise_qp_event(qp, event);
	qp_error(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
}

/* Answers an atomic again with the value it found, if still remembered. */
static void atomic_again(struct nvmock_qp *qp, uint32_t seq)
{
	uint32_t i, kept = qp->atomics < ATOMIC_REPLAY ? qp->atomics : ATOMIC_REPLAY;

	for (i = 0; i < kept; i++) {
		uint32_t k = (qp->atomics - 1 - i) % ATOMIC_REPLAY;
		struct out_pkt *o;

		if (qp->atomic_seq[k] != seq)
			continue;
		o = new_pkt(qp, NVMOCK_PKT_ATOMIC_RESP, seq);
		if (o) {
			o->hdr.flags |= NVMOCK_PKT_LAST;
			o->hdr.atomic[0] = qp->atomic_val[k];
			queue(qp->ctx, o);
		}
		return;
	}
}

uint32_t rwqe_len(struct rwqe *r)
{
	uint64_t n = 0;
	int i;

	for (i = 0; i < r->nsge; i++)
		n += r->sge[i].length;
	return n > UINT32_MAX ? UINT32_MAX : n;
}

/* A datagram: into the next receive, after the 40 bytes a GRH takes
 * (filled only when one came), or nowhere: a UD QP answers nothing, so one
 * with no receive posted or another Q_Key drops it. */
static void datagram(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len)
{
	struct rwqe *r = &qp->rq[qp->rq_head % qp->rq_size];
	struct nvmock_ibd_pkt h = *p;
	const union ibv_gid *dgid = &qp->ctx->gid;

	/* To a group: only to a QP attached to it (told by its GID, as two
	 * groups may share an MLID), whose GID is the destination. */
	if (p->flags & NVMOCK_PKT_MCAST) {
		if (len < 16 || !(dgid = mc_gid(qp, p->dlid, data)))
			return;
		/* Blocked loopback: not back to the QP that sent it (as IPoIB
		 * asks, so as not to hear itself). */
		if (qp->no_self_mc && p->sqpn == qp->vqp.qp.qp_num && p->slid == qp->ctx->lid)
			return;
		data += 16;
		len -= 16;
		h.total -= 16;
	}
	if (p->offset || len != h.total || p->rkey != qp->qkey || !take_recv(qp))
		return;
	if (40 + (uint64_t)len > rwqe_len(r)) {
		recv_done(qp, r, IBV_WC_LOC_LEN_ERR, NULL);
		qp->rq_head++;
		qp_error(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
		return;
	}
	if (p->flags & NVMOCK_PKT_GRH) {
		uint8_t grh[40] = { 0x60 }; /* IP version 6, as a GRH starts */

		grh[4] = len >> 8; /* payload length */
		grh[5] = len;
		grh[6] = 0x1b;     /* next header: IBA transport */
		grh[7] = 64;       /* hop limit */
		memcpy(grh + 8, p->atomic, 16);          /* source GID */
		memcpy(grh + 24, dgid->raw, 16);         /* destination GID */
		if (!scatter(qp, r->sge, r->nsge, 0, grh, sizeof(grh)))
			goto prot;
	}
	if (!scatter(qp, r->sge, r->nsge, 40, data, len))
		goto prot;
	h.total = 40 + len;
	recv_done(qp, r, IBV_WC_SUCCESS, &h);
	qp->rq_head++;
	return;
prot:
	recv_done(qp, r, IBV_WC_LOC_PROT_ERR, NULL);
	qp->rq_head++;
	qp_error(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
}

void respond(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len)
{
	struct nvmock_context *ctx = qp->ctx;
	int32_t ahead = (int32_t)(p->seq - qp->resp_seq);
	bool last = p->flags & NVMOCK_PKT_LAST;
	struct rwqe *r = &qp->rq[qp->rq_head % qp->rq_size];
	struct nvmock_mr *mr;
	uint8_t *mem;

	if (qp->ud) {
		datagram(qp, p, data, len);
		return;
	}
	if (qp->uc) {
		uc_respond(qp, p, data, len);
		return;
	}
	/* An initiator only sends: a request to it is the IBA's unexpected
	 * opcode, an invalid request. */
	if (qp->xrc && !qp->tgt) {
		if (p->flags & NVMOCK_PKT_LAST)
			answer(qp, NVMOCK_PKT_NAK, p->seq, NVMOCK_NAK_INVALID_REQ);
		return;
	}
	/* The sender's own work (a bind) numbers a work request, and no
	 * message shows it: the next message says how many came between. */
	if (ahead > 0 && (uint32_t)ahead == p->gap && p->offset == 0) {
		qp->resp_seq = p->seq;
		ahead = 0;
	}
	if (ahead < 0) {
		/* A duplicate of one done: answer again, do not do again. */
		if (!last)
			return;
		if (p->kind == NVMOCK_PKT_CMP_SWP || p->kind == NVMOCK_PKT_FETCH_ADD) {
			atomic_again(qp, p->seq);
			return;
		}
		if (p->kind != NVMOCK_PKT_READ) {
			answer(qp, NVMOCK_PKT_ACK, p->seq, 0);
			return;
		}
		/* A read is done again: it changes nothing. */
	} else if (ahead > 0) {
		return; /* after a NAK, until the requester goes back */
	}
	/* In order and without a gap: a packet anywhere but at the next
	 * offset waits for the requester to send the message again from its
	 * start (a lost packet, then its timeout). */
	if (p->offset == 0) {
		qp->resp_skip = false;
	} else if (qp->resp_skip || p->offset != qp->resp_off) {
		return;
	}
	if (p->kind == NVMOCK_PKT_SEND || p->kind == NVMOCK_PKT_WRITE) {
		qp->resp_off = p->offset + len;
		if (last && qp->resp_off != p->total)
			return;
	}
	if (last)
		qp->resp_off = 0; /* the next message starts at 0 */
	/* A target serves each message for the SRQ it names. */
	if (qp->tgt && !xrc_target(qp, p)) {
		refuse(qp, p, NVMOCK_NAK_INVALID_REQ, IBV_EVENT_QP_REQ_ERR);
		return;
	}

	switch (p->kind) {
	case NVMOCK_PKT_SEND:
		if (p->offset == 0) {
			if (!take_recv(qp)) {
				refuse(qp, p, NVMOCK_NAK_RNR, NO_EVENT);
				return;
			}
			if (p->total > rwqe_len(r)) {
				recv_done(qp, r, IBV_WC_LOC_LEN_ERR, NULL);
				qp->rq_head++;
				refuse(qp, p, NVMOCK_NAK_INVALID_REQ, NO_EVENT);
				return;
			}
			qp->resp_rwqe = true;
		}
		if (!qp->resp_rwqe)
			return;
		if (!scatter(qp, r->sge, r->nsge, p->offset, data, len)) {
			/* The receive's own memory failed it: the IBA's Remote
			 * Operational Error, not the sender's fault. */
			recv_done(qp, r, IBV_WC_LOC_PROT_ERR, NULL);
			qp->rq_head++;
			qp->resp_rwqe = false;
			refuse(qp, p, NVMOCK_NAK_REMOTE_OP, NO_EVENT);
			return;
		}
		if (last) {
			/* A send with invalidate names a type 2 window bound
			 * through this QP (mw.c); another is this side's error. */
			if ((p->flags & NVMOCK_PKT_INV) && !mw_invalidate(qp, p->imm)) {
				recv_done(qp, r, IBV_WC_LOC_PROT_ERR, NULL);
				qp->rq_head++;
				qp->resp_rwqe = false;
				refuse(qp, p, NVMOCK_NAK_REMOTE_OP, NO_EVENT);
				return;
			}
			recv_done(qp, r, IBV_WC_SUCCESS, p);
			qp->rq_head++;
			qp->resp_rwqe = false;
			qp->resp_seq++;
			answer(qp, NVMOCK_PKT_ACK, p->seq, 0);
		}
		return;
	case NVMOCK_PKT_WRITE:
		if (p->offset == 0) {
			if (!(qp->access & IBV_ACCESS_REMOTE_WRITE)) {
				refuse(qp, p, NVMOCK_NAK_INVALID_REQ, IBV_EVENT_QP_REQ_ERR);
				return;
			}
			mr = find_mr(ctx, p->rkey);
			/* A zero-length transfer checks no R_Key, as the IBA says. */
			if (p->total && (!mr_ptr(mr, p->raddr, p->total, true) || !mw_for(mr, qp) ||
					 !(mr->access & IBV_ACCESS_REMOTE_WRITE))) {
				refuse(qp, p, NVMOCK_NAK_REMOTE_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
				return;
			}
			if ((p->flags & NVMOCK_PKT_IMM) && !take_recv(qp)) {
				refuse(qp, p, NVMOCK_NAK_RNR, NO_EVENT);
				return;
			}
		}
		mr = find_mr(ctx, p->rkey);
		mem = len ? mr_ptr(mr, p->raddr + p->offset, len, true) : NULL;
		if (len && (!mem || !mr_copy(mr, mem, data, len, true))) {
			refuse(qp, p, NVMOCK_NAK_REMOTE_ACCESS, IBV_EVENT_QP_ACCESS_ERR); /* deregistered or unmapped meanwhile */
			return;
		}
		if (last) {
			if (p->flags & NVMOCK_PKT_IMM) {
				if (!take_recv(qp)) {
					refuse(qp, p, NVMOCK_NAK_RNR, NO_EVENT);
					return;
				}
				recv_done(qp, r, IBV_WC_SUCCESS, p);
				qp->rq_head++;
			}
			qp->resp_seq++;
			answer(qp, NVMOCK_PKT_ACK, p->seq, 0);
		}
		return;
	case NVMOCK_PKT_READ: {
		uint32_t off = 0;

		mr = find_mr(ctx, p->rkey);
		if (!(qp->access & IBV_ACCESS_REMOTE_READ)) {
			refuse(qp, p, NVMOCK_NAK_INVALID_REQ, IBV_EVENT_QP_REQ_ERR);
			return;
		}
		mem = mr_ptr(mr, p->raddr, p->total, false);
		if (p->total && (!mem || !mw_for(mr, qp) || !(mr->access & IBV_ACCESS_REMOTE_READ))) {
			refuse(qp, p, NVMOCK_NAK_REMOTE_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
		do {
			struct out_pkt *o = new_pkt(qp, NVMOCK_PKT_READ_RESP, p->seq);
			uint32_t n = p->total - off;

			if (!o)
				return;
			if (n > NVMOCK_PKT_MAX_PAYLOAD)
				n = NVMOCK_PKT_MAX_PAYLOAD;
			o->mr = mr;
			o->data = mem ? mem + off : NULL;
			o->len = n;
			o->hdr.offset = off;
			o->hdr.total = p->total;
			off += n;
			if (off >= p->total)
				o->hdr.flags |= NVMOCK_PKT_LAST;
			queue(ctx, o);
		} while (off < p->total);
		if (ahead == 0)
			qp->resp_seq++;
		return;
	}
	case NVMOCK_PKT_CMP_SWP:
	case NVMOCK_PKT_FETCH_ADD: {
		struct out_pkt *o;
		uint64_t *word, orig;

		mr = find_mr(ctx, p->rkey);
		word = (uint64_t *)mr_ptr(mr, p->raddr, 8, true);
		if (!(qp->access & IBV_ACCESS_REMOTE_ATOMIC)) {
			refuse(qp, p, NVMOCK_NAK_INVALID_REQ, IBV_EVENT_QP_REQ_ERR);
			return;
		}
		if (p->raddr % 8 || (uintptr_t)word % 8) {
			refuse(qp, p, NVMOCK_NAK_INVALID_REQ, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
		if (!word || !mw_for(mr, qp) || !(mr->access & IBV_ACCESS_REMOTE_ATOMIC)) {
			refuse(qp, p, NVMOCK_NAK_REMOTE_ACCESS, IBV_EVENT_QP_ACCESS_ERR);
			return;
		}
		if (p->kind == NVMOCK_PKT_FETCH_ADD) {
			orig = __atomic_fetch_add(word, p->atomic[0], __ATOMIC_SEQ_CST);
		} else {
			orig = p->atomic[0];
			__atomic_compare_exchange_n(word, &orig, p->atomic[1], false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
		}
		qp->atomic_seq[qp->atomics % ATOMIC_REPLAY] = p->seq;
		qp->atomic_val[qp->atomics % ATOMIC_REPLAY] = orig;
		qp->atomics++;
		qp->resp_seq++;
		o = new_pkt(qp, NVMOCK_PKT_ATOMIC_RESP, p->seq);
		if (o) {
			o->hdr.flags |= NVMOCK_PKT_LAST;
			o->hdr.atomic[0] = orig;
			queue(ctx, o);
		}
		return;
	}
	}
}
