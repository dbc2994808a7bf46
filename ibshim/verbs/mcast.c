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
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "datapath.h"

#define MAX_ATTACH 240 /* per QP: the device's max_mcast_qp_attach */

/* Tells the daemon, in order with the QP's packets. ctx->lock is held. */
static void tell(struct nvmock_qp *qp, uint16_t lid, bool on)
{
	uint8_t msg[NVMOCK_IBD_VERBS_ATTACH_SIZE] = { 0 };
	uint32_t magic = NVMOCK_IBD_MAGIC, op = NVMOCK_IBD_OP_VERBS_ATTACH, qpn = qp->vqp.qp.qp_num;

	memcpy(msg, &magic, 4);
	memcpy(msg + 4, &op, 4);
	memcpy(msg + 8, &qpn, 4);
	memcpy(msg + 12, &lid, 2);
	msg[14] = on;
	if (qp->ctx->sock >= 0 && send(qp->ctx->sock, msg, sizeof(msg), MSG_NOSIGNAL) < 0)
		trace("QP %#x: multicast LID %#x: the daemon was not told: %m", qpn, lid);
}

static int find(struct nvmock_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	uint32_t i;

	for (i = 0; i < qp->n_mc; i++)
		if (qp->mc[i].lid == lid && !memcmp(&qp->mc[i].gid, gid, sizeof(*gid)))
			return (int)i;
	return -1;
}

/* The group GID a QP attached with at lid, or NULL: a datagram to a group
 * it is not attached to is not for it. */
const union ibv_gid *mc_gid(struct nvmock_qp *qp, uint16_t lid)
{
	uint32_t i;

	for (i = 0; i < qp->n_mc; i++)
		if (qp->mc[i].lid == lid)
			return &qp->mc[i].gid;
	return NULL;
}

static bool lid_used(struct nvmock_qp *qp, uint16_t lid)
{
	return mc_gid(qp, lid) != NULL;
}

static int attach_mcast(struct ibv_qp *q, const union ibv_gid *gid, uint16_t lid)
{
	struct nvmock_qp *qp = to_qp(q);
	int err = 0;

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
			bool told = lid_used(qp, lid);

			qp->mc = mc;
			qp->mc[qp->n_mc].gid = *gid;
			qp->mc[qp->n_mc++].lid = lid;
			if (!told)
				tell(qp, lid, true);
		}
	}
	pthread_mutex_unlock(&qp->ctx->lock);
	return err;
}

static int detach_mcast(struct ibv_qp *q, const union ibv_gid *gid, uint16_t lid)
{
	struct nvmock_qp *qp = to_qp(q);
	int i;

	pthread_mutex_lock(&qp->ctx->lock);
	i = find(qp, gid, lid);
	if (i >= 0) {
		qp->mc[i] = qp->mc[--qp->n_mc];
		if (!lid_used(qp, lid))
			tell(qp, lid, false);
	}
	pthread_mutex_unlock(&qp->ctx->lock);
	return i < 0 ? EINVAL : 0;
}

void mcast_ops(struct verbs_context_ops *ops)
{
	ops->attach_mcast = attach_mcast;
	ops->detach_mcast = detach_mcast;
}
