/*
 * mcgroup: a program that joins multicast groups through the SA (an
 * MCMemberRecord Set over umad, as perftest -g does) and checks what the
 * HCA and the fabric then do: datagrams to the group's MLID reach each QP
 * attached to it on a port that joined, with the group's GID in their
 * GRH, and nothing else; the kernel's attach checks hold. Built and run by
 * ibshim/multicast_test.go inside `nvmock exec`; prints "ok <check>" per
 * check and exits non-zero at the first that fails. It leaves one group
 * joined (ff12:601b:ffff::4d43), which the test then finds with saquery.
 * With "join", it only joins that group as another node made it.
 *
 * Usage: mcgroup DEVICE [join]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* libibumad's API (Debian ships its header only in libibumad-dev;
 * umad_alloc is an inline calloc there). */
int umad_init(void);
int umad_open_port(const char *ca_name, int portnum);
int umad_register(int portid, int mgmt_class, int mgmt_version, uint8_t rmpp_version, long method_mask[]);
int umad_size(void);
void *umad_get_mad(void *umad);
int umad_set_addr(void *umad, int dlid, int dqp, int sl, int qkey);
int umad_send(int portid, int agentid, void *umad, int length, int timeout_ms, int retries);
int umad_recv(int portid, void *umad, int *length, int timeout_ms);
int umad_status(void *umad);

#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

#define QKEY 0x11111111
/* MCMemberRecord component mask bits (IBA 15.2.5.17). */
#define C_MGID (1ull << 0)
#define C_PORT_GID (1ull << 1)
#define C_QKEY (1ull << 2)
#define C_TCLASS (1ull << 6)
#define C_PKEY (1ull << 7)
#define C_SL (1ull << 12)
#define C_FLOW (1ull << 13)
#define C_JOIN (1ull << 16)
#define ALL (C_MGID | C_PORT_GID | C_QKEY | C_TCLASS | C_PKEY | C_SL | C_FLOW | C_JOIN)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid port_gid;
static uint16_t sm_lid;
static int umad_port, agent;

/* One SA request: method 0x02 (Set, a join) or 0x15 (Delete, a leave).
 * Returns the MAD status; the MLID of the answer in *mlid. */
static int sa_as(uint8_t method, const uint8_t mgid[16], uint64_t mask, uint8_t join, uint16_t *mlid)
{
	static uint32_t tid = 1;
	void *u = calloc(1, umad_size() + 256);
	uint8_t *m = umad_get_mad(u), *rec = m + 56;
	int len = 256, i;

	memset(m, 0, 256);
	m[0] = 1, m[1] = 0x03, m[2] = 2, m[3] = method;
	m[15] = (uint8_t)tid++;
	m[16] = 0, m[17] = 0x38; /* MCMemberRecord */
	for (i = 0; i < 8; i++)
		m[48 + i] = (uint8_t)(mask >> (56 - 8 * i));
	memcpy(rec, mgid, 16);
	memcpy(rec + 16, port_gid.raw, 16);
	rec[32] = 0x11, rec[33] = 0x11, rec[34] = 0x11, rec[35] = 0x11;
	rec[40] = 0xff, rec[41] = 0xff; /* the default partition */
	rec[48] = join;
	if (umad_set_addr(u, sm_lid, 1, 0, 0x80010000) < 0 || umad_send(umad_port, agent, u, 256, 1000, 3) < 0 ||
	    umad_recv(umad_port, u, &len, 5000) < 0 || umad_status(u))
		FAIL("SA request (method %#x): no answer (status %d)", method, umad_status(u));
	*mlid = (uint16_t)(rec[36] << 8 | rec[37]);
	i = m[4] << 8 | m[5];
	free(u);
	return i;
}

/* As a full member. */
static int sa(uint8_t method, const uint8_t mgid[16], uint64_t mask, uint16_t *mlid)
{
	return sa_as(method, mgid, mask, 0x01, mlid);
}

/* A UD QP in RTS, made with create flags. */
static struct ibv_qp *ud_qp_flags(uint32_t flags)
{
	struct ibv_qp_init_attr_ex ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS, .pd = pd, .create_flags = flags };
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = QKEY };

	if (!qp || ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		FAIL("UD QP: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		FAIL("UD QP to RTR");
	a.qp_state = IBV_QPS_RTS;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		FAIL("UD QP to RTS");
	return qp;
}

static struct ibv_qp *ud_qp(void) { return ud_qp_flags(0); }

static uint8_t *buf;
static struct ibv_mr *mr;

static void post_recv(struct ibv_qp *qp, uint64_t id)
{
	struct ibv_sge s = { (uintptr_t)buf + 4096 * id, 4096, mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		FAIL("post_recv");
}

/* Sends 64 bytes from qp to the group and waits for the send. */
static void send_to_group(struct ibv_qp *qp, const uint8_t mgid[16], uint16_t mlid)
{
	struct ibv_ah_attr aa = { .dlid = mlid, .port_num = 1, .is_global = 1, .grh = { .hop_limit = 1 } };
	struct ibv_ah *ah;
	struct ibv_sge s = { (uintptr_t)buf, 64, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	int n, tries = 0;

	memcpy(aa.grh.dgid.raw, mgid, 16);
	if (!(ah = ibv_create_ah(pd, &aa)))
		FAIL("create_ah to MLID %#x: %s", mlid, strerror(errno));
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = 0xffffff;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(qp, &wr, &bad))
		FAIL("post_send to the group");
	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && tries++ < 100000)
		usleep(100);
	if (n != 1 || wc.wr_id != 99 || wc.status != IBV_WC_SUCCESS)
		FAIL("send to the group: %s", n == 1 ? ibv_wc_status_str(wc.status) : "no completion");
	ibv_destroy_ah(ah);
}

/* The receive completions that come within 300 ms: a bit per wr_id. */
static unsigned received(const uint8_t mgid[16], uint32_t src_qp)
{
	struct ibv_wc wc;
	unsigned got = 0;
	int i;

	for (i = 0; i < 300; i++) {
		while (ibv_poll_cq(cq, 1, &wc) == 1) {
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != 40 + 64 ||
			    !(wc.wc_flags & IBV_WC_GRH) || wc.src_qp != src_qp)
				FAIL("receive %llu: %s, opcode %d, %u bytes, flags %#x, from QP %#x", (unsigned long long)wc.wr_id,
				     ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len, wc.wc_flags, wc.src_qp);
			if (memcmp(buf + 4096 * wc.wr_id + 24, mgid, 16))
				FAIL("receive %llu: the GRH's destination is not the group's GID", (unsigned long long)wc.wr_id);
			got |= 1u << wc.wr_id;
		}
		usleep(1000);
	}
	return got;
}

int main(int argc, char **argv)
{
	static const uint8_t mgid[16] = { 0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x4d, 0x42 };
	static const uint8_t kept[16] = { 0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x4d, 0x43 };
	struct ibv_device **list;
	struct ibv_port_attr pa;
	struct ibv_qp *r1, *r2, *s, *rc;
	long methods[16 / sizeof(long)] = { 0 };
	uint16_t mlid, mlid2;
	int i, n, err;

	if (argc != 2 && (argc != 3 || strcmp(argv[2], "join")))
		FAIL("usage: mcgroup DEVICE [join]");
	list = ibv_get_device_list(&n);
	for (i = 0; i < n && strcmp(ibv_get_device_name(list[i]), argv[1]); i++)
		;
	if (i == n || !(ctx = ibv_open_device(list[i])) || ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, 0, &port_gid))
		FAIL("open %s", argv[1]);
	sm_lid = pa.sm_lid;
	pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	buf = calloc(16, 4096);
	mr = ibv_reg_mr(pd, buf, 16 * 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!pd || !cq || !mr)
		FAIL("PD, CQ or MR");
	if (umad_init() < 0 || (umad_port = umad_open_port(argv[1], 1)) < 0 ||
	    (agent = umad_register(umad_port, 0x03, 2, 1, methods)) < 0)
		FAIL("umad: cannot open %s's port or register an SA agent", argv[1]);
	if (argc == 3) {
		/* Join the kept group as it was made, maybe on another node: a
		 * join that could not make it. */
		if ((err = sa(0x02, kept, C_MGID | C_PORT_GID | C_JOIN, &mlid)))
			FAIL("join ff12:601b:ffff::4d43 as made: status %#x", err);
		printf("joined mlid %#x\n", mlid);
		return 0;
	}

	/* A new group needs what its packets carry. */
	if ((err = sa(0x02, mgid, C_MGID | C_PORT_GID | C_JOIN, &mlid)) != 0x0600)
		FAIL("join without the group's fields: status %#x, want 0x600 (insufficient components)", err);
	if ((err = sa(0x15, mgid, C_MGID | C_PORT_GID | C_JOIN, &mlid)) != 0x0200)
		FAIL("leave before joining: status %#x, want 0x200", err);
	if ((err = sa_as(0x02, mgid, ALL, 0x02, &mlid)) != 0x0200)
		FAIL("make a group as a non-member: status %#x, want 0x200", err);
	{
		static const uint8_t unicast[16] = { 0xfe, 0x80 };

		if ((err = sa(0x02, unicast, ALL, &mlid)) != 0x0200)
			FAIL("join a unicast GID: status %#x, want 0x200", err);
	}
	puts("ok sa-errors");
	if ((err = sa(0x02, mgid, ALL, &mlid)) || mlid < 0xc000 || mlid == 0xffff)
		FAIL("join: status %#x, MLID %#x", err, mlid);
	if ((err = sa(0x02, mgid, ALL, &mlid2)) || mlid2 != mlid)
		FAIL("join again: status %#x, MLID %#x, want %#x", err, mlid2, mlid);
	if ((err = sa_as(0x15, mgid, C_MGID | C_PORT_GID | C_JOIN, 0x03, &mlid2)) != 0x0200)
		FAIL("leave as a member the port is not: status %#x, want 0x200", err);
	puts("ok join");

	/* The kernel's checks: a UD QP, a multicast GID, a multicast LID. */
	{
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 } };
		union ibv_gid g;

		rc = ibv_create_qp(pd, &ia);
		memcpy(g.raw, mgid, 16);
		if (!rc || ibv_attach_mcast(rc, &g, mlid) != EINVAL)
			FAIL("attach an RC QP: not EINVAL");
		r1 = ud_qp();
		if (ibv_attach_mcast(r1, &port_gid, mlid) != EINVAL || ibv_attach_mcast(r1, &g, pa.lid) != EINVAL)
			FAIL("attach to a unicast GID or LID: not EINVAL");
		if (ibv_detach_mcast(r1, &g, mlid) != EINVAL)
			FAIL("detach what is not attached: not EINVAL");
		r2 = ud_qp();
		s = ud_qp();
		if ((err = ibv_attach_mcast(r1, &g, mlid)) || (err = ibv_attach_mcast(r2, &g, mlid)))
			FAIL("attach: %s", strerror(err));
		if ((err = ibv_destroy_qp(r2)) != EBUSY)
			FAIL("destroy an attached QP: %d, want EBUSY", err);
		puts("ok attach-checks");

		/* Every attached QP gets a copy; the sender is not attached. */
		post_recv(r1, 1);
		post_recv(r2, 2);
		memset(buf, 0x5a, 64);
		send_to_group(s, mgid, mlid);
		if ((n = received(mgid, s->qp_num)) != (1u << 1 | 1u << 2))
			FAIL("a datagram to the group: receives %#x, want both QPs' (0x6)", n);
		if (memcmp(buf + 4096 + 40, buf, 64) || memcmp(buf + 2 * 4096 + 40, buf, 64))
			FAIL("a datagram to the group: the payload differs");
		puts("ok delivery");

		/* An attached sender hears itself, unless made not to (as
		 * IPoIB's QP is); the others hear it either way. */
		{
			struct ibv_qp *b = ud_qp_flags(IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);

			if ((err = ibv_attach_mcast(s, &g, mlid)) || (err = ibv_attach_mcast(b, &g, mlid)))
				FAIL("attach the senders: %s", strerror(err));
			post_recv(s, 8);
			post_recv(b, 9);
			post_recv(r1, 10);
			send_to_group(s, mgid, mlid);
			if ((n = received(mgid, s->qp_num)) != (1u << 8 | 1u << 9 | 1u << 10))
				FAIL("an attached sender's datagram: receives %#x, want its own and the others' (0x700)", n);
			post_recv(s, 8);
			post_recv(b, 9);
			post_recv(r1, 10);
			send_to_group(b, mgid, mlid);
			if ((n = received(mgid, b->qp_num)) != (1u << 8 | 1u << 10))
				FAIL("a sender blocking its loopback: receives %#x, want the others' alone (0x500)", n);
			if ((err = ibv_detach_mcast(s, &g, mlid)) || (err = ibv_detach_mcast(b, &g, mlid)) ||
			    (err = ibv_destroy_qp(b)))
				FAIL("detach the senders: %s", strerror(err));
			/* s keeps one receive posted, which no datagram reaches now. */
			puts("ok loopback");
		}

		/* Detached: no more copies for it. */
		if ((err = ibv_detach_mcast(r2, &g, mlid)) || (err = ibv_destroy_qp(r2)))
			FAIL("detach, then destroy: %s", strerror(err));
		post_recv(r1, 3);
		send_to_group(s, mgid, mlid);
		if ((n = received(mgid, s->qp_num)) != 1u << 3)
			FAIL("after a detach: receives %#x, want r1's alone (0x8)", n);
		puts("ok detach");

		/* The port left: attached or not, nothing reaches it. */
		if ((err = sa(0x15, mgid, C_MGID | C_PORT_GID | C_JOIN, &mlid2)))
			FAIL("leave: status %#x", err);
		post_recv(r1, 4);
		send_to_group(s, mgid, mlid);
		if ((n = received(mgid, s->qp_num)) != 0)
			FAIL("after leaving: receives %#x, want none", n);
		if ((err = sa(0x15, mgid, C_MGID | C_PORT_GID | C_JOIN, &mlid2)) != 0x0200)
			FAIL("leave again: status %#x, want 0x200", err);
		puts("ok leave");
	}

	/* Two groups on one MLID (which the mock's MLIDs, following from the
	 * MGIDs, can give): a datagram names its group by GID, and reaches
	 * the QPs attached to that group alone. */
	{
		static const uint8_t a[16] = { 0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, [14] = 0x01, [15] = 0x96 };
		static const uint8_t b[16] = { 0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, [14] = 0x08, [15] = 0x40 };
		union ibv_gid ga, gb;
		struct ibv_qp *r3 = ud_qp();
		uint16_t la, lb;

		memcpy(ga.raw, a, 16);
		memcpy(gb.raw, b, 16);
		if ((err = sa(0x02, a, ALL, &la)) || (err = sa(0x02, b, ALL, &lb)))
			FAIL("join two groups: status %#x", err);
		if (la != lb)
			FAIL("ff12:601b:ffff::196 and ::840 have MLIDs %#x and %#x: pick two that share one", la, lb);
		if ((err = ibv_attach_mcast(r1, &ga, la)) || (err = ibv_attach_mcast(r3, &ga, la)) ||
		    (err = ibv_attach_mcast(r3, &gb, lb)))
			FAIL("attach: %s", strerror(err));
		post_recv(r3, 6); /* r1 still has 4 posted, which nothing took */
		send_to_group(s, b, lb);
		if ((n = received(b, s->qp_num)) != 1u << 6)
			FAIL("a datagram to one of two groups on an MLID: receives %#x, want the QP attached to it alone (0x40)", n);
		post_recv(r3, 7);
		send_to_group(s, a, la);
		if ((n = received(a, s->qp_num)) != (1u << 4 | 1u << 7))
			FAIL("a datagram to the other group: receives %#x, want both QPs attached to it (0x90)", n);
		puts("ok shared-mlid");
		if (ibv_detach_mcast(r1, &ga, la) || ibv_detach_mcast(r3, &ga, la) || ibv_detach_mcast(r3, &gb, lb) ||
		    sa(0x15, a, C_MGID | C_PORT_GID | C_JOIN, &la) || sa(0x15, b, C_MGID | C_PORT_GID | C_JOIN, &lb))
			FAIL("detach and leave both groups");
	}

	/* One group stays joined after the program: the SM's, not its. */
	if ((err = sa(0x02, kept, ALL, &mlid)))
		FAIL("join ff12:601b:ffff::4d43: status %#x", err);
	printf("kept mlid %#x\n", mlid);
	return 0;
}
