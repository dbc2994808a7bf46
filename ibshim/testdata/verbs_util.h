/*
 * What the small verbs test programs share (domains.c, cqex.c, binds.c,
 * xrcpair.c, threads_ext.c): they
 * define ctx and lid (the port's) before including this.
 */
#define FAIL(...) do { fprintf(stderr, "FAIL: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

/* Opens device name into ctx and reads its port's LID. */
static inline void open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_port_attr pa;
	int i, n;

	list = ibv_get_device_list(&n);
	for (i = 0; i < n && strcmp(ibv_get_device_name(list[i]), name); i++)
		;
	if (i == n || !(ctx = ibv_open_device(list[i])))
		FAIL("open %s", name);
	ibv_free_device_list(list);
	if (ibv_query_port(ctx, 1, &pa))
		FAIL("ibv_query_port");
	lid = pa.lid;
}

/* Connects an RC QP to QP dqpn on this port, with remote access. */
static inline void to_rts_access(struct ibv_qp *qp, uint32_t dqpn, int access)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	int err;

	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
		FAIL("to INIT: %s", strerror(err));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096, .dest_qp_num = dqpn,
		.max_dest_rd_atomic = 1, .min_rnr_timer = 1, .ah_attr = { .dlid = lid, .port_num = 1 } };
	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
		FAIL("to RTR: %s", strerror(err));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1 };
	if ((err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
		FAIL("to RTS: %s", strerror(err));
}

/* Connects an RC QP to QP dqpn on this port, remote writes allowed. */
static inline void to_rts(struct ibv_qp *qp, uint32_t dqpn)
{
	to_rts_access(qp, dqpn, IBV_ACCESS_REMOTE_WRITE);
}

/* The next completion of cq, within 10 s. */
static inline struct ibv_wc wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	int i;

	for (i = 0; i < 100000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			FAIL("%s: ibv_poll_cq: %d", what, n);
		if (n == 1)
			return wc;
		usleep(100);
	}
	FAIL("%s: no completion in 10 s", what);
}

