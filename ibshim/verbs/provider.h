//go:build ignore

/* What provider.c (device, queries) and the data path (datapath.h)
 * share. */
#ifndef NVMOCK_PROVIDER_H
#define NVMOCK_PROVIDER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <infiniband/driver.h>

#include "../umad/proto.h"

struct hca_model;
struct nvmock_qp;
struct nvmock_mr;
struct nvmock_srq;
struct out_pkt;

struct nvmock_mw;

/* The device's clock (hca_core_clock), in kHz: the captured ConnectX-6's. */
#define NVMOCK_HCA_CLOCK_KHZ 156250u

/* Device memory a device has (max_dm_size): ConnectX's MEMIC, 128 KiB. */
#define NVMOCK_DM_SIZE 131072u

struct nvmock_context {
	struct verbs_context vctx;
	const struct hca_model *model;
	const struct ibv_device_attr *caps;

	/* The data path, set up by the first QP (datapath.h). lock guards
	 * everything below; the engine thread and the program's calls take
	 * it in turn. */
	pthread_mutex_t lock;
	bool connected;       /* tried the daemon (sock < 0: it was not there) */
	int sock;             /* to the fabric daemon */
	int wake;             /* eventfd: tells the engine to look again */
	bool engine_running;
	bool stopping;
	struct nvmock_context *next_open; /* the process's open contexts (engine.c) */
	pthread_t engine;
	uint32_t qpn_base;    /* 0 until connected to an InfiniBand port */
	uint8_t port;         /* the port the context connected for */
	uint16_t lid;         /* its LID, as the daemon told it */
	struct nvmock_qp **qps; /* by QPN - qpn_base */
	struct nvmock_mr *mrs;
	struct nvmock_srq *srqs; /* by number, for XRC targets (xrc.c) */
	uint32_t next_key, next_srq, next_dm;
	bool keys_wrapped;    /* next_key went round: new_key skips live keys */
	size_t dm_used;       /* device memory taken (dm.c) */
	struct nvmock_mw *mws; /* the memory windows (mw.c) */
	struct out_pkt *out_head, *out_tail;
	uint8_t *rx;          /* one received packet */
	uint32_t next_qp;     /* QPNs go round, so a stale packet finds no new QP */
	union ibv_gid gid;    /* the port's GID 0, for datagrams' GRHs */
	bool async_live;      /* async_fd is the daemon's connection */
	/* Messages by packet kind (NVMOCK_PKT_*), sent and taken in: what
	 * NVMOCK_TRACE prints when the context closes, to tell which
	 * operations a library chose. */
	uint64_t sent[NVMOCK_PKT_ATOMIC_RESP + 1], taken[NVMOCK_PKT_ATOMIC_RESP + 1];
	struct kept *kept; /* destroyed objects an async event named (release) */
};

static inline struct nvmock_context *to_ctx(struct ibv_context *ibctx)
{
	return container_of(ibctx, struct nvmock_context, vctx.context);
}

/* The umad shim's calls for completion channels (umad/channels.c), found
 * when a context opens; NULL without the shim. */
extern int (*shim_cmd_fd)(int fd);
extern int (*shim_channel_writer)(int fd);
extern int (*shim_async_fd)(int fd);

void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* datapath.h */
void datapath_ops(struct verbs_context_ops *ops);
int datapath_init(struct nvmock_context *ctx);
int connect_async(struct nvmock_context *ctx);
bool raise_event(struct nvmock_context *ctx, enum ibv_event_type type, const void *element);
void release(struct nvmock_context *ctx, void *obj, bool named);
void datapath_free(struct nvmock_context *ctx);

#endif
