//go:build ignore

/* Protection domains, memory regions, completion queues and the life of queue pairs (datapath.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/shm.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/mlx5dv.h>

#include "datapath.h"

/* ---- protection domains and memory regions ---- */

/* One more (or fewer) object on pd's PD (domain_of). */
void pd_use(struct ibv_pd *pd, int n)
{
	struct nvmock_context *ctx = to_ctx(pd->context);

	pthread_mutex_lock(&ctx->lock);
	domain_of(pd)->users += n;
	pthread_mutex_unlock(&ctx->lock);
}

/* One more (or fewer) QP or CQ made on parent domain pd. */
void pd_use_parent(struct ibv_pd *pd, int n)
{
	struct nvmock_context *ctx = to_ctx(pd->context);

	pthread_mutex_lock(&ctx->lock);
	to_pd(pd)->users += n;
	pthread_mutex_unlock(&ctx->lock);
}

static struct ibv_pd *alloc_pd(struct ibv_context *ibctx)
{
	struct nvmock_pd *p = calloc(1, sizeof(*p));

	(void)ibctx;
	return p ? &p->pd : NULL;
}

static int dealloc_pd(struct ibv_pd *pd)
{
	struct nvmock_context *ctx = to_ctx(pd->context);
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	if (to_pd(pd)->protection) {
		int err = dealloc_parent(to_pd(pd));

		pthread_mutex_unlock(&ctx->lock);
		if (!err)
			free(to_pd(pd));
		return err;
	}
	busy = to_pd(pd)->users > 0;
	pthread_mutex_unlock(&ctx->lock);
	if (busy)
		return EBUSY; /* as uverbs answers while regions, QPs, SRQs, AHs or parent domains use it */
	free(to_pd(pd));
	return 0;
}

/* A region of length bytes at base, which the data path reaches at iova
 * (reg_mr's and reg_dm_mr's). */
struct nvmock_mr *new_mr(struct ibv_pd *pd, uint8_t *base, size_t length, uint64_t iova, int access)
{
	struct nvmock_context *ctx = to_ctx(pd->context);
	struct nvmock_mr *mr;

	/* Remote write and atomics need local write, as the IBA says. */
	if (!access_known(access) ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	mr->base = base;
	mr->iova = iova;
	mr->length = length;
	mr->vmr.mr_type = IBV_MR_TYPE_MR;
	mr->vmr.access = mr->access = access;
	/* libibverbs sets these too, but only once we return: the engine may
	 * look the region up before. */
	mr->vmr.ibv_mr.context = pd->context;
	mr->vmr.ibv_mr.pd = pd;
	mr->vmr.ibv_mr.addr = base;
	mr->vmr.ibv_mr.length = length;
	pthread_mutex_lock(&ctx->lock);
	/* mlx5 keys: an index above 8 bits of variant. */
	mr->vmr.ibv_mr.handle = new_key(ctx);
	mr->vmr.ibv_mr.lkey = mr->vmr.ibv_mr.rkey = (mr->vmr.ibv_mr.handle << 8) | 0x07;
	mr->next = ctx->mrs;
	ctx->mrs = mr;
	mr->dom = domain_of(pd);
	mr->dom->users++;
	pthread_mutex_unlock(&ctx->lock);
	return mr;
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	struct nvmock_mr *mr;
	/* An implicit on-demand region: the whole address space, as mlx5
	 * takes it (the device claims IBV_ODP_SUPPORT_IMPLICIT). */
	bool implicit = !addr && length == SIZE_MAX;

	/* A region of no bytes has no pages: the kernel's ib_umem_get
	 * refuses it. */
	if ((!addr && length && !implicit) || (implicit && (iova || !(access & IBV_ACCESS_ON_DEMAND))) || !length) {
		errno = EINVAL;
		return NULL;
	}
	/* The kernel pins a region's pages (for writing, if it may be
	 * written): memory not there fails it. On demand, it pins nothing. */
	if (!(access & IBV_ACCESS_ON_DEMAND) && !mapped((uintptr_t)addr, length, access & MR_WRITABLE)) {
		errno = EFAULT;
		return NULL;
	}
	mr = new_mr(pd, addr, length, iova, access);
	if (!mr)
		return NULL;
	mr->implicit = implicit;
	return &mr->vmr.ibv_mr;
}

/* The kernel's known access flags (ib_check_mr_access): the IBA's, on
 * demand, huge pages, the flush ones, and the optional range. */
bool access_known(int access)
{
	return !(access & ~(0x3ff | IBV_ACCESS_OPTIONAL_RANGE));
}

/* A region went or changed: the packets queued from its memory go, and the
 * requests among them are sent again, to fail as an HCA's would (LOC_PROT)
 * or go out from what is there now. ctx->lock is held. */
void mr_changed(struct nvmock_context *ctx, struct nvmock_mr *mr)
{
	uint32_t i;

	purge(ctx, NULL, mr, false);
	for (i = 0; i < NVMOCK_IBD_QPN_BLOCK; i++) {
		struct nvmock_qp *qp = ctx->qps[i];

		if (qp && qp->lost) {
			qp->lost = false;
			go_back(qp, qp->sq_head);
			kick(qp);
		}
	}
	flush(ctx);
}

static int dereg_mr(struct verbs_mr *vmr)
{
	struct nvmock_mr *mr = container_of(vmr, struct nvmock_mr, vmr);
	struct nvmock_context *ctx = to_ctx(vmr->ibv_mr.context);
	struct nvmock_mr **p;

	pthread_mutex_lock(&ctx->lock);
	for (p = &ctx->mrs; *p; p = &(*p)->next)
		if (*p == mr) {
			*p = mr->next;
			break;
		}
	if (mr->dm)
		(*mr->dm)--;
	mr->dom->users--;
	mw_region_gone(ctx, mr);
	mr_changed(ctx, mr);
	pthread_mutex_unlock(&ctx->lock);
	free(mr);
	return 0;
}

/* new_key is a memory key index no live region or window has (called
 * under the lock): mlx5's come from a pool, so a live one's never comes
 * again. The 24-bit count wraps after 2^24 registrations and then skips
 * the indices in use. */
uint32_t new_key(struct nvmock_context *ctx)
{
	for (;;) {
		struct nvmock_mr *mr;
		bool used = false;

		ctx->next_key = (ctx->next_key + 1) & 0xffffff;
		if (!ctx->next_key) {
			ctx->keys_wrapped = true;
			continue;
		}
		if (!ctx->keys_wrapped)
			return ctx->next_key;
		for (mr = ctx->mrs; mr && !used; mr = mr->next)
			used = mr->vmr.ibv_mr.lkey >> 8 == ctx->next_key;
		if (!used && !mw_uses_key(ctx, ctx->next_key))
			return ctx->next_key;
	}
}

struct nvmock_mr *find_mr(struct nvmock_context *ctx, uint32_t key)
{
	struct nvmock_mr *mr;

	for (mr = ctx->mrs; mr; mr = mr->next)
		if (mr->vmr.ibv_mr.lkey == key)
			return mr;
	return NULL;
}

/* Whether [a, a+len) is mapped readable, and writable if write: what the
 * kernel's pinning of a region, or an on-demand region's page faults,
 * would find. */
bool mapped(uint64_t a, uint64_t len, bool write)
{
	char *line = NULL;
	size_t cap = 0;
	FILE *f;
	bool ok = false;

	if (!len)
		return true;
	if (a + len < a || !(f = fopen("/proc/self/maps", "re")))
		return false;
	while (!ok && getline(&line, &cap, f) > 0) {
		unsigned long lo, hi;
		char perms[5];

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || a < lo || a >= hi)
			continue;
		/* Lines come in address order: a range across mappings goes on
		 * in the next one. */
		if (perms[0] != 'r' || (write && perms[1] != 'w'))
			break;
		if (a + len <= hi)
			ok = true;
		else {
			len -= hi - a;
			a = hi;
		}
	}
	free(line);
	fclose(f);
	return ok;
}

/* Copies n bytes into a region's memory at dst (into) or out of it from
 * src. An on-demand region pins nothing, and its memory may go at any
 * time, as the program unmaps it: through the kernel, a copy then fails
 * (EFAULT) where a plain one would crash the program. Where the kernel
 * refuses the calls (a seccomp filter), the check of its mapping stands. */
bool mr_copy(const struct nvmock_mr *mr, void *dst, const void *src, size_t n, bool into)
{
	struct iovec here = { into ? (void *)src : dst, n }, there = { into ? dst : (void *)src, n };
	ssize_t got;

	if (!mr || !(mr->access & IBV_ACCESS_ON_DEMAND) || !n) {
		memcpy(dst, src, n);
		return true;
	}
	got = into ? process_vm_writev(getpid(), &here, 1, &there, 1, 0) : process_vm_readv(getpid(), &here, 1, &there, 1, 0);
	if (got == (ssize_t)n)
		return true;
	if (got < 0 && (errno == EPERM || errno == ENOSYS) && mapped((uintptr_t)(into ? dst : src), n, into)) {
		memcpy(dst, src, n);
		return true;
	}
	return false;
}

/* The memory of [addr, addr+len) in mr's address space, or NULL; write
 * says whether it is to be written. */
uint8_t *mr_ptr(struct nvmock_mr *mr, uint64_t addr, uint64_t len, bool write)
{
	if (!mr || addr < mr->iova || len > mr->length || addr - mr->iova > mr->length - len)
		return NULL;
	if ((mr->access & IBV_ACCESS_ON_DEMAND) && !mapped(addr, len, write))
		return NULL;
	return mr->base + (addr - mr->iova);
}

/* mlx5 puts a queue in huge pages when MLX_<component>_ALLOC_TYPE says
 * HUGE, and fails its creation when the system has none to give (a shared
 * memory segment of one huge page, as its buffer takes); PREFER_HUGE and the
 * others fall back. The mock's queues are its own, so it only asks. */
bool huge_refused(const char *component)
{
	char name[32];
	const char *v;
	int id;

	snprintf(name, sizeof(name), "%s_ALLOC_TYPE", component);
	v = getenv(name);
	if (!v || strcasecmp(v, "HUGE"))
		return false;
	id = shmget(IPC_PRIVATE, 2 << 20, SHM_HUGETLB | SHM_R | SHM_W);
	if (id < 0) {
		trace("%s=HUGE: no huge page (%m), as mlx5 fails then", name);
		return true;
	}
	shmctl(id, IPC_RMID, NULL);
	return false;
}

/* ---- completion queues ---- */

/* Gets memory m for a ring of size completions (and their times, if ts is
 * not NULL), from the CQ's parent domain if it has one. 0 or an errno. */
int cq_ring(struct nvmock_cq *cq, struct qmem *m, uint32_t size, struct ibv_wc **ring, int64_t **ts)
{
	size_t n = QALIGN((size_t)size * sizeof(**ring));
	int err = qmem_get(m, cq->parent, n + (ts ? (size_t)size * sizeof(**ts) : 0), MLX5DV_RES_TYPE_CQ);

	if (!err) {
		*ring = m->p;
		if (ts)
			*ts = (int64_t *)((uint8_t *)m->p + n);
	}
	return err;
}

/* A CQ of at least cqe entries, completing events to channel (or NULL);
 * with ts, one that keeps each completion's time (cqex.c); its memory
 * from parent, a parent domain, if not NULL. */
struct nvmock_cq *new_cq(struct ibv_context *ibctx, int cqe, struct ibv_comp_channel *channel, int comp_vector, bool ts,
			 struct ibv_pd *parent)
{
	const struct ibv_device_attr *caps = to_ctx(ibctx)->caps;
	struct nvmock_cq *cq;
	uint32_t size = 1;
	int err;

	int chan_w = -1;

	if (channel) {
		/* Only a channel the shim made for this device's context. The
		 * CQ keeps a writer of its own, as the kernel keeps the channel
		 * while a CQ refers to it: the shim's goes when the program
		 * closes the channel, and its number may then be reused. */
		chan_w = shim_channel_writer && channel->context == ibctx ? shim_channel_writer(channel->fd) : -1;
		if (chan_w >= 0)
			chan_w = fcntl(chan_w, F_DUPFD_CLOEXEC, 0);
		if (chan_w < 0) {
			trace("create_cq: fd %d is not a completion channel of this context", channel->fd);
			errno = EINVAL;
			return NULL;
		}
	}
	if (cqe < 1 || cqe > caps->max_cqe || comp_vector < 0 || comp_vector >= ibctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	if (!qmem_custom(parent) && huge_refused("MLX_CQ")) {
		if (chan_w >= 0)
			close(chan_w);
		return NULL;
	}
	/* mlx5 rounds up to a power of two, less one. */
	while (size < (uint32_t)cqe + 1)
		size <<= 1;
	cq = calloc(1, sizeof(*cq));
	err = cq ? 0 : ENOMEM;
	if (cq) {
		cq->parent = parent;
		err = cq_ring(cq, &cq->mem, size, &cq->ring, ts ? &cq->ts : NULL);
		if (!err && (err = qmem_db(&cq->db, parent)))
			qmem_put(&cq->mem);
	}
	if (err) {
		free(cq);
		if (chan_w >= 0)
			close(chan_w);
		errno = err;
		return NULL;
	}
	if (parent)
		pd_use_parent(parent, 1);
	cq->size = size;
	cq->cq.cqe = size - 1;
	cq->chan_w = chan_w;
	return cq;
}

static struct ibv_cq *create_cq(struct ibv_context *ibctx, int cqe, struct ibv_comp_channel *channel, int comp_vector)
{
	struct nvmock_cq *cq = new_cq(ibctx, cqe, channel, comp_vector, false, NULL);

	return cq ? &cq->cq : NULL;
}

/* fire sends the CQ's event to its channel and disarms it. */
static void fire(struct nvmock_cq *cq)
{
	uint64_t handle = (uintptr_t)&cq->cq;

	cq->armed = ARM_NONE;
	if (cq->chan_w < 0)
		return; /* armed without a channel: nobody to tell */
	if (send(cq->chan_w, &handle, sizeof(handle), MSG_DONTWAIT | MSG_NOSIGNAL) == sizeof(handle)) {
		cq->events++;
	} else if (!cq->event_lost) {
		/* Only a channel with hundreds of unread events is full. */
		fprintf(stderr, "nvmock-verbs: completion event lost: %s\n", strerror(errno));
		cq->event_lost = true;
	}
}

/* take_back removes a destroyed CQ's unread events from its channel, as
 * the kernel does: ibv_get_cq_event would hand out a freed CQ. */
static void take_back(struct nvmock_cq *cq)
{
	uint64_t me = (uintptr_t)&cq->cq, h, others[512];
	int fd = cq->cq.channel ? cq->cq.channel->fd : -1, i, n = 0;

	/* A channel fd the program closed may be another file by now. */
	if (fd < 0 || cq->chan_w < 0 || !shim_channel_writer || shim_channel_writer(fd) < 0)
		return;
	while (n < (int)(sizeof(others) / sizeof(others[0])) && recv(fd, &h, sizeof(h), MSG_DONTWAIT) == sizeof(h)) {
		if (h != me)
			others[n++] = h;
		else
			cq->events--;
	}
	for (i = 0; i < n; i++)
		if (send(cq->chan_w, &others[i], sizeof(others[i]), MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof(others[i])) {
			/* Its CQ's destroy must not wait for it. */
			to_cq((struct ibv_cq *)(uintptr_t)others[i])->events--;
			fprintf(stderr, "nvmock-verbs: completion event lost: %s\n", strerror(errno));
		}
}

static int req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct nvmock_context *ctx = to_ctx(ibcq->context);
	struct nvmock_cq *cq = to_cq(ibcq);

	pthread_mutex_lock(&ctx->lock);
	/* Armed for any completion, a solicited-only request changes nothing
	 * (the kernel ORs the two). */
	if (!(solicited_only && cq->armed == ARM_NEXT))
		cq->armed = solicited_only ? ARM_SOLICITED : ARM_NEXT;
	/* A ConnectX is armed with the CQ's consumer index: completions not
	 * yet polled raise the event at once, so a program that arms after
	 * its last poll never waits for one that already came. */
	if (!solicited_only && cq->count)
		fire(cq);
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static int destroy_cq(struct ibv_cq *ibcq)
{
	struct nvmock_context *ctx = to_ctx(ibcq->context);
	struct nvmock_cq *cq = to_cq(ibcq);
	struct qmem mem, db;
	bool busy;

	pthread_mutex_lock(&ctx->lock);
	busy = cq->users > 0;
	if (!busy) {
		mem = cq->mem;
		db = cq->db;
		if (cq->parent)
			to_pd(cq->parent)->users--;
		take_back(cq);
	}
	pthread_mutex_unlock(&ctx->lock);
	if (busy)
		return EBUSY; /* as the kernel answers while QPs use it */
	/* Not under the lock: a parent domain's free may call verbs. */
	qmem_put(&mem);
	qmem_put(&db);
	if (cq->chan_w >= 0) {
		/* As ibv_destroy_cq(3) promises: it waits until every event
		 * the program got is acknowledged (ibv_ack_cq_events), so no
		 * thread still holds the CQ from ibv_get_cq_event. */
		pthread_mutex_lock(&ibcq->mutex);
		while (ibcq->comp_events_completed != cq->events)
			pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
		pthread_mutex_unlock(&ibcq->mutex);
		close(cq->chan_w);
	}
	release(ctx, cq, cq->raised != acked(ibcq, &ibcq->async_events_completed));
	return 0;
}

static int poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct nvmock_context *ctx = to_ctx(ibcq->context);
	struct nvmock_cq *cq = to_cq(ibcq);
	int i;

	if (n < 0)
		return -1;
	pthread_mutex_lock(&ctx->lock);
	/* A program polling an empty CQ moves the traffic itself: no wait for
	 * the engine thread to be scheduled. What it took may have set timers
	 * or left answers to send: the engine looks again. */
	if (!cq->count && progress(ctx))
		wake(ctx);
	for (i = 0; i < n && cq->count; i++) {
		wc[i] = cq->ring[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		cq->count--;
	}
	pthread_mutex_unlock(&ctx->lock);
	return i;
}

/* Drops a QP's completions from cq, keeping the others' order, as mlx5
 * does when the QP is reset or destroyed (__mlx5_cq_clean). ctx->lock is
 * held. */
static void cq_clean(struct ibv_cq *c, uint32_t qpn)
{
	struct nvmock_cq *cq;
	uint32_t i, n = 0;

	if (!c)
		return;
	cq = to_cq(c);
	for (i = 0; i < cq->count; i++) {
		uint32_t from = (cq->head + i) % cq->size, to = (cq->head + n) % cq->size;

		if (cq->ring[from].qp_num == qpn)
			continue;
		cq->ring[to] = cq->ring[from];
		if (cq->ts)
			cq->ts[to] = cq->ts[from];
		n++;
	}
	cq->count = n;
}

static void cqs_clean(struct ibv_qp *q)
{
	cq_clean(q->send_cq, q->qp_num);
	if (q->recv_cq != q->send_cq)
		cq_clean(q->recv_cq, q->qp_num);
}

/* Adds a completion; false if it is lost because the CQ is in error. */
bool complete(struct nvmock_cq *cq, const struct ibv_wc *wc, bool solicited)
{
	/* A ConnectX told to ignore overruns writes over entries not yet
	 * polled; here the new completion is lost instead. */
	if (cq->ignore_overrun && cq->count == cq->size)
		return true;
	if (cq->overrun || cq->count == cq->size) {
		/* An overrun CQ is in error from then on: it takes no more
		 * completions, and raises an async CQ error. Said once on
		 * stderr too, as a program waiting for a completion would
		 * otherwise wait for ever without a hint. */
		if (!cq->overrun) {
			fprintf(stderr, "nvmock-verbs: CQ of %u entries overrun: completions lost\n", cq->size - 1);
			if (raise_event(to_ctx(cq->cq.context), IBV_EVENT_CQ_ERR, &cq->cq))
				cq->raised++;
		}
		cq->overrun = true;
		return false;
	}
	cq->ring[(cq->head + cq->count) % cq->size] = *wc;
	if (cq->ts)
		cq->ts[(cq->head + cq->count) % cq->size] = now_ns();
	cq->count++;
	/* Errors count as solicited (ibv_req_notify_cq(3)). */
	if (cq->armed == ARM_NEXT ||
	    (cq->armed == ARM_SOLICITED && (solicited || wc->status != IBV_WC_SUCCESS)))
		fire(cq);
	return true;
}

void qp_init_wqe(struct nvmock_qp *qp)
{
	qp->sq_head = qp->sq_next = qp->sq_tail = qp->local_run = 0;
	qp->rq_head = qp->rq_tail = 0;
	qp->resp_seq = qp->rq_psn;
	qp->psn0 = qp->sq_psn;
	qp->resp_off = qp->atomics = 0;
	qp->resp_skip = qp->resp_rwqe = false;
	qp->fatal = qp->comm_est = false;
	qp->deadline = qp->resend_at = 0;
	qp->uc_err = false;
}

/* Connects the context to the daemon, once: it then has its block of
 * QP and SRQ numbers and the port's LID. Not under the lock, as connecting
 * may wait (a thread that loses the race closes its socket). */
void ensure_connected(struct nvmock_context *ctx)
{
	union ibv_gid gid;
	uint32_t base = 0;
	uint16_t lid = 0;
	bool connected;
	int fd;

	pthread_mutex_lock(&ctx->lock);
	connected = ctx->connected;
	pthread_mutex_unlock(&ctx->lock);
	if (connected)
		return;
	fd = connect_daemon(ctx, 1, &base, &lid);
	if (ibv_query_gid(&ctx->vctx.context, 1, 0, &gid))
		memset(&gid, 0, sizeof(gid));
	pthread_mutex_lock(&ctx->lock);
	if (!ctx->connected) {
		ctx->connected = true;
		ctx->port = 1;
		ctx->sock = fd;
		ctx->qpn_base = base;
		ctx->lid = lid;
		ctx->gid = gid;
		fd = -1;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (fd >= 0)
		close(fd);
}

/* Creates a QP of in's type; in->cap gets what it was given. The rest of
 * in is the program's and stays as it was. */
static struct ibv_qp *create_qp_common(struct ibv_context *ibctx, struct ibv_pd *pd, struct ibv_qp_init_attr_ex *in)
{
	struct ibv_qp_init_attr_ex copy = *in, *a = &copy;
	struct nvmock_context *ctx = to_ctx(ibctx);
	const struct ibv_device_attr *caps = ctx->caps;
	struct nvmock_qp *qp;
	bool tgt = a->qp_type == IBV_QPT_XRC_RECV, ini = a->qp_type == IBV_QPT_XRC_SEND;
	uint32_t i;
	int err;

	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD && !tgt && !ini) {
		trace("QP type %d is not simulated (RC, UC, UD and XRC)", a->qp_type);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (tgt) {
		/* A target has a domain and nothing else: no PD, CQs, SRQ
		 * or queues (the kernel ignores them). */
		if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd || a->xrcd->context != ibctx) {
			errno = EINVAL;
			return NULL;
		}
		pd = NULL;
		a->send_cq = a->recv_cq = NULL;
		a->srq = NULL;
		a->cap = (struct ibv_qp_cap){ 0 };
	} else if (ini) {
		/* An initiator sends only. */
		a->recv_cq = NULL;
		a->srq = NULL;
		a->cap.max_recv_wr = a->cap.max_recv_sge = 0;
	}
	/* An XRC SRQ serves XRC targets only (the kernel's create_qp). */
	if (a->srq && (a->srq->context != ibctx || to_srq(a->srq)->xrcd)) {
		errno = EINVAL;
		return NULL;
	}
	if (a->srq && to_srq(a->srq)->dom != domain_of(pd)) {
		/* An HCA checks an SRQ's receives against the SRQ's PD; the
		 * data path checks a QP's against its own. */
		trace("create_qp: an SRQ of another PD is not simulated");
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->srq) /* mlx5 ignores them then */
		a->cap.max_recv_wr = a->cap.max_recv_sge = 0;
	if ((!tgt && (!a->send_cq || a->send_cq->context != ibctx)) ||
	    (!tgt && !ini && (!a->recv_cq || a->recv_cq->context != ibctx)) ||
	    a->cap.max_send_wr > (uint32_t)caps->max_qp_wr || a->cap.max_recv_wr > (uint32_t)caps->max_qp_wr ||
	    a->cap.max_send_sge > (uint32_t)caps->max_sge || a->cap.max_recv_sge > (uint32_t)caps->max_sge ||
	    a->cap.max_inline_data > MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	if (!tgt && !qmem_custom(pd) && huge_refused("MLX_QP"))
		return NULL;
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->ctx = ctx;
	qp->ud = a->qp_type == IBV_QPT_UD;
	qp->uc = a->qp_type == IBV_QPT_UC;
	qp->xrc = tgt || ini;
	qp->tgt = tgt;
	/* Powers of two, as mlx5 rounds them: the free-running counters then
	 * map to slots alike across their wrap. */
	qp->sq_size = qp->rq_size = 1;
	while (qp->sq_size < a->cap.max_send_wr)
		qp->sq_size <<= 1;
	while (qp->rq_size < a->cap.max_recv_wr)
		qp->rq_size <<= 1;
	qp->max_send_sge = a->cap.max_send_sge ? a->cap.max_send_sge : 1;
	qp->max_recv_sge = a->cap.max_recv_sge ? a->cap.max_recv_sge : 1;
	if (a->srq) {
		/* One slot: the SRQ receive taken for the message in progress. */
		qp->srq = to_srq(a->srq);
		qp->rq_size = 1;
		qp->max_recv_sge = qp->srq->max_sge;
	}
	if (tgt) /* one slot, for the receive of any SRQ a message names */
		qp->max_recv_sge = caps->max_srq_sge;
	qp->max_inline = a->cap.max_inline_data;
	qp->sig_all = a->sq_sig_all;
	/* The work queues, in one buffer as mlx5's, from a parent domain's
	 * allocator if it has one (an XRC target's has no PD). */
	{
		size_t sq = 0, sq_sge = QALIGN(sq + qp->sq_size * sizeof(*qp->sq)),
		       rq = QALIGN(sq_sge + (size_t)qp->sq_size * qp->max_send_sge * sizeof(*qp->sq_sge)),
		       rq_sge = QALIGN(rq + qp->rq_size * sizeof(*qp->rq)),
		       inl = QALIGN(rq_sge + (size_t)qp->rq_size * qp->max_recv_sge * sizeof(*qp->rq_sge));
		uint8_t *m;

		err = qmem_queue(&qp->mem, &qp->db, pd, inl + (size_t)qp->sq_size * qp->max_inline, MLX5DV_RES_TYPE_QP);
		if (err)
			goto fail;
		m = qp->mem.p;
		qp->sq = (struct swqe *)(m + sq);
		qp->sq_sge = (struct ibv_sge *)(m + sq_sge);
		qp->rq = (struct rwqe *)(m + rq);
		qp->rq_sge = (struct ibv_sge *)(m + rq_sge);
		qp->sq_inl = qp->max_inline ? m + inl : NULL;
	}
	qp->batch = calloc(qp->sq_size, sizeof(*qp->batch));
	qp->batch_sge = calloc((size_t)qp->sq_size * qp->max_send_sge, sizeof(*qp->batch_sge));
	if (qp->max_inline)
		qp->batch_inl = malloc((size_t)qp->sq_size * qp->max_inline);
	if (!qp->batch || !qp->batch_sge || (qp->max_inline && !qp->batch_inl)) {
		err = ENOMEM;
		goto fail;
	}
	{
		pthread_mutexattr_t ma;

		pthread_mutexattr_init(&ma);
		pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ERRORCHECK);
		pthread_mutex_init(&qp->wr_lock, &ma);
		pthread_mutexattr_destroy(&ma);
	}

	ensure_connected(ctx);

	struct ibv_qp *q = &qp->vqp.qp;
	q->context = ibctx;
	q->qp_context = a->qp_context;
	q->pd = pd;
	q->send_cq = a->send_cq;
	q->recv_cq = a->recv_cq;
	q->srq = a->srq;
	q->state = qp->state = IBV_QPS_RESET;
	q->qp_type = a->qp_type;
	pthread_mutex_init(&q->mutex, NULL);
	pthread_cond_init(&q->cond, NULL);

	pthread_mutex_lock(&ctx->lock);
	err = start_engine(ctx);
	/* Round the table from the last QPN given, so that a stale packet
	 * does not find a new QP at once. */
	for (i = 0; !err && i < NVMOCK_IBD_QPN_BLOCK; i++)
		if (!ctx->qps[(ctx->next_qp + i) % NVMOCK_IBD_QPN_BLOCK])
			break;
	if (!err && i == NVMOCK_IBD_QPN_BLOCK)
		err = ENOMEM;
	if (!err) {
		qp->idx = (ctx->next_qp + i) % NVMOCK_IBD_QPN_BLOCK;
		ctx->next_qp = qp->idx + 1;
		q->qp_num = ctx->qpn_base + qp->idx;
		q->handle = q->qp_num;
		if (a->send_cq)
			to_cq(a->send_cq)->users++;
		if (a->recv_cq)
			to_cq(a->recv_cq)->users++;
		if (qp->srq)
			qp->srq->users++;
		if (pd) {
			qp->dom = domain_of(pd);
			qp->dom->users++;
			if (to_pd(pd)->protection) /* a parent domain counts its QPs */
				to_pd(pd)->users++;
		}
		if (tgt) {
			qp->xrcd = container_of(a->xrcd, struct nvmock_xrcd, vx.xrcd);
			qp->xrcd->users++;
			qp->vqp.xrcd = &qp->xrcd->vx;
			qp->vqp.comp_mask |= VERBS_QP_XRCD;
		}
		ctx->qps[qp->idx] = qp;
	}
	pthread_mutex_unlock(&ctx->lock);
	if (err)
		goto fail;
	if (!tgt) {
		a->cap.max_send_wr = qp->sq_size;
		a->cap.max_recv_wr = qp->srq || ini ? 0 : qp->rq_size;
		a->cap.max_send_sge = qp->max_send_sge;
		a->cap.max_recv_sge = qp->srq || ini ? 0 : qp->max_recv_sge;
	}
	in->cap = a->cap;
	return q;
fail:
	qmem_put(&qp->mem);
	qmem_put(&qp->db);
	free(qp->batch);
	free(qp->batch_sge);
	free(qp->batch_inl);
	free(qp);
	errno = err;
	return NULL;
}


static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a = {
		.qp_context = attr->qp_context, .send_cq = attr->send_cq, .recv_cq = attr->recv_cq,
		.srq = attr->srq, .cap = attr->cap, .qp_type = attr->qp_type, .sq_sig_all = attr->sq_sig_all,
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = pd,
	};
	struct ibv_qp *qp = create_qp_common(pd->context, pd, &a);

	if (qp)
		attr->cap = a.cap;
	return qp;
}

static struct ibv_qp *create_qp_ex(struct ibv_context *ibctx, struct ibv_qp_init_attr_ex *a)
{
	/* What mlx5 takes for each type, of what the mock simulates. */
	const uint64_t sends = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
		       writes = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
		       windows = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV,
		       ops = a->qp_type == IBV_QPT_UD ? sends
			   : a->qp_type == IBV_QPT_UC ? sends | writes | windows
			   : a->qp_type == IBV_QPT_XRC_RECV ? 0
			   : a->qp_type == IBV_QPT_XRC_SEND
			       ? sends | writes | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
					 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
			       : sends | writes | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
					 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | windows; /* windows: not XRC's here */
	/* A target has a domain instead of a PD. */
	const uint32_t need = a->qp_type == IBV_QPT_XRC_RECV ? IBV_QP_INIT_ATTR_XRCD : IBV_QP_INIT_ATTR_PD;
	struct ibv_qp *q;

	/* mlx5 takes a PD with a target's domain, which the kernel ignores;
	 * and of the create flags, the one for InfiniBand ports (the others
	 * are Ethernet's, or other drivers'). */
	const uint32_t may = need | IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	const bool flags = a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (!(a->comp_mask & need) || (a->comp_mask & ~may) ||
	    (flags && (a->create_flags & ~IBV_QP_CREATE_BLOCK_SELF_MCAST_LB)) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~ops))) {
		trace("create_qp_ex: comp_mask %#x, send_ops_flags %#llx, create_flags %#x: only a PD (a domain for XRC_RECV), the multicast loopback block and the QP type's send operations are simulated",
		      a->comp_mask, (unsigned long long)a->send_ops_flags, a->create_flags);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (need == IBV_QP_INIT_ATTR_PD && (!a->pd || a->pd->context != ibctx)) {
		errno = EINVAL;
		return NULL;
	}
	q = create_qp_common(ibctx, need == IBV_QP_INIT_ATTR_PD ? a->pd : NULL, a);
	if (q && (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		qpx_setup(to_qp(q));
	if (q && flags)
		to_qp(q)->no_self_mc = a->create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	return q;
}

static int destroy_qp(struct ibv_qp *q)
{
	struct nvmock_qp *qp = to_qp(q);
	struct nvmock_context *ctx = qp->ctx;

	pthread_mutex_lock(&ctx->lock);
	if (qp->batch_open || qp->n_mc) {
		pthread_mutex_unlock(&ctx->lock);
		return EBUSY; /* between wr_start and wr_complete, or attached to a group */
	}
	purge(ctx, qp, NULL, false);
	cqs_clean(q);
	if (q->pd) {
		qp->dom->users--;
		if (to_pd(q->pd)->protection)
			to_pd(q->pd)->users--;
	}
	ctx->qps[qp->idx] = NULL;
	if (q->send_cq)
		to_cq(q->send_cq)->users--;
	if (q->recv_cq)
		to_cq(q->recv_cq)->users--;
	if (qp->srq && !qp->tgt)
		qp->srq->users--;
	if (qp->xrcd)
		qp->xrcd->users--;
	pthread_mutex_unlock(&ctx->lock);
	qmem_put(&qp->mem);
	qmem_put(&qp->db);
	free(qp->batch);
	free(qp->batch_sge);
	free(qp->batch_inl);
	free(qp->mc);
	release(ctx, qp, qp->raised != acked(q, &q->events_completed));
	return 0;
}

/* The attributes each transition needs and may take (IBA 11.2.5.2 and
 * the kernel's qp_state_table), RC, UC, UD and XRC's two types. */
struct transition {
	enum ibv_qp_state cur, next;
	int req, opt;
};

static const struct transition rc_transitions[] = {
	{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0 },
	{ IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
	{ IBV_QPS_INIT, IBV_QPS_RTR,
	  IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	  IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX },
	{ IBV_QPS_RTR, IBV_QPS_RTS,
	  IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
	  IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE },
	{ IBV_QPS_RTS, IBV_QPS_RTS, 0,
	  IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER },
};

static const struct transition uc_transitions[] = {
	{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0 },
	{ IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
	{ IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
	  IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX },
	{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN,
	  IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE },
	{ IBV_QPS_RTS, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE },
	{ IBV_QPS_SQE, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS },
};

static const struct transition xrc_ini_transitions[] = {
	{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0 },
	{ IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
	{ IBV_QPS_INIT, IBV_QPS_RTR, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
	  IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX },
	{ IBV_QPS_RTR, IBV_QPS_RTS,
	  IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
	  IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE },
	{ IBV_QPS_RTS, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE },
};

static const struct transition xrc_tgt_transitions[] = {
	{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0 },
	{ IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS },
	{ IBV_QPS_INIT, IBV_QPS_RTR,
	  IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	  IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX },
	{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN | IBV_QP_TIMEOUT,
	  IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE },
	{ IBV_QPS_RTS, IBV_QPS_RTS, 0,
	  IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER },
};

static const struct transition ud_transitions[] = {
	{ IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0 },
	{ IBV_QPS_INIT, IBV_QPS_INIT, 0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY },
	{ IBV_QPS_INIT, IBV_QPS_RTR, 0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY },
	{ IBV_QPS_RTR, IBV_QPS_RTS, IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY },
	{ IBV_QPS_RTS, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY },
	{ IBV_QPS_SQE, IBV_QPS_RTS, 0, IBV_QP_CUR_STATE | IBV_QP_QKEY },
};

static bool transition_ok(const struct nvmock_qp *qp, enum ibv_qp_state cur, enum ibv_qp_state next, int mask)
{
#define TABLE(x) t = x, n = sizeof(x) / sizeof(*x)
	const struct transition *t;
	size_t i, n;

	if (qp->ud)
		TABLE(ud_transitions);
	else if (qp->uc)
		TABLE(uc_transitions);
	else if (qp->tgt)
		TABLE(xrc_tgt_transitions);
	else if (qp->xrc)
		TABLE(xrc_ini_transitions);
	else
		TABLE(rc_transitions);
#undef TABLE

	/* Any state may go to RESET or ERR but RESET to ERR (the kernel's
	 * ib_modify_qp_is_ok), with no other attribute: not even CUR_STATE,
	 * which only a few transitions take. */
	if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
		return !(mask & ~IBV_QP_STATE) && !(cur == IBV_QPS_RESET && next == IBV_QPS_ERR);
	mask &= ~IBV_QP_STATE;
	for (i = 0; i < n; i++)
		if (t[i].cur == cur && t[i].next == next)
			return (mask & t[i].req) == t[i].req && !(mask & ~(t[i].req | t[i].opt));
	return false;
}

/* Values the kernel refuses (ib_modify_qp_is_ok and the mlx5 driver). */
static bool attrs_ok(const struct ibv_qp_attr *a, int mask)
{
	return !((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > 16) &&
	       !((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > 16) &&
	       !((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) &&
	       !((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) &&
	       !((mask & IBV_QP_TIMEOUT) && a->timeout > 31) &&
	       !((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) &&
	       !((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096)) &&
	       !((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= 128);
}

static bool port_exists(struct nvmock_context *ctx, uint8_t port)
{
	struct ibv_port_attr pa;

	return port && !ibv_query_port(&ctx->vctx.context, port, &pa);
}

static bool port_is_ib(struct nvmock_context *ctx, uint8_t port)
{
	struct ibv_port_attr pa;

	return !ibv_query_port(&ctx->vctx.context, port, &pa) && pa.link_layer != IBV_LINK_LAYER_ETHERNET;
}

static int modify_qp(struct ibv_qp *q, struct ibv_qp_attr *attr, int mask)
{
	struct nvmock_qp *qp = to_qp(q);
	struct nvmock_context *ctx = qp->ctx;
	enum ibv_qp_state cur, next;
	int err = 0;

	/* uverbs drops what XRC's types ignore before anything checks the
	 * mask (its modify_qp_mask). */
	if (qp->tgt)
		mask &= ~(IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY);
	else if (qp->xrc)
		mask &= ~(IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	pthread_mutex_lock(&ctx->lock);
	cur = qp->state;
	if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
		err = EINVAL;
	next = mask & IBV_QP_STATE ? attr->qp_state : cur;
	if (!err && (!transition_ok(qp, cur, next, mask) || !attrs_ok(attr, mask)))
		err = EINVAL;
	if (!err && (mask & IBV_QP_PORT) && !port_exists(ctx, attr->port_num))
		err = EINVAL;
	/* The context reached the daemon for its first port; every mock HCA
	 * has one. */
	if (!err && next == IBV_QPS_RTR && qp->port != ctx->port) {
		trace("QP %#x: port %u: only port %u is connected", q->qp_num, qp->port, ctx->port);
		err = EOPNOTSUPP;
	}
	if (!err && next == IBV_QPS_RTR && !port_is_ib(ctx, qp->port)) {
		trace("QP %#x: RoCE (an Ethernet port) is not simulated", q->qp_num);
		err = EOPNOTSUPP;
	}
	/* The subnet has no routers: a QP reaches its peer by LID. */
	if (!err && next == IBV_QPS_RTR && !qp->ud && !attr->ah_attr.dlid)
		err = EINVAL;
	if (err) {
		pthread_mutex_unlock(&ctx->lock);
		return err;
	}
	if (mask & IBV_QP_PKEY_INDEX)
		qp->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		qp->port = attr->port_num;
	if (mask & IBV_QP_ACCESS_FLAGS)
		qp->access = attr->qp_access_flags;
	if (mask & IBV_QP_QKEY)
		qp->qkey = attr->qkey;
	if (mask & IBV_QP_AV) {
		qp->ah = attr->ah_attr;
		qp->dlid = attr->ah_attr.dlid;
	}
	if (mask & IBV_QP_PATH_MTU)
		qp->mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		qp->dqpn = attr->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN)
		qp->resp_seq = qp->rq_psn = attr->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		qp->psn0 = (qp->sq_psn = attr->sq_psn) - qp->sq_tail;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		qp->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_TIMEOUT)
		qp->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		qp->retries_left = qp->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->rnr_left = qp->rnr_retry = attr->rnr_retry;
	if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
		qp_error(qp, qp->sq_head, IBV_WC_WR_FLUSH_ERR);
	} else if (next == IBV_QPS_RESET) {
		purge(ctx, qp, NULL, false);
		qp_init_wqe(qp);
		cqs_clean(q);
	}
	qp->state = q->state = next;
	if (next == IBV_QPS_RESET)
		qp->sq_open = false;
	if (next == IBV_QPS_RTS) {
		qp->sq_open = true;
		kick(qp);
		flush(ctx);
		wake(ctx);
	}
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

static int query_qp(struct ibv_qp *q, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct nvmock_qp *qp = to_qp(q);

	(void)mask;
	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	pthread_mutex_lock(&qp->ctx->lock);
	attr->qp_state = attr->cur_qp_state = qp->state;
	attr->path_mtu = qp->mtu;
	attr->qp_access_flags = qp->access;
	attr->qkey = qp->qkey;
	attr->pkey_index = qp->pkey_index;
	attr->port_num = qp->port;
	attr->ah_attr = qp->ah;
	attr->dest_qp_num = qp->dqpn;
	attr->rq_psn = qp->rq_psn;
	attr->sq_psn = qp->sq_psn;
	attr->max_rd_atomic = qp->max_rd_atomic;
	attr->max_dest_rd_atomic = qp->max_dest_rd_atomic;
	attr->min_rnr_timer = qp->min_rnr_timer;
	attr->timeout = qp->timeout;
	attr->retry_cnt = qp->retry_cnt;
	attr->rnr_retry = qp->rnr_retry;
	if (!qp->tgt) { /* a target has no queues */
		attr->cap.max_send_wr = qp->sq_size;
		/* An SRQ's QP has no receive queue of its own, an initiator none. */
		attr->cap.max_recv_wr = qp->srq || qp->xrc ? 0 : qp->rq_size;
		attr->cap.max_send_sge = qp->max_send_sge;
		attr->cap.max_recv_sge = qp->srq || qp->xrc ? 0 : qp->max_recv_sge;
		attr->cap.max_inline_data = qp->max_inline;
	}
	init->qp_context = q->qp_context;
	init->send_cq = q->send_cq;
	init->recv_cq = q->recv_cq;
	init->srq = qp->tgt ? NULL : q->srq;
	init->cap = attr->cap;
	init->qp_type = q->qp_type;
	init->sq_sig_all = qp->sig_all;
	pthread_mutex_unlock(&qp->ctx->lock);
	return 0;
}

/* Address handles, for datagrams: the subnet routes by LID (0xc000 and
 * up: a multicast group's). */
static struct ibv_ah *create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct nvmock_ah *ah;

	if (!attr->dlid || attr->dlid == 0xffff || !port_exists(to_ctx(pd->context), attr->port_num)) {
		errno = EINVAL;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	ah->attr = *attr;
	ah->dom = domain_of(pd);
	pd_use(pd, 1);
	return &ah->ah;
}

static int destroy_ah(struct ibv_ah *ah)
{
	struct nvmock_ah *a = container_of(ah, struct nvmock_ah, ah);

	pd_use(&a->dom->pd, -1);
	free(a);
	return 0;
}

void datapath_ops(struct verbs_context_ops *ops)
{
	ops->create_ah = create_ah;
	ops->destroy_ah = destroy_ah;
	ops->alloc_pd = alloc_pd;
	ops->dealloc_pd = dealloc_pd;
	ops->reg_mr = reg_mr;
	ops->dereg_mr = dereg_mr;
	ops->create_cq = create_cq;
	ops->destroy_cq = destroy_cq;
	ops->req_notify_cq = req_notify_cq;
	ops->poll_cq = poll_cq;
	ops->create_qp = create_qp;
	ops->create_qp_ex = create_qp_ex;
	ops->modify_qp = modify_qp;
	ops->query_qp = query_qp;
	ops->destroy_qp = destroy_qp;
	ops->post_send = post_send;
	ops->post_recv = post_recv;
	srq_ops(ops);
	mcast_ops(ops);
	xrc_ops(ops);
	cqex_ops(ops);
	dm_ops(ops);
	change_ops(ops);
	mw_ops(ops);
	domain_ops(ops);
}
