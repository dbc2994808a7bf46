//go:build ignore

/*
 * The data path of the mock HCAs: protection domains, memory regions,
 * completion queues and reliable-connected queue pairs whose traffic really
 * moves, between processes and nodes, through the fabric daemon.
 *
 * A context that creates its first QP connects to the daemon (the umad
 * shim's socket, NVMOCK_IBD) for its port and gets a block of QP numbers and
 * the port's LID. A send, RDMA write, RDMA read or atomic becomes packets of
 * at most NVMOCK_PKT_MAX_PAYLOAD bytes; the daemon hands each to the context
 * holding the destination QPN at the destination LID, on this node or, via
 * its peer daemon, another. The responder does what the HCA would: checks
 * the rkey, range and rights, writes or reads the registered memory, takes
 * a posted receive (or answers RNR), and acknowledges. The requester
 * completes work requests in order when answered, retries after an RNR
 * (rnr_retry times, 7 for ever) or after its timeout (retry_cnt times, going
 * back to the oldest unanswered request), then fails them as an HCA does.
 *
 * Both sides need an engine: the responder of an RDMA write or read never
 * calls into verbs while it is served. So the first QP starts one thread per
 * context, which reads the daemon's socket, answers requests, completes
 * work and runs the timers; the program's own calls (post, poll) take the
 * same lock. Packets refer to the registered memory rather than copying it
 * until they are sent, as an HCA reads memory when it transmits; inline
 * data is copied when posted.
 *
 * UD QPs send datagrams of up to the MTU to a QPN through an address
 * handle, unanswered: the receiver drops what has another Q_Key or finds
 * no receive, and puts a GRH's 40 bytes first.
 *
 * Completion channels need the umad shim, which answers libibverbs'
 * CREATE_COMP_CHANNEL command (umad/channels.c); an armed CQ that
 * completes work sends its handle to the channel, which ibv_get_cq_event
 * reads.
 *
 * UC QPs (uc.c) send messages as RC ones do, but nothing answers them: a
 * request is done when its last packet has left, and the responder drops
 * what it cannot take.
 *
 * Multicast: mcast.c. Shared receive queues: srq.c. XRC: xrc.c.
 * Extended CQs (ibv_create_cq_ex, completion timestamps): cqex.c.
 *
 * Memory windows: mw.c. Parent and thread domains: domain.c.
 *
 * Not simulated, and refused rather than faked: raw QPs and RoCE (a QP on
 * an Ethernet port cannot reach RTR).
 *
 * objects.c: PDs, MRs, CQs, QPs' life; post.c: posting, and the ibv_qp_ex
 * builder; engine.c: the daemon connection, packet queue and engine
 * thread; requester.c and responder.c: the two ends of the transport.
 */
#ifndef NVMOCK_DATAPATH_H
#define NVMOCK_DATAPATH_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "provider.h"
#include "../umad/proto.h"

#define MAX_INLINE 512
/* The IBA's local ACK timeout is 4.096 us << timeout; a packet through the
 * daemon takes far longer than a wire's, and the daemon holds one up to 2 s
 * for a busy program, so no timeout is shorter than this (retrying a
 * request that is only slow is harmless, running out of retries is not).
 * The clock runs from when a request's last packet left, and restarts with
 * every answer. */
#define MIN_TIMEOUT_NS (500 * 1000000LL)
#define RX_SIZE (NVMOCK_IBD_PKT_SIZE + NVMOCK_PKT_MAX_PAYLOAD)
#define RX_BATCH 64
/* Atomics a responder remembers, to answer their duplicates again: the
 * most any QP may have outstanding (max_qp_rd_atom). */
#define ATOMIC_REPLAY 16

/* A protection domain, or a parent domain over one (domain.c), and how
 * many objects use it: it cannot be freed while any does (EBUSY). A PD
 * counts what the kernel counts (everything made on it or on a parent
 * over it, and the parents); a parent counts what mlx5 counts (its QPs and
 * CQs). Changed under ctx->lock. */
struct nvmock_pd {
	struct ibv_pd pd;
	uint32_t users;
	/* A parent domain's: the PD it stands for (and holds), its thread
	 * domain, and the program's allocators for queue memory. */
	struct nvmock_pd *protection;
	struct nvmock_td *td;
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size, size_t alignment, uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);
	void *pd_context;
};

struct nvmock_td {
	struct ibv_td td;
	uint32_t users; /* parent domains over it */
};

static inline struct nvmock_pd *to_pd(struct ibv_pd *pd) { return container_of(pd, struct nvmock_pd, pd); }

/* The PD whose memory and keys an object made on pd may use: the kernel
 * knows a parent domain only by its PD's handle. */
static inline struct nvmock_pd *domain_of(struct ibv_pd *pd)
{
	struct nvmock_pd *p = to_pd(pd);

	return p->protection ? p->protection : p;
}

#define QALIGN(n) (((n) + 63) & ~(size_t)63)

/* Memory of a queue, or a doorbell record: a parent domain's allocator
 * gives it if the program set one (domain.c). */
struct qmem {
	void *p;
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr, uint64_t resource_type);
	struct ibv_pd *pd;
	void *pd_context;
	uint64_t type;
};

struct nvmock_mr {
	struct verbs_mr vmr;
	struct nvmock_mr *next;
	uint8_t *base;   /* where iova is: a device memory region's addr is NULL */
	uint64_t iova;
	/* As simulated, under ctx->lock: vmr.ibv_mr.length is the program's,
	 * which libibverbs writes unlocked once reg_mr or rereg_mr returns. */
	size_t length;
	int access;      /* as simulated: ibv_rereg_mr may change it, not vmr.access, which libibverbs reads */
	struct nvmock_mw *window; /* a memory window's view of its region (mw.c): remote keys only */
	bool implicit;   /* on demand over the whole address space (access has ON_DEMAND) */
	uint32_t *dm;    /* the count of regions on its device memory (dm.c) */
	struct nvmock_pd *dom; /* domain_of its PD, which a parent domain may stand for */
};

enum { ARM_NONE, ARM_NEXT, ARM_SOLICITED };

struct nvmock_cq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx; /* an extended CQ's (cqex.c): the same start */
	};
	struct ibv_wc *ring;
	struct qmem mem, db; /* ring and ts; a doorbell record from a parent domain */
	struct ibv_pd *parent; /* IBV_CQ_INIT_ATTR_MASK_PD's parent domain, or NULL */
	uint32_t size, head, count;
	uint32_t users; /* QPs that complete into it: it cannot go while any does */
	bool overrun;
	bool ignore_overrun; /* IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: no error when full */
	uint32_t raised; /* async events that named it (release) */
	/* Completion events: the provider's end of the CQ's channel (-1:
	 * none) and what ibv_req_notify_cq asked for, until it fires. */
	int chan_w;
	uint8_t armed;
	bool event_lost;
	uint32_t events; /* sent and not taken back: what destroy waits to see acknowledged */
	/* An extended CQ's: each entry's completion time (ns, monotonic),
	 * and the completion start_poll or next_poll took. */
	int64_t *ts;
	int64_t wall_off; /* CLOCK_REALTIME less CLOCK_MONOTONIC, when made */
	struct ibv_wc cur;
	int64_t cur_ts;
	pthread_mutex_t poll; /* held from start_poll to end_poll */
	bool poll_shared;     /* not made single-threaded: poll is taken */
};

/* A send work request, kept until it completes. */
struct swqe {
	uint64_t wr_id;
	enum ibv_wr_opcode opcode;
	bool signaled;
	bool solicited; /* the receiver's CQ raises a solicited event */
	bool done;
	uint32_t total;
	uint32_t rd_off; /* a read: the bytes of its answer arrived so far */
	uint32_t rkey;
	uint32_t imm;
	uint64_t raddr;
	uint64_t atomic[2];
	int nsge;
	struct ibv_sge *sge;
	uint8_t *inl; /* the inline copy, or NULL */
	/* A datagram's address (UD), from its address handle. */
	uint16_t ud_dlid;
	bool ud_grh;
	uint8_t ud_dgid[16]; /* to a group: its GID (zero without a GRH) */
	uint32_t ud_qpn, ud_qkey;
	uint32_t srqn; /* XRC: the remote SRQ it is for */
	/* A bind (mw.c): the window and region it names (by handle and key,
	 * looked up when applied: either may be gone by then), the new R_Key's
	 * tag, and the range and rights; applied once, however often its
	 * message goes again. */
	bool applied;
	uint32_t mw_handle, bind_lkey;
	uint32_t gap; /* a message's: binds and invalidates just before it (NVMOCK_IBD_PKT's gap) */
	struct ibv_mw_bind_info bind; /* its mr is not kept */
};

struct rwqe {
	uint64_t wr_id;
	int nsge;
	struct ibv_sge *sge;
};

/* An XRC domain as this process knows it (xrc.c). */
struct xrc_domain;

struct nvmock_xrcd {
	struct verbs_xrcd vx;
	struct xrc_domain *dom;
	uint32_t users; /* SRQs and targets made through this handle */
};

struct nvmock_srq {
	struct verbs_srq vsrq;
	struct nvmock_srq *next; /* in ctx->srqs */
	uint32_t srqn;
	struct nvmock_xrcd *xrcd; /* an XRC SRQ: its domain; NULL: a basic one */
	struct nvmock_cq *cq;     /* an XRC SRQ's completions go there */
	struct rwqe *rq;
	struct ibv_sge *sge;
	struct qmem mem, db; /* rq and sge; a parent domain's doorbell record */
	struct nvmock_pd *dom;
	uint32_t size, head, tail, max_sge; /* holds size - 1, as mlx5 */
	uint32_t limit; /* armed: the event when fewer are left; 0: not */
	uint32_t users; /* QPs made with it: it cannot go while any is */
	uint32_t raised; /* async events that named it (release) */
};

struct nvmock_qp {
	struct verbs_qp vqp;
	struct nvmock_context *ctx;
	struct nvmock_srq *srq; /* receives come from it (srq.c) */
	struct nvmock_pd *dom;  /* domain_of its PD; NULL for an XRC target */
	struct qmem mem, db;    /* the queues below; a parent domain's doorbell record */
	uint32_t idx;
	/* The QP's state. libibverbs writes vqp.qp.state after modify and
	 * query return, without the lock; this one only moves under it. */
	enum ibv_qp_state state;
	bool sq_open;    /* reached RTS since its last RESET: mlx5 takes sends (post.c) */
	uint32_t queued; /* this QP's packets waiting for the socket */
	bool lost;       /* a request packet of it was dropped before it left */
	bool fatal;      /* a completion of it found its CQ broken (settle) */
	uint32_t raised; /* async events that named it (release) */
	bool comm_est;   /* a packet came in RTR: IBV_EVENT_COMM_EST was raised */
	/* UC: a request that could not be sent (counter uc_err_n), whose
	 * error waits for the requests before it to leave (uc.c). */
	bool uc_err;
	uint32_t uc_err_n;
	enum ibv_wc_status uc_err_st;
	/* XRC (xrc.c): an initiator (XRC_SEND) or a target (XRC_RECV),
	 * whose srq is the SRQ of the message in progress. */
	bool xrc, tgt;
	struct nvmock_xrcd *xrcd; /* a target's */
	/* UD: the multicast groups it is attached to (mcast.c). */
	struct { union ibv_gid gid; uint16_t lid; } *mc;
	uint32_t n_mc;
	bool no_self_mc; /* IBV_QP_CREATE_BLOCK_SELF_MCAST_LB */

	/* Send queue: monotonic counters, slot = counter % sq_size. Posted
	 * WQEs are [sq_head, sq_tail); [sq_head, sq_next) were sent. A WQE's
	 * message sequence number is psn0 + its counter: the two ends count
	 * from the PSNs the program exchanged (sq_psn here, rq_psn there), so
	 * a peer that was reset is not taken for a duplicate. Binds and
	 * invalidates send nothing; the next message carries their number
	 * (gap). */
	struct swqe *sq;
	struct ibv_sge *sq_sge;
	uint8_t *sq_inl;
	uint32_t sq_size, sq_head, sq_next, sq_tail, max_send_sge, max_inline, psn0;
	uint32_t local_run; /* binds and invalidates posted since the last message */
	bool sig_all;

	struct rwqe *rq;
	struct ibv_sge *rq_sge;
	uint32_t rq_size, rq_head, rq_tail, max_recv_sge;

	/* Attributes. */
	bool ud;       /* an unreliable datagram QP */
	bool uc;       /* an unreliable connected QP (uc.c); neither: reliable connected */
	uint32_t qkey; /* UD */
	uint8_t port, timeout, retry_cnt, rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic;
	uint16_t pkey_index, dlid;
	uint32_t dqpn, sq_psn, rq_psn;
	int access;
	enum ibv_mtu mtu;
	struct ibv_ah_attr ah;

	/* Requester. */
	int retries_left, rnr_left;
	int64_t deadline;  /* ns: when the oldest unanswered request times out; 0: none */
	int64_t resend_at; /* ns: after an RNR NAK, when to send again; 0: none */

	/* Responder. */
	uint32_t resp_seq; /* the next message expected */
	uint32_t resp_off; /* the next offset expected in it */
	bool resp_skip;    /* the rest of a message refused at its start */
	bool resp_rwqe;    /* a receive is taken for the message in progress */
	uint64_t atomic_val[ATOMIC_REPLAY];
	uint32_t atomic_seq[ATOMIC_REPLAY];
	uint32_t atomics; /* done so far; the last ATOMIC_REPLAY are kept */

	/* The ibv_qp_ex work-request batch (wr_start .. wr_complete), a
	 * critical section of its own, as ibv_wr_post(3) requires. */
	pthread_mutex_t wr_lock; /* error-checking: misuse fails, not hangs */
	bool batch_open;
	struct ibv_send_wr *batch;
	struct ibv_sge *batch_sge;
	uint8_t *batch_inl;
	uint32_t batch_n;
	int batch_err;
};

/* One packet waiting for the socket; data points into registered memory
 * (or an inline copy) until it is sent. */
struct out_pkt {
	struct out_pkt *next;
	struct nvmock_qp *qp;
	struct nvmock_mr *mr;
	const void *data;
	uint32_t len;
	bool last_req; /* a request's last packet: its answer's clock starts */
	bool owned;    /* data is a copy this packet owns (a datagram's) */
	struct nvmock_ibd_pkt hdr;
};
struct nvmock_ah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
	struct nvmock_pd *dom;
};

static inline struct nvmock_qp *to_qp(struct ibv_qp *qp) { return container_of(qp, struct nvmock_qp, vqp.qp); }
static inline struct nvmock_cq *to_cq(struct ibv_cq *cq) { return container_of(cq, struct nvmock_cq, cq); }
static inline struct nvmock_srq *to_srq(struct ibv_srq *s) { return container_of(s, struct nvmock_srq, vsrq.srq); }

/* put_rwqe fills slot n of a receive ring (rq, with max_sge SGEs a slot in
 * sges) with a receive: its SGEs are copied, as the program may reuse its
 * list. Returns the slot. */
static inline struct rwqe *put_rwqe(struct rwqe *rq, struct ibv_sge *sges, uint32_t size, uint32_t max_sge,
				    uint32_t n, uint64_t wr_id, int nsge, const struct ibv_sge *sg)
{
	struct rwqe *r = &rq[n % size];

	r->wr_id = wr_id;
	r->nsge = nsge;
	r->sge = &sges[(size_t)(n % size) * max_sge];
	memcpy(r->sge, sg, sizeof(*r->sge) * nsge);
	return r;
}

static inline int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void wake(struct nvmock_context *ctx)
{
	uint64_t one = 1;

	if (ctx->wake >= 0 && write(ctx->wake, &one, sizeof(one)) < 0) {
		/* A full counter already wakes the engine. */
	}
}

bool huge_refused(const char *component);
bool flush(struct nvmock_context *ctx);
bool transmit(struct nvmock_qp *qp, uint32_t n_wqe);
int post_send(struct ibv_qp *q, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int post_recv(struct ibv_qp *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int post_send_locked(struct nvmock_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad, bool whole);
int start_engine(struct nvmock_context *ctx);
int64_t timeout_ns(struct nvmock_qp *qp);
struct nvmock_mr *find_mr(struct nvmock_context *ctx, uint32_t key);
uint32_t new_key(struct nvmock_context *ctx);
bool mw_uses_key(struct nvmock_context *ctx, uint32_t index);
struct out_pkt *new_pkt(struct nvmock_qp *qp, uint8_t kind, uint32_t seq);
uint8_t *mr_ptr(struct nvmock_mr *mr, uint64_t addr, uint64_t len, bool write);
bool mapped(uint64_t a, uint64_t len, bool write);
bool mr_copy(const struct nvmock_mr *mr, void *dst, const void *src, size_t n, bool into);
void mr_changed(struct nvmock_context *ctx, struct nvmock_mr *mr);
bool access_known(int access);
void pd_use(struct ibv_pd *pd, int n);
void pd_use_parent(struct ibv_pd *pd, int n);

/* Access that lets a region be written (the kernel's ib_access_writable). */
#define MR_WRITABLE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)
struct nvmock_mr *new_mr(struct ibv_pd *pd, uint8_t *base, size_t length, uint64_t iova, int access);
uint8_t *sge_at(struct nvmock_context *ctx, struct nvmock_qp *qp, struct ibv_sge *sge, int nsge, uint32_t off, uint32_t *room, struct nvmock_mr **mrp, int need);
void answered(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len);
bool complete(struct nvmock_cq *cq, const struct ibv_wc *wc, bool solicited);
int connect_daemon(struct nvmock_context *ctx, uint8_t port, uint32_t *qpn_base, uint16_t *lid);
void free_pkt(struct out_pkt *o);
void go_back(struct nvmock_qp *qp, uint32_t n);
void handle(struct nvmock_context *ctx, const uint8_t *buf, size_t n);
void kick(struct nvmock_qp *qp);
int progress(struct nvmock_context *ctx);
void purge(struct nvmock_context *ctx, struct nvmock_qp *qp, struct nvmock_mr *mr, bool requests_only);
void qp_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st);
void qp_init_wqe(struct nvmock_qp *qp);
void qpx_setup(struct nvmock_qp *qp);
void queue(struct nvmock_context *ctx, struct out_pkt *o);
void recv_done(struct nvmock_qp *qp, struct rwqe *r, enum ibv_wc_status st, const struct nvmock_ibd_pkt *p);
void respond(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len);
void retire(struct nvmock_qp *qp);
bool scatter(struct nvmock_qp *qp, struct ibv_sge *sge, int nsge, uint32_t off, const uint8_t *data, uint32_t len);
void send_done(struct nvmock_qp *qp, struct swqe *w, enum ibv_wc_status st);
void settle(struct nvmock_qp *qp);
void sq_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st);

/* How many of an object's async events the program has acknowledged:
 * libibverbs counts them under the object's mutex. An object destroyed
 * with fewer acknowledged than raised is kept (release). */
static inline uint32_t acked_count(pthread_mutex_t *m, uint32_t *n)
{
	uint32_t v;

	pthread_mutex_lock(m);
	v = *n;
	pthread_mutex_unlock(m);
	return v;
}
#define acked(obj, field) acked_count(&(obj)->mutex, (field))

/* Raises an async event about a QP, which is then kept past its destroy
 * until the program acknowledges it. */
static inline void raise_qp_event(struct nvmock_qp *qp, enum ibv_event_type type)
{
	if (raise_event(qp->ctx, type, &qp->vqp.qp))
		qp->raised++;
}
void srq_ops(struct verbs_context_ops *ops);
bool take_recv(struct nvmock_qp *qp);
uint32_t rwqe_len(struct rwqe *r);
void send_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st);
void uc_respond(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p, const uint8_t *data, uint32_t len);
void uc_sent(struct nvmock_qp *qp, uint32_t seq);
void uc_send_error(struct nvmock_qp *qp, uint32_t n, enum ibv_wc_status st);
void uc_fail_when_due(struct nvmock_qp *qp);
void mcast_ops(struct verbs_context_ops *ops);
void xrc_ops(struct verbs_context_ops *ops);
void cqex_ops(struct verbs_context_ops *ops);
void dm_ops(struct verbs_context_ops *ops);
void mw_ops(struct verbs_context_ops *ops);
bool mw_local(struct nvmock_qp *qp, struct swqe *w);
bool mw_for(struct nvmock_mr *mr, struct nvmock_qp *qp);
bool mw_invalidate(struct nvmock_qp *qp, uint32_t rkey);
void mw_region_gone(struct nvmock_context *ctx, struct nvmock_mr *mr);
void change_ops(struct verbs_context_ops *ops);
struct nvmock_cq *new_cq(struct ibv_context *ibctx, int cqe, struct ibv_comp_channel *channel, int comp_vector, bool ts, struct ibv_pd *parent);
int cq_ring(struct nvmock_cq *cq, struct qmem *m, uint32_t size, struct ibv_wc **ring, int64_t **ts);
void ensure_connected(struct nvmock_context *ctx);
bool xrc_target(struct nvmock_qp *qp, const struct nvmock_ibd_pkt *p);
struct nvmock_pd *resp_pd(struct nvmock_qp *qp);
void domain_ops(struct verbs_context_ops *ops);
int dealloc_parent(struct nvmock_pd *p);
int qmem_get(struct qmem *m, struct ibv_pd *pd, size_t size, uint64_t type);
void qmem_put(struct qmem *m);
int qmem_db(struct qmem *m, struct ibv_pd *pd);
int qmem_queue(struct qmem *mem, struct qmem *db, struct ibv_pd *pd, size_t size, uint64_t type);
bool qmem_custom(struct ibv_pd *pd);
void xrc_srq_gone(struct nvmock_context *ctx, struct nvmock_srq *srq);
const union ibv_gid *mc_gid(struct nvmock_qp *qp, uint16_t lid, const uint8_t gid[16]);

#endif
