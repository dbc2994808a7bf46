//go:build ignore

/*
 * Wire protocol between libnvmock-umad.so (the client) and the fabric daemon
 * `nvmock ibd` (the server). ibshim/umad/proto.go mirrors these values for
 * Go and proto_test.go compares the two, so they cannot drift.
 *
 * Transport: AF_UNIX SOCK_SEQPACKET, one connection per open() of
 * /dev/infiniband/umadN or issmN, at $NVMOCK_IBD, else NVMOCK_IBD_SOCKET.
 * Integers in control messages are little-endian. Everything else the client
 * sends is a raw struct ib_user_mad (64-byte ABI-5 header + MAD, passed
 * through untouched; its first u32 is an agent id, never the magic). The
 * daemon sends only raw struct ib_user_mad messages (replies, unsolicited
 * requests to registered agents, requests returned with status 110
 * ETIMEDOUT); one may exceed 320 bytes (a reassembled RMPP response).
 */
#ifndef NVMOCK_UMAD_PROTO_H
#define NVMOCK_UMAD_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define NVMOCK_IBD_ENV "NVMOCK_IBD"
#define NVMOCK_IBD_SOCKET "/run/nvmock/ibd.sock"
/* Beside the socket, SOCKET.id holds a word each daemon writes anew when it
 * starts: a socket file made in place of another can have its inode number
 * and time (ext4, coarse timestamps), so the word tells daemons apart. */
#define NVMOCK_IBD_ID_SUFFIX ".id"
#define NVMOCK_IBD_ID_MAX 32

#define NVMOCK_IBD_MAGIC 0x4b4d564eu /* "NVMK" as little-endian bytes */

#define NVMOCK_IBD_OP_HELLO 1u      /* sent right after connect */
#define NVMOCK_IBD_OP_REGISTER 2u   /* an agent registered; no reply */
#define NVMOCK_IBD_OP_UNREGISTER 3u /* an agent unregistered; no reply */

#define NVMOCK_IBD_OP_VERBS_HELLO 4u /* a verbs context connected; WELCOME answers */
#define NVMOCK_IBD_OP_VERBS_PKT 5u   /* one packet between two QPs, routed by LID and QPN */
#define NVMOCK_IBD_OP_ASYNC_HELLO 6u /* a verbs context's async fd (a verbs hello); events follow, no reply */
#define NVMOCK_IBD_OP_ASYNC_RAISE 7u /* {magic, op, event}: the daemon sends the event back on the async fd */
#define NVMOCK_IBD_OP_VERBS_ATTACH 8u /* {magic, op, u32 qpn, u16 mlid, u8 attach}: a QP joins (1) or leaves (0) a multicast LID; no reply */
#define NVMOCK_IBD_VERBS_ATTACH_SIZE 15

/* What the daemon sends an async fd: struct ib_uverbs_async_event_desc,
 * in host order ({u64 element: the port number; u32 event_type; u32 0}),
 * as ibv_get_async_event reads it. */
#define NVMOCK_IBD_ASYNC_EVENT_SIZE 16
#define NVMOCK_IBD_ASYNC_RAISE_SIZE 24
#define NVMOCK_IBD_EVENT_PORT_ACTIVE 9u /* IBV_EVENT_PORT_ACTIVE */
#define NVMOCK_IBD_EVENT_PORT_ERR 10u   /* IBV_EVENT_PORT_ERR */

#define NVMOCK_IBD_KIND_UMAD 0u /* /dev/infiniband/umadN */
#define NVMOCK_IBD_KIND_ISSM 1u /* /dev/infiniband/issmN: IsSM while open */

/* HELLO: 20 bytes. */
struct nvmock_ibd_hello {
	uint32_t magic;
	uint32_t op;
	uint32_t umad_index; /* N of umadN / issmN */
	uint32_t pid;
	uint32_t kind; /* NVMOCK_IBD_KIND_* */
};

/* REGISTER: 40 bytes. */
struct nvmock_ibd_register {
	uint32_t magic;
	uint32_t op;
	uint32_t agent_id; /* per connection, lowest free from 0, as the kernel */
	uint32_t qpn;      /* 0 (SMI) or 1 (GSI) */
	uint8_t mgmt_class;
	uint8_t mgmt_class_version;
	uint8_t rmpp_version;
	uint8_t pad;
	uint32_t oui;            /* low 24 bits */
	uint32_t method_mask[4]; /* bit m of the 128-bit mask = method m */
};

/* UNREGISTER: 12 bytes. */
struct nvmock_ibd_unregister {
	uint32_t magic;
	uint32_t op;
	uint32_t agent_id;
};

/*
 * The verbs data path (ibshim/verbs): a provider context that creates a QP
 * connects, says which HCA and port it is (VERBS_HELLO), and gets a block of
 * QP numbers of its own and the port's LID (the WELCOME, same op). Then
 * packets: the daemon delivers each to the context holding the destination
 * QPN at the destination LID, here or through another node's daemon, and
 * drops what has nowhere to go (a lost packet: the requester retries, then
 * fails the work request, as an HCA does).
 */
struct nvmock_ibd_verbs_hello {
	uint32_t magic;
	uint32_t op;
	uint32_t pid;
	uint32_t port;    /* port number on the HCA, from 1 */
	char ibdev[64];   /* the HCA's name, NUL-terminated */
};

struct nvmock_ibd_verbs_welcome {
	uint32_t magic;
	uint32_t op;
	uint32_t qpn_base; /* this context's QPNs: qpn_base .. qpn_base+NVMOCK_IBD_QPN_BLOCK-1; 0: no such InfiniBand port */
	uint32_t lid;
};

#define NVMOCK_IBD_QPN_BLOCK 1024u

/* Packet kinds: requests, and what answers them. */
#define NVMOCK_PKT_SEND 1
#define NVMOCK_PKT_WRITE 2
#define NVMOCK_PKT_READ 3      /* a read request; READ_RESP carries the data */
#define NVMOCK_PKT_CMP_SWP 4
#define NVMOCK_PKT_FETCH_ADD 5
#define NVMOCK_PKT_UD_SEND 6   /* a datagram, unanswered: rkey carries the Q_Key */
#define NVMOCK_PKT_ACK 16
#define NVMOCK_PKT_NAK 17      /* syndrome says why */
#define NVMOCK_PKT_READ_RESP 18
#define NVMOCK_PKT_ATOMIC_RESP 19

#define NVMOCK_PKT_LAST 1u /* the message's last packet */
#define NVMOCK_PKT_IMM 2u  /* carries immediate data */
#define NVMOCK_PKT_GRH 4u  /* a datagram sent with a GRH */
#define NVMOCK_PKT_SE 8u   /* the last packet of a solicited message (IBV_SEND_SOLICITED) */
#define NVMOCK_PKT_UC 16u  /* from a UC QP: only a UC QP takes it, as a BTH opcode names its transport */
#define NVMOCK_PKT_MCAST 32u /* a datagram to a multicast group: its GRH's destination GID (16 bytes) leads the payload */
#define NVMOCK_PKT_XRC 64u   /* between XRC QPs: only they take it, as XRC has BTH opcodes of its own */
#define NVMOCK_PKT_INV 128u  /* a send with invalidate: imm is the R_Key the responder invalidates */

#define NVMOCK_NAK_RNR 1           /* no receive posted; timer = the responder's min_rnr_timer */
#define NVMOCK_NAK_REMOTE_ACCESS 2 /* bad rkey, range or access rights */
#define NVMOCK_NAK_INVALID_REQ 3   /* does not fit the receive, or the QP cannot take it */
#define NVMOCK_NAK_REMOTE_OP 4     /* the responder's own error: its receive's memory (IBA: Remote Operational Error) */

struct nvmock_ibd_pkt {
	uint32_t magic;
	uint32_t op;       /* NVMOCK_IBD_OP_VERBS_PKT */
	uint16_t dlid;
	uint16_t slid;     /* the daemon sets it: the sending port's LID */
	uint32_t dqpn;
	uint32_t sqpn;
	uint8_t kind;      /* NVMOCK_PKT_* */
	uint8_t flags;     /* NVMOCK_PKT_LAST | _IMM | _GRH | _SE | _UC | _MCAST | _XRC */
	uint8_t syndrome;  /* NAK: NVMOCK_NAK_*; RNR: the timer too, in timer */
	uint8_t timer;
	uint32_t seq;      /* the requester's message number; answers repeat it */
	uint32_t offset;   /* of this packet's payload in the message */
	uint32_t total;    /* the message's length */
	uint32_t rkey;
	uint32_t imm;      /* as posted (network order) */
	uint64_t raddr;
	uint64_t atomic[2]; /* compare (or add) and swap; the original value in ATOMIC_RESP */
	uint32_t srqn;     /* XRC: the XRC SRQ a request is for (the IBA's XRCETH) */
	uint32_t gap;      /* work requests the sender did alone just before this message (binds, invalidates): seq is that many past the message before */
	/* payload follows */
};

/* Payload per packet: a message is cut into packets of at most this. */
#define NVMOCK_PKT_MAX_PAYLOAD 32768u

#define NVMOCK_IBD_VERBS_HELLO_SIZE 80
#define NVMOCK_IBD_VERBS_WELCOME_SIZE 16
#define NVMOCK_IBD_PKT_SIZE 80
/* What the daemon reads and writes of a packet. */
#define NVMOCK_IBD_PKT_DLID_OFF 8
#define NVMOCK_IBD_PKT_SLID_OFF 10
#define NVMOCK_IBD_PKT_DQPN_OFF 12
#define NVMOCK_IBD_PKT_SQPN_OFF 16
#define NVMOCK_IBD_PKT_KIND_OFF 20
#define NVMOCK_IBD_PKT_FLAGS_OFF 21

#define NVMOCK_IBD_HELLO_SIZE 20
#define NVMOCK_IBD_REGISTER_SIZE 40
#define NVMOCK_IBD_UNREGISTER_SIZE 12

/* struct ib_user_mad as the shim sees it (ABI 5 with ENABLE_PKEY). */
#define NVMOCK_UMAD_HDR_SIZE 64
#define NVMOCK_UMAD_MAD_SIZE 256
#define NVMOCK_UMAD_STATUS_OFF 4  /* u32 status */
#define NVMOCK_UMAD_LENGTH_OFF 16 /* u32 length: header + MAD bytes */
#define NVMOCK_UMAD_ETIMEDOUT 110 /* status of an unanswered request */
#define NVMOCK_UMAD_MAX_AGENTS 32 /* per open file, as IB_UMAD_MAX_AGENTS */

_Static_assert(sizeof(struct nvmock_ibd_hello) == NVMOCK_IBD_HELLO_SIZE, "hello size");
_Static_assert(sizeof(struct nvmock_ibd_register) == NVMOCK_IBD_REGISTER_SIZE, "register size");
_Static_assert(sizeof(struct nvmock_ibd_unregister) == NVMOCK_IBD_UNREGISTER_SIZE, "unregister size");
_Static_assert(sizeof(struct nvmock_ibd_verbs_hello) == NVMOCK_IBD_VERBS_HELLO_SIZE, "verbs hello size");
_Static_assert(sizeof(struct nvmock_ibd_verbs_welcome) == NVMOCK_IBD_VERBS_WELCOME_SIZE, "verbs welcome size");
_Static_assert(sizeof(struct nvmock_ibd_pkt) == NVMOCK_IBD_PKT_SIZE, "packet size");
_Static_assert(offsetof(struct nvmock_ibd_pkt, dlid) == NVMOCK_IBD_PKT_DLID_OFF, "dlid offset");
_Static_assert(offsetof(struct nvmock_ibd_pkt, slid) == NVMOCK_IBD_PKT_SLID_OFF, "slid offset");
_Static_assert(offsetof(struct nvmock_ibd_pkt, dqpn) == NVMOCK_IBD_PKT_DQPN_OFF, "dqpn offset");
_Static_assert(offsetof(struct nvmock_ibd_pkt, sqpn) == NVMOCK_IBD_PKT_SQPN_OFF, "sqpn offset");
_Static_assert(offsetof(struct nvmock_ibd_pkt, kind) == NVMOCK_IBD_PKT_KIND_OFF, "kind offset");
_Static_assert(offsetof(struct nvmock_ibd_pkt, flags) == NVMOCK_IBD_PKT_FLAGS_OFF, "flags offset");

#endif
