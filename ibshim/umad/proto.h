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

#include <stdint.h>

#define NVMOCK_IBD_ENV "NVMOCK_IBD"
#define NVMOCK_IBD_SOCKET "/run/nvmock/ibd.sock"

#define NVMOCK_IBD_MAGIC 0x4b4d564eu /* "NVMK" as little-endian bytes */

#define NVMOCK_IBD_OP_HELLO 1u      /* sent right after connect */
#define NVMOCK_IBD_OP_REGISTER 2u   /* an agent registered; no reply */
#define NVMOCK_IBD_OP_UNREGISTER 3u /* an agent unregistered; no reply */

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

#endif
