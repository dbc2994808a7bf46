//go:build ignore

/*
 * UD multicast (datapath.h). A QP attached to a group's MLID receives the
 * datagrams sent to it: the fabric daemon copies each to every QP of its
 * node attached there, and to its peers, which do the same. Joining the
 * group is the SA's business (an MCMemberRecord Set through umad, as
 * perftest -g does it); attaching is the verbs', with the kernel's checks:
 * a UD QP, a multicast GID and LID, and no destroy while attached (EBUSY,
 * as uverbs refuses it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "datapath.h"

#define MAX_ATTACH 240 /* per QP: the device's max_mcast_qp_attach */

/* Tells the daemon at once (not behind the packets queued) on fd, a copy
 * of the context's socket taken under the lock, which the send waits
 * without: the engine may close the socket meanwhile. */
static void tell(int fd, uint32_t qpn, uint16_t lid, bool on)
{
	uint8_t msg[NVMOCK_IBD_VERBS_ATTACH_SIZE] = { 0 };
	uint32_t magic = NVMOCK_IBD_MAGIC, op = NVMOCK_IBD_OP_VERBS_ATTACH;

	if (fd < 0)
		return; /* no daemon: nothing arrives anyway */
	memcpy(msg, &magic, 4);
	memcpy(msg + 4, &op, 4);
	memcpy(msg + 8, &qpn, 4);
	memcpy(msg + 12, &lid, 2);
	msg[14] = on;
	if (send(fd, msg, sizeof(msg), MSG_NOSIGNAL) < 0)
		trace("QP %#x: multicast LID %#x: the daemon was not told: %m", qpn, lid);
	close(fd);
}

static int sock_copy(struct nvmock_context *ctx)
{
	return ctx->sock >= 0 ? fcntl(ctx->sock, F_DUPFD_CLOEXEC, 0) : -1;
}

static int find(struct nvmock_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	uint32_t i;

	for (i = 0; i < qp->n_mc; i++)
		if (qp->mc[i].lid == lid && !memcmp(&qp->mc[i].gid, gid, sizeof(*gid)))
			return (int)i;
	return -1;
}

/* The group a datagram to (lid, gid) is for, if the QP is attached to
 * it, or NULL. A datagram sent without a GRH (gid zero) names its group by
 * the MLID alone. */
const union ibv_gid *mc_gid(struct nvmock_qp *qp, uint16_t lid, const uint8_t gid[16])
{
	static const uint8_t none[16];
	bool any = !memcmp(gid, none, 16);
	uint32_t i;

	for (i = 0; i < qp->n_mc; i++)
		if (qp->mc[i].lid == lid && (any || !memcmp(qp->mc[i].gid.raw, gid, 16)))
			return &qp->mc[i].gid;
	return NULL;
}

static bool lid_used(struct nvmock_qp *qp, uint16_t lid)
{
	uint32_t i;

	for (i = 0; i < qp->n_mc; i++)
		if (qp->mc[i].lid == lid)
			return true;
	return false;
}

static int attach_mcast(struct ibv_qp *q, const union ibv_gid *gid, uint16_t lid)
{
	struct nvmock_qp *qp = to_qp(q);
	int err = 0, fd = -1;

	if (q->qp_type != IBV_QPT_UD || gid->raw[0] != 0xff || lid < 0xc000 || lid == 0xffff)
		return EINVAL;
	pthread_mutex_lock(&qp->ctx->lock);
	if (find(qp, gid, lid) >= 0) {
		/* attached already: as rxe, no error */
	} else if (qp->n_mc == MAX_ATTACH) {
		err = ENOMEM;
	} else {
		void *mc = realloc(qp->mc, (qp->n_mc + 1) * sizeof(*qp->mc));

		if (!mc) {
			err = ENOMEM;
		} else {
			if (!lid_used(qp, lid))
				fd = sock_copy(qp->ctx);
			qp->mc = mc;
			qp->mc[qp->n_mc].gid = *gid;
			qp->mc[qp->n_mc++].lid = lid;
		}
	}
	pthread_mutex_unlock(&qp->ctx->lock);
	tell(fd, q->qp_num, lid, true);
	return err;
}

static int detach_mcast(struct ibv_qp *q, const union ibv_gid *gid, uint16_t lid)
{
	struct nvmock_qp *qp = to_qp(q);
	int i, fd = -1;

	pthread_mutex_lock(&qp->ctx->lock);
	i = find(qp, gid, lid);
	if (i >= 0) {
		qp->mc[i] = qp->mc[--qp->n_mc];
		if (!lid_used(qp, lid))
			fd = sock_copy(qp->ctx);
	}
	pthread_mutex_unlock(&qp->ctx->lock);
	tell(fd, q->qp_num, lid, false);
	return i < 0 ? EINVAL : 0;
}

void mcast_ops(struct verbs_context_ops *ops)
{
	ops->attach_mcast = attach_mcast;
	ops->detach_mcast = detach_mcast;
}
