//go:build ignore

/* The requester: sending work requests as packets, and their answers (datapath.h). */
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

/* ---- queue pairs ---- */

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	case IBV_WR_BIND_MW:
		return IBV_WC_BIND_MW;
	case IBV_WR_LOCAL_INV:
		return IBV_WC_LOCAL_INV;
	default:
		return IBV_WC_SEND;
	}
}

/* A completion its CQ cannot take breaks the QP: the IBA's Local Work
 * Queue Catastrophic Error, IBV_EVENT_QP_FATAL, raised once. The IBA
 * raises it when a QP of the CQ in error next tries to use it, as here;
 * NVIDIA's RDMA Aware Programming manual says only that the CQ's QPs get
 * it. */
static void lost_completion(struct nvmock_qp *qp)
{
	if (qp->fatal)
		return;
	qp->fatal = true;
	raise_qp_event(qp, IBV_EVENT_QP_FATAL);
}

void send_done(struct nvmock_qp *qp, struct swqe *w, enum ibv_wc_status st)
{
	struct ibv_wc wc = { .wr_id = w->wr_id, .status = st, .opcode = wc_opcode(w->opcode), .qp_num = qp->vqp.qp.qp_num };

	if (w->opcode == IBV_WR_RDMA_READ)
		wc.byte_len = w->total;
	else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
		wc.byte_len = 8;
	/* Errors always complete; successes when signaled. */
	if ((st != IBV_WC_SUCCESS || w->signaled) && !complete(to_cq(qp->vqp.qp.send_cq), &wc, false))
		lost_completion(qp);
}

void recv_done(struct nvmock_qp *qp, struct rwqe *r, enum ibv_wc_status st, const struct nvmock_ibd_pkt *p)
{
	struct ibv_wc wc = { .wr_id = r->wr_id, .status = st, .opcode = IBV_WC_RECV, .qp_num = qp->vqp.qp.qp_num };
	/* A target's receives complete into their SRQ's CQ. */
	struct ibv_cq *cq = qp->tgt ? (qp->srq ? &qp->srq->cq->cq : NULL) : qp->vqp.qp.recv_cq;

	if (p && st == IBV_WC_SUCCESS) {
		wc.byte_len = p->total;
		wc.src_qp = p->sqpn;
		wc.slid = p->slid;
		if (p->flags & NVMOCK_PKT_GRH)
			wc.wc_flags |= IBV_WC_GRH;
		if (p->flags & NVMOCK_PKT_IMM) {
			wc.wc_flags |= IBV_WC_WITH_IMM;
			wc.imm_data = p->imm;
			if (p->kind == NVMOCK_PKT_WRITE)
				wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
		}
		if (p->flags & NVMOCK_PKT_INV) {
			wc.wc_flags |= IBV_WC_WITH_INV;
			wc.invalidated_rkey = p->imm;
		}
	}
	if (cq && !complete(to_cq(cq), &wc, p && (p->flags & NVMOCK_PKT_SE)))
		lost_completion(qp);
}

/* A QP that met its broken CQ goes to the error state, but not at once:
 * the caller may be walking its queues. The datapath settles it when it
 * is done with the QP. */
void settle(struct nvmock_qp *qp)
{
	if (qp->fatal && qp->state != IBV_QPS_ERR)
		qp_error(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
}

/* The QP goes to the error state: the request with counter n completes
 * with st, everything else outstanding with WR_FLUSH_ERR. */
void qp_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st)
{
	retire(qp); /* what was done before stays done */
	/* Not ibv_qp's state: the program owns it (libibverbs writes it
	 * after modify and query), and this may run in any thread that
	 * moves traffic. mlx5 leaves it until the program asks, too. */
	qp->state = IBV_QPS_ERR;
	/* A datagram queued here was already reported sent: it still goes. */
	if (!qp->ud)
		purge(qp->ctx, qp, NULL, true);
	for (; qp->sq_head != qp->sq_tail; qp->sq_head++)
		send_done(qp, &qp->sq[qp->sq_head % qp->sq_size], qp->sq_head == n ? st : IBV_WC_WR_FLUSH_ERR);
	qp->sq_next = qp->sq_head;
	for (; qp->rq_head != qp->rq_tail; qp->rq_head++)
		recv_done(qp, &qp->rq[qp->rq_head % qp->rq_size], IBV_WC_WR_FLUSH_ERR, NULL);
	qp->deadline = qp->resend_at = 0;
	qp->uc_err = false;
	/* The IBA's Last WQE Reached: an SRQ's QP consumes no more (a
	 * target has no SRQ of its own). */
	if (qp->srq && !qp->tgt)
		raise_qp_event(qp, IBV_EVENT_QP_LAST_WQE_REACHED);
}

/* An unreliable QP's send error moves it to SQE, not ERR (the IBA's Send
 * Queue Error state, which mlx5 has and the kernel's state table gives UD
 * and UC alone; IPoIB moves its QP from there back to RTS): the failed
 * request completes with st, those after it flush, and receives go on. */
void sq_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st)
{
	retire(qp); /* the datagrams before it went */
	qp->state = IBV_QPS_SQE; /* not ibv_qp's: see qp_error */
	for (; qp->sq_head != qp->sq_tail; qp->sq_head++)
		send_done(qp, &qp->sq[qp->sq_head % qp->sq_size], qp->sq_head == n ? st : IBV_WC_WR_FLUSH_ERR);
	qp->sq_next = qp->sq_head;
}

/* A local error in sending the request with counter n: ERR for an RC QP,
 * SQE for an unreliable one. */
void send_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st)
{
	if (qp->uc)
		uc_send_error(qp, n, st);
	else if (qp->ud)
		sq_error(qp, n, st);
	else
		qp_error(qp, n, st);
}

int64_t timeout_ns(struct nvmock_qp *qp)
{
	int64_t t;

	if (!qp->timeout)
		return 0; /* 0: wait for ever */
	t = 4096LL << (qp->timeout > 31 ? 31 : qp->timeout);
	return t < MIN_TIMEOUT_NS ? MIN_TIMEOUT_NS : t;
}

/* The local memory of a work request's gather/scatter list at offset. */
uint8_t *sge_at(struct nvmock_context *ctx, struct nvmock_qp *qp, struct ibv_sge *sge, int nsge,
		       uint32_t off, uint32_t *room, struct nvmock_mr **mrp, int need)
{
	int i;

	for (i = 0; i < nsge; i++) {
		if (off < sge[i].length) {
			struct nvmock_mr *mr = find_mr(ctx, sge[i].lkey);
			uint8_t *p = mr_ptr(mr, sge[i].addr, sge[i].length, need & IBV_ACCESS_LOCAL_WRITE);

			if (!p || mr->window || mr->dom != resp_pd(qp) || (mr->access & need) != need)
				return NULL;
			*room = sge[i].length - off;
			if (mrp)
				*mrp = mr;
			return p + off;
		}
		off -= sge[i].length;
	}
	*room = 0;
	return NULL;
}

/* Copies data into a scatter list at offset off, through the registered
 * memory it names (which must allow local writes). */
bool scatter(struct nvmock_qp *qp, struct ibv_sge *sge, int nsge, uint32_t off, const uint8_t *data, uint32_t len)
{
	while (len) {
		uint32_t room;
		struct nvmock_mr *mr;
		uint8_t *dst = sge_at(qp->ctx, qp, sge, nsge, off, &room, &mr, IBV_ACCESS_LOCAL_WRITE);

		if (!dst)
			return false;
		if (room > len)
			room = len;
		if (!mr_copy(mr, dst, data, room, true))
			return false;
		data += room;
		off += room;
		len -= room;
	}
	return true;
}

/* Copies a work request's whole payload into packet o. */
static bool gather(struct nvmock_qp *qp, struct swqe *w, struct out_pkt *o)
{
	/* To a group, the GID the receivers tell it by goes first. */
	uint32_t pre = o->hdr.flags & NVMOCK_PKT_MCAST ? 16 : 0, off = 0;
	uint8_t *copy;

	if (!w->total && !pre)
		return true;
	copy = malloc(pre + w->total);
	if (!copy)
		return false;
	memcpy(copy, w->ud_dgid, pre);
	o->data = copy;
	o->len = pre + w->total;
	o->owned = true;
	copy += pre;
	if (w->inl) {
		memcpy(copy, w->inl, w->total);
	} else {
		while (off < w->total) {
			uint32_t room;
			struct nvmock_mr *mr;
			uint8_t *src = sge_at(qp->ctx, qp, w->sge, w->nsge, off, &room, &mr, 0);

			if (!src)
				return false; /* the caller frees o and its copy */
			if (room > w->total - off)
				room = w->total - off;
			if (!mr_copy(mr, copy + off, src, room, false))
				return false;
			off += room;
		}
	}
	return true;
}

/* Queues the packets of the send WQE with counter n. */
bool transmit(struct nvmock_qp *qp, uint32_t n_wqe)
{
	struct nvmock_context *ctx = qp->ctx;
	struct swqe *w = &qp->sq[n_wqe % qp->sq_size];
	uint32_t seq = qp->psn0 + n_wqe;
	uint8_t kind;
	uint32_t off = 0;

	switch (w->opcode) {
	case IBV_WR_BIND_MW:
	case IBV_WR_LOCAL_INV:
		/* Work on this HCA alone, done when the queue reaches it, and
		 * completed in order (retire). It sends nothing: the next
		 * message tells the peer how many such came before it. */
		if (!w->applied && !mw_local(qp, w)) {
			send_error(qp, n_wqe, IBV_WC_MW_BIND_ERR);
			return false;
		}
		w->applied = w->done = true;
		return true;
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_SEND_WITH_INV:
		kind = qp->ud ? NVMOCK_PKT_UD_SEND : NVMOCK_PKT_SEND;
		break;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		kind = NVMOCK_PKT_WRITE;
		break;
	case IBV_WR_RDMA_READ:
		kind = NVMOCK_PKT_READ;
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		kind = NVMOCK_PKT_CMP_SWP;
		break;
	default:
		kind = NVMOCK_PKT_FETCH_ADD;
		break;
	}
	do {
		struct out_pkt *o = new_pkt(qp, kind, seq);
		uint32_t room = 0, n = 0;

		if (!o)
			return false;
		if (qp->ud) {
			o->hdr.dlid = w->ud_dlid;
			o->hdr.dqpn = w->ud_qpn;
			o->hdr.rkey = w->ud_qkey;
			if (w->ud_grh) {
				/* The GRH's source GID travels in the header. */
				o->hdr.flags |= NVMOCK_PKT_GRH;
				memcpy(o->hdr.atomic, ctx->gid.raw, sizeof(o->hdr.atomic));
			}
			if (w->ud_dlid >= 0xc000)
				o->hdr.flags |= NVMOCK_PKT_MCAST;
		}
		o->hdr.offset = off;
		o->hdr.total = w->total + (o->hdr.flags & NVMOCK_PKT_MCAST ? 16 : 0);
		if (!qp->ud)
			o->hdr.rkey = w->rkey;
		o->hdr.raddr = w->raddr;
		o->hdr.imm = w->imm;
		o->hdr.srqn = w->srqn;
		o->hdr.gap = w->gap;
		if (!qp->ud) {
			o->hdr.atomic[0] = w->atomic[0];
			o->hdr.atomic[1] = w->atomic[1];
		}
		if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			o->hdr.flags |= NVMOCK_PKT_IMM;
		if (w->opcode == IBV_WR_SEND_WITH_INV)
			o->hdr.flags |= NVMOCK_PKT_INV; /* imm: the R_Key to invalidate */
		if (qp->uc)
			o->hdr.flags |= NVMOCK_PKT_UC;
		if (kind == NVMOCK_PKT_UD_SEND) {
			/* A datagram is done once handed over, so it is copied
			 * whole now (one packet, at most the MTU): the program
			 * may reuse its buffer at the completion. */
			if (!gather(qp, w, o)) {
				free_pkt(o);
				sq_error(qp, n_wqe, IBV_WC_LOC_PROT_ERR);
				return false;
			}
			off = w->total;
		} else if (kind == NVMOCK_PKT_SEND || kind == NVMOCK_PKT_WRITE) {
			if (w->inl) {
				o->data = w->inl + off;
				n = w->total - off;
			} else if (w->total) {
				o->data = sge_at(ctx, qp, w->sge, w->nsge, off, &room, &o->mr, 0);
				if (!o->data) {
					free(o);
					send_error(qp, n_wqe, IBV_WC_LOC_PROT_ERR);
					return false;
				}
				n = room;
			}
			if (n > NVMOCK_PKT_MAX_PAYLOAD)
				n = NVMOCK_PKT_MAX_PAYLOAD;
			o->len = n;
			off += n;
		} else {
			off = w->total;
		}
		if (off >= w->total) {
			o->hdr.flags |= NVMOCK_PKT_LAST;
			if (w->solicited)
				o->hdr.flags |= NVMOCK_PKT_SE;
			o->last_req = !qp->ud && !qp->uc; /* unreliable: no answer comes */
		}
		queue(ctx, o);
	} while (off < w->total);
	return true;
}

/* Sends what is posted and not yet sent, unless an RNR wait holds it, up
 * to a UC request whose error waits its turn. */
void kick(struct nvmock_qp *qp)
{
	if (qp->state != IBV_QPS_RTS || qp->resend_at)
		return;
	while (qp->sq_next != qp->sq_tail && !(qp->uc_err && qp->sq_next == qp->uc_err_n)) {
		qp->sq[qp->sq_next % qp->sq_size].rd_off = 0;
		if (!transmit(qp, qp->sq_next))
			break;
		/* A datagram is done once it is on its way. */
		if (qp->ud)
			qp->sq[qp->sq_next % qp->sq_size].done = true;
		qp->sq_next++;
	}
	/* Datagrams, and a bind with nothing unanswered before it; on UC,
	 * an error that waited for that bind. */
	retire(qp);
	if (qp->uc)
		uc_fail_when_due(qp);
	/* A completion lost on the way (here, or in the error that stopped
	 * the loop) moves the QP to ERR now, not at its next packet. */
	settle(qp);
}

/* Completes answered requests from the oldest, in order. */
void retire(struct nvmock_qp *qp)
{
	bool progress = false;

	while (qp->sq_head != qp->sq_next && qp->sq[qp->sq_head % qp->sq_size].done) {
		send_done(qp, &qp->sq[qp->sq_head % qp->sq_size], IBV_WC_SUCCESS);
		qp->sq_head++;
		progress = true;
	}
	if (progress) {
		qp->retries_left = qp->retry_cnt;
		qp->rnr_left = qp->rnr_retry;
		if (qp->sq_head == qp->sq_next)
			qp->deadline = 0;
	}
}

/* Sends again from the request with counter n. */
void go_back(struct nvmock_qp *qp, uint32_t n)
{
	purge(qp->ctx, qp, NULL, true);
	qp->sq_next = n;
	qp->deadline = 0;
}

/* ---- the requester's answers ---- */

/* The IBA's RNR NAK timer field, in microseconds (0 is the longest). */
static const uint32_t rnr_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
};

void answered(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len)
{
	uint32_t n = p->seq - qp->psn0; /* the WQE's counter */
	int32_t back = (int32_t)(n - qp->sq_head);
	struct swqe *w;

	if (qp->state != IBV_QPS_RTS || back < 0 || (uint32_t)back >= qp->sq_next - qp->sq_head)
		return; /* stale: answered already, or never sent */
	w = &qp->sq[n % qp->sq_size];
	/* An answer restarts the clock: the peer is there. */
	if (qp->deadline)
		qp->deadline = now_ns() + timeout_ns(qp);
	switch (p->kind) {
	case NVMOCK_PKT_ACK: {
		/* Acknowledges every send and write up to it. */
		uint32_t s;

		for (s = qp->sq_head; (int32_t)(n - s) >= 0; s++) {
			struct swqe *x = &qp->sq[s % qp->sq_size];

			if (x->opcode != IBV_WR_RDMA_READ && x->opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
			    x->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD)
				x->done = true;
		}
		break;
	}
	case NVMOCK_PKT_READ_RESP: {
		uint32_t off = p->offset;

		/* In order, without a gap: anything else waits for the read to
		 * be asked again. */
		if (w->opcode != IBV_WR_RDMA_READ || w->done || off != w->rd_off)
			return;
		if (!scatter(qp, w->sge, w->nsge, off, data, len)) {
			qp_error(qp, n, IBV_WC_LOC_PROT_ERR);
			return;
		}
		w->rd_off = off += len;
		if ((p->flags & NVMOCK_PKT_LAST) && off == w->total)
			w->done = true;
		break;
	}
	case NVMOCK_PKT_ATOMIC_RESP: {
		uint32_t room;
		uint8_t *dst;

		if (w->opcode != IBV_WR_ATOMIC_CMP_AND_SWP && w->opcode != IBV_WR_ATOMIC_FETCH_AND_ADD)
			return;
		dst = sge_at(qp->ctx, qp, w->sge, w->nsge, 0, &room, NULL, IBV_ACCESS_LOCAL_WRITE);
		if (!dst || room < 8) {
			qp_error(qp, n, IBV_WC_LOC_PROT_ERR);
			return;
		}
		memcpy(dst, &p->atomic[0], 8);
		w->done = true;
		break;
	}
	case NVMOCK_PKT_NAK:
		if (p->syndrome == NVMOCK_NAK_RNR) {
			retire(qp); /* the ones before it may be done */
			if (qp->rnr_retry != 7 && qp->rnr_left-- <= 0) {
				qp_error(qp, n, IBV_WC_RNR_RETRY_EXC_ERR);
				return;
			}
			go_back(qp, n);
			qp->resend_at = now_ns() + (int64_t)rnr_us[p->timer & 31] * 1000;
			return;
		}
		/* Answers arrive in order: what came before is retired. */
		retire(qp);
		qp_error(qp, n, p->syndrome == NVMOCK_NAK_REMOTE_ACCESS ? IBV_WC_REM_ACCESS_ERR
				: p->syndrome == NVMOCK_NAK_REMOTE_OP    ? IBV_WC_REM_OP_ERR
									 : IBV_WC_REM_INV_REQ_ERR);
		return;
	default:
		return;
	}
	retire(qp);
}
