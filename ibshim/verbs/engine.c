//go:build ignore

/* The daemon connection, the packet queue and the engine thread (datapath.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "datapath.h"

/* ---- the daemon connection and the engine ---- */

static void *engine(void *arg);

/* hello connects to the daemon and says hello (op) for this context's
 * device and port: the socket, or -1. */
static int hello(struct nvmock_context *ctx, uint32_t op, uint8_t port)
{
	struct nvmock_ibd_verbs_hello h = { .magic = NVMOCK_IBD_MAGIC, .op = op, .pid = (uint32_t)getpid(), .port = port };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = getenv(NVMOCK_IBD_ENV);
	int fd;

	if (!path || !path[0])
		path = NVMOCK_IBD_SOCKET;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	snprintf(h.ibdev, sizeof(h.ibdev), "%s", ctx->vctx.context.device->name);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    send(fd, &h, sizeof(h), MSG_NOSIGNAL) != sizeof(h)) {
		trace("%s: no fabric daemon at %s: %s", h.ibdev, path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Connects to the daemon for the port and returns the socket (-1: none),
 * the context's QPN block and the port's LID. Without a daemon (or for a port the fabric
 * does not have) the context still makes QPs, whose packets go nowhere, as
 * on a fabric that is down. Called without the lock: it may wait, and so
 * it writes nothing of the context's. */
int connect_daemon(struct nvmock_context *ctx, uint8_t port, uint32_t *qpn_base, uint16_t *lid)
{
	struct nvmock_ibd_verbs_welcome w = { 0 };
	struct pollfd pfd;
	int fd;

	*qpn_base = ((uint32_t)getpid() % (0xffffff / NVMOCK_IBD_QPN_BLOCK - 1) + 1) * NVMOCK_IBD_QPN_BLOCK;
	fd = hello(ctx, NVMOCK_IBD_OP_VERBS_HELLO, port);
	if (fd < 0)
		return -1;
	pfd = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (poll(&pfd, 1, 5000) != 1 || recv(fd, &w, sizeof(w), 0) != sizeof(w) ||
	    w.magic != NVMOCK_IBD_MAGIC || w.op != NVMOCK_IBD_OP_VERBS_HELLO || !w.qpn_base) {
		trace("%s: the fabric daemon has no InfiniBand port %u for it", ctx->vctx.context.device->name, port);
		close(fd);
		return -1;
	}
	*qpn_base = w.qpn_base;
	*lid = w.lid;
	trace("%s: QPNs from %#x, LID %u", ctx->vctx.context.device->name, w.qpn_base, w.lid);
	return fd;
}

/* The context's async fd: a connection on which the daemon sends the
 * port's events (struct ib_uverbs_async_event_desc, one per message), as
 * the kernel's async fd gives them; -1 without a daemon. Blocking, as the
 * kernel's is. */
int connect_async(struct nvmock_context *ctx)
{
	return hello(ctx, NVMOCK_IBD_OP_ASYNC_HELLO, 1);
}

/* raise_event has the daemon send an async event about one of this
 * context's objects back on its async fd (the kernel's handle for it is
 * the object's address, which libibverbs hands back as the element).
 * Without a daemon there is no way to the program: the event is lost, as
 * when the shim made the fd silent (send then fails). */
bool raise_event(struct nvmock_context *ctx, enum ibv_event_type type, const void *element)
{
	uint8_t msg[NVMOCK_IBD_ASYNC_RAISE_SIZE] = { 0 };
	uint32_t magic = NVMOCK_IBD_MAGIC, op = NVMOCK_IBD_OP_ASYNC_RAISE, t = type;
	uint64_t e = (uintptr_t)element;

	if (!ctx->async_live)
		return false;
	memcpy(msg, &magic, 4);
	memcpy(msg + 4, &op, 4);
	memcpy(msg + 8, &e, 8);
	memcpy(msg + 16, &t, 4);
	if (send(ctx->vctx.context.async_fd, msg, sizeof(msg), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		trace("async event %d lost: %s", type, strerror(errno));
		return false;
	}
	return true;
}

struct kept {
	struct kept *next;
	void *obj;
};

/* Frees a destroyed object or, when an async event named it that the
 * program has not acknowledged (named), keeps its memory until the context
 * closes: ibv_ack_async_event locks the element's mutex, and the program
 * may read the event after the destroy. (The kernel's destroy waits for the
 * events it handed out and drops the rest; the mock cannot tell which the
 * program has read, only which it acknowledged.) */
void release(struct nvmock_context *ctx, void *obj, bool named)
{
	struct kept *k;

	if (!named) {
		free(obj);
		return;
	}
	if (!(k = malloc(sizeof(*k))))
		return; /* not freed at all: still safe */
	k->obj = obj;
	pthread_mutex_lock(&ctx->lock);
	k->next = ctx->kept;
	ctx->kept = k;
	pthread_mutex_unlock(&ctx->lock);
}

int start_engine(struct nvmock_context *ctx)
{
	int err;

	sigset_t all, old;

	if (ctx->engine_running)
		return 0;
	if (ctx->wake < 0)
		ctx->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!ctx->rx)
		ctx->rx = malloc(RX_SIZE);
	if (ctx->wake < 0 || !ctx->rx)
		return ENOMEM;
	/* The program's signals are for its own threads, not this one. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&ctx->engine, NULL, engine, ctx);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return err;
	ctx->engine_running = true;
	return 0;
}

/*
 * fork: the engine thread holds a context's lock while it works, and a
 * child forked then would find it held forever (a single-threaded
 * program's child hung in ibv_close_device). So fork waits until every
 * context's lock is free, as the engine lets go of it before it sleeps,
 * and the child, which has no engine thread, unlocks them and closes
 * without one. What else the child does with its parent's context is as
 * undefined as on real hardware without ibv_fork_init.
 */
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmock_context *open_ctxs;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void fork_prepare(void)
{
	struct nvmock_context *c;

	pthread_mutex_lock(&open_lock);
	for (c = open_ctxs; c; c = c->next_open)
		pthread_mutex_lock(&c->lock);
}

static void fork_parent(void)
{
	struct nvmock_context *c;

	for (c = open_ctxs; c; c = c->next_open)
		pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&open_lock);
}

static void fork_child(void)
{
	struct nvmock_context *c;

	for (c = open_ctxs; c; c = c->next_open) {
		c->engine_running = false; /* the thread stayed in the parent */
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&open_lock);
}

static void atfork_setup(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

int datapath_init(struct nvmock_context *ctx)
{
	ctx->sock = -1;
	ctx->wake = -1;
	ctx->qps = calloc(NVMOCK_IBD_QPN_BLOCK, sizeof(*ctx->qps));
	if (!ctx->qps)
		return ENOMEM;
	if (pthread_mutex_init(&ctx->lock, NULL)) {
		free(ctx->qps);
		return ENOMEM;
	}
	pthread_once(&atfork_once, atfork_setup);
	pthread_mutex_lock(&open_lock);
	ctx->next_open = open_ctxs;
	open_ctxs = ctx;
	pthread_mutex_unlock(&open_lock);
	return 0;
}

static const char *const kind_names[] = {
	[NVMOCK_PKT_SEND] = "send", [NVMOCK_PKT_WRITE] = "write", [NVMOCK_PKT_READ] = "read",
	[NVMOCK_PKT_CMP_SWP] = "compare-swap", [NVMOCK_PKT_FETCH_ADD] = "fetch-add",
	[NVMOCK_PKT_UD_SEND] = "datagram", [NVMOCK_PKT_ACK] = "ack", [NVMOCK_PKT_NAK] = "nak",
	[NVMOCK_PKT_READ_RESP] = "read-response", [NVMOCK_PKT_ATOMIC_RESP] = "atomic-response",
};

/* Says how many messages of each kind the context sent and took in. */
static void trace_counts(struct nvmock_context *ctx)
{
	char line[512];
	size_t n = 0;
	unsigned k;

	for (k = 0; k < sizeof(kind_names) / sizeof(*kind_names); k++)
		if (kind_names[k] && (ctx->sent[k] || ctx->taken[k]) && n < sizeof(line))
			n += snprintf(line + n, sizeof(line) - n, " %s %llu/%llu", kind_names[k],
				      (unsigned long long)ctx->sent[k], (unsigned long long)ctx->taken[k]);
	if (n)
		trace("%s: messages sent/taken in:%s", ctx->vctx.context.device->name, line);
}

void datapath_free(struct nvmock_context *ctx)
{
	struct nvmock_context **p;
	struct out_pkt *o;
	struct kept *k;
	unsigned n;

	pthread_mutex_lock(&open_lock);
	for (p = &open_ctxs; *p; p = &(*p)->next_open) {
		if (*p == ctx) {
			*p = ctx->next_open;
			break;
		}
	}
	pthread_mutex_unlock(&open_lock);

	if (ctx->engine_running) {
		pthread_mutex_lock(&ctx->lock);
		ctx->stopping = true;
		pthread_mutex_unlock(&ctx->lock);
		wake(ctx);
		pthread_join(ctx->engine, NULL);
	}
	trace_counts(ctx);
	for (n = 0; (k = ctx->kept); n++) {
		ctx->kept = k->next;
		free(k->obj);
		free(k);
	}
	if (n)
		trace("%s: %u destroyed objects were kept for async events not acknowledged", ctx->vctx.context.device->name, n);
	while ((o = ctx->out_head)) {
		ctx->out_head = o->next;
		free_pkt(o);
	}
	if (ctx->sock >= 0)
		close(ctx->sock);
	if (ctx->wake >= 0)
		close(ctx->wake);
	free(ctx->rx);
	free(ctx->qps);
	pthread_mutex_destroy(&ctx->lock);
}

struct out_pkt *new_pkt(struct nvmock_qp *qp, uint8_t kind, uint32_t seq)
{
	struct out_pkt *o = calloc(1, sizeof(*o));

	if (!o)
		return NULL;
	o->qp = qp;
	o->hdr = (struct nvmock_ibd_pkt){
		.magic = NVMOCK_IBD_MAGIC, .op = NVMOCK_IBD_OP_VERBS_PKT,
		.dlid = qp->dlid, .dqpn = qp->dqpn, .sqpn = qp->vqp.qp.qp_num,
		.kind = kind, .seq = seq, .flags = qp->xrc ? NVMOCK_PKT_XRC : 0,
	};
	return o;
}

void free_pkt(struct out_pkt *o)
{
	if (o->owned)
		free((void *)o->data);
	free(o);
}

void queue(struct nvmock_context *ctx, struct out_pkt *o)
{
	o->qp->queued++;
	if (ctx->out_tail)
		ctx->out_tail->next = o;
	else
		ctx->out_head = o;
	ctx->out_tail = o;
}

/* Drops queued packets of a QP (its requests only, or all) or of a memory
 * region going away. */
void purge(struct nvmock_context *ctx, struct nvmock_qp *qp, struct nvmock_mr *mr, bool requests_only)
{
	struct out_pkt **p = &ctx->out_head, *o;

	ctx->out_tail = NULL;
	while ((o = *p)) {
		bool drop = mr ? o->mr == mr : o->qp == qp && (!requests_only || o->hdr.kind < NVMOCK_PKT_ACK);
		if (drop) {
			*p = o->next;
			o->qp->queued--;
			/* A request whose memory went: sent again, it fails as
			 * an HCA's would (LOC_PROT), rather than wait for ever. */
			if (mr && o->hdr.kind < NVMOCK_PKT_ACK)
				o->qp->lost = true;
			free_pkt(o);
			continue;
		}
		ctx->out_tail = o;
		p = &o->next;
	}
}

/* Sends what the socket takes; says whether some is left. A request's
 * last packet, sent (or lost), starts its answer's clock, or, from a UC
 * QP, completes it. */
bool flush(struct nvmock_context *ctx)
{
	struct out_pkt *o;

	while ((o = ctx->out_head)) {
		struct nvmock_qp *qp = o->qp;
		uint32_t seq = o->hdr.seq;
		bool uc_last;

		if (ctx->sock >= 0) {
			struct iovec iov[2] = { { &o->hdr, sizeof(o->hdr) }, { (void *)o->data, o->len } };
			struct msghdr m = { .msg_iov = iov, .msg_iovlen = o->len ? 2 : 1 };

			if (sendmsg(ctx->sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
					return true;
				if (errno == EFAULT || errno == EMSGSIZE || errno == EINVAL) {
					/* This packet's memory or size: it alone is lost. */
					trace("packet to QPN %#x lost: %s", o->hdr.dqpn, strerror(errno));
				} else {
					trace("fabric daemon gone: %s", strerror(errno));
					close(ctx->sock);
					ctx->sock = -1; /* from now on, packets are lost */
				}
			} else if (o->hdr.flags & NVMOCK_PKT_LAST) {
				ctx->sent[o->hdr.kind]++;
			}
		}
		ctx->out_head = o->next;
		if (!ctx->out_head)
			ctx->out_tail = NULL;
		o->qp->queued--;
		if (o->last_req && timeout_ns(o->qp))
			o->qp->deadline = now_ns() + timeout_ns(o->qp);
		uc_last = (o->hdr.flags & (NVMOCK_PKT_UC | NVMOCK_PKT_LAST)) == (NVMOCK_PKT_UC | NVMOCK_PKT_LAST);
		free_pkt(o);
		/* Off the queue first: completing may purge it. */
		if (uc_last)
			uc_sent(qp, seq);
	}
	return false;
}

static void count_in(struct nvmock_context *ctx, const struct nvmock_ibd_pkt *p)
{
	if ((p->flags & NVMOCK_PKT_LAST) && p->kind <= NVMOCK_PKT_ATOMIC_RESP)
		ctx->taken[p->kind]++;
}

void handle(struct nvmock_context *ctx, const uint8_t *buf, size_t n)
{
	const struct nvmock_ibd_pkt *p = (const void *)buf;
	struct nvmock_qp *qp;
	uint32_t len;

	if (n < sizeof(*p) || p->magic != NVMOCK_IBD_MAGIC || p->op != NVMOCK_IBD_OP_VERBS_PKT ||
	    p->dqpn < ctx->qpn_base || p->dqpn - ctx->qpn_base >= NVMOCK_IBD_QPN_BLOCK)
		return;
	qp = ctx->qps[p->dqpn - ctx->qpn_base];
	len = n - sizeof(*p);
	/* A connected QP hears only its peer; a datagram QP only datagrams. */
	if (!qp || (qp->ud ? p->kind != NVMOCK_PKT_UD_SEND
			   : p->kind == NVMOCK_PKT_UD_SEND || p->slid != qp->dlid || p->sqpn != qp->dqpn))
		return;
	/* RC, UC and XRC packets reach only QPs of their own transport. */
	if (!qp->ud && (!(p->flags & NVMOCK_PKT_UC) != !qp->uc || !(p->flags & NVMOCK_PKT_XRC) != !qp->xrc))
		return;
	if (p->kind < NVMOCK_PKT_ACK) {
		if (p->offset > p->total || len > p->total - p->offset)
			return;
		count_in(ctx, p);
		/* The IBA's Communication Established: the first packet to
		 * a connected QP still in RTR. */
		if (qp->state == IBV_QPS_RTR && !qp->ud && !qp->comm_est) {
			qp->comm_est = true;
			raise_qp_event(qp, IBV_EVENT_COMM_EST);
		}
		/* A datagram QP in SQE still receives. */
		if (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS || qp->state == IBV_QPS_SQE)
			respond(qp, p, buf + sizeof(*p), len);
	} else {
		if (p->kind == NVMOCK_PKT_READ_RESP && (p->offset > p->total || len > p->total - p->offset))
			return;
		count_in(ctx, p);
		answered(qp, p, buf + sizeof(*p), len);
		kick(qp);
	}
	settle(qp);
}

/* Runs what is due; returns when the next thing is (0: nothing). */
static int64_t timers(struct nvmock_context *ctx, int64_t now)
{
	int64_t next = 0;
	uint32_t i;

	for (i = 0; i < NVMOCK_IBD_QPN_BLOCK; i++) {
		struct nvmock_qp *qp = ctx->qps[i];

		if (!qp)
			continue;
		if (qp->resend_at && qp->resend_at <= now) {
			qp->resend_at = 0;
			kick(qp);
		}
		if (qp->deadline && qp->deadline <= now) {
			if (qp->queued) {
				/* Not lost: still waiting here to be sent. */
				qp->deadline = now + timeout_ns(qp);
			} else if (qp->retries_left-- <= 0) {
				qp_error(qp, qp->sq_head, IBV_WC_RETRY_EXC_ERR);
			} else {
				go_back(qp, qp->sq_head);
				kick(qp);
			}
		}
		if (qp->resend_at && (!next || qp->resend_at < next))
			next = qp->resend_at;
		if (qp->deadline && (!next || qp->deadline < next))
			next = qp->deadline;
	}
	return next;
}

/* Takes what arrived (a batch, so the lock changes hands) and sends what
 * is queued; lock held. Returns how many packets it took. */
int progress(struct nvmock_context *ctx)
{
	int i;

	for (i = 0; i < RX_BATCH && ctx->sock >= 0; i++) {
		ssize_t n = recv(ctx->sock, ctx->rx, RX_SIZE, MSG_DONTWAIT | MSG_TRUNC);

		if (n > RX_SIZE)
			continue; /* longer than any packet: not one */
		if (n > 0) {
			handle(ctx, ctx->rx, n);
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
			trace("fabric daemon gone");
			close(ctx->sock);
			ctx->sock = -1;
		}
		break;
	}
	flush(ctx);
	return i;
}

static void *engine(void *arg)
{
	struct nvmock_context *ctx = arg;

	pthread_mutex_lock(&ctx->lock);
	while (!ctx->stopping) {
		int64_t now = now_ns(), next;
		struct pollfd p[2];
		uint64_t v;
		bool more;
		int ms;

		timers(ctx, now);
		more = flush(ctx); /* may start clocks */
		next = timers(ctx, now);
		ms = next ? (int)((next - now + 999999) / 1000000) : -1;
		p[0] = (struct pollfd){ .fd = ctx->sock, .events = POLLIN | (more ? POLLOUT : 0) };
		p[1] = (struct pollfd){ .fd = ctx->wake, .events = POLLIN };
		pthread_mutex_unlock(&ctx->lock);
		poll(p, 2, next && ms < 0 ? 0 : ms);
		pthread_mutex_lock(&ctx->lock);
		if (p[1].revents & POLLIN && read(ctx->wake, &v, sizeof(v)) < 0) {
			/* nothing to clear */
		}
		progress(ctx);
	}
	pthread_mutex_unlock(&ctx->lock);
	return NULL;
}
