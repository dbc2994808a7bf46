//go:build ignore

/*
 * (The go:build line keeps the Go tool from taking this directory for a cgo
 * package; build.sh compiles this file.)
 *
 * libnvmock-rdmav34.so: a libibverbs provider for nvmock's mock InfiniBand
 * HCAs, so that unmodified ibv_devices / ibv_devinfo [-v] work with no
 * kernel RDMA stack and no LD_PRELOAD.
 *
 * libibverbs finds the devices itself (its sysfs fallback, rdma-core
 * libibverbs/init.c find_sysfs_devs) and opens /dev/infiniband/uverbsN,
 * which on a mock node is an inert char node with /dev/null's numbers. This
 * provider claims exactly those devices and answers queries from the CA's
 * sysfs files (which nvmock renders from the profile) plus a table of real
 * ConnectX limits keyed by hca_type. PDs, MRs, CQs and RC, UC and UD QPs, whose
 * traffic goes through the fabric daemon, are datapath.h's; everything else
 * stays libibverbs' dummy op, which fails with EOPNOTSUPP.
 *
 * Built against rdma-core's private provider ABI 34 (driver.h,
 * IBVERBS_PRIVATE_34); see hack/fetch-rdma-core.sh for which headers and
 * why they match Debian 12's libibverbs 44.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "provider.h"

/* The uverbs node of a mock CA has /dev/null's numbers (see the sysfs
 * plane); a real uverbs device never does, so real HCAs stay with their own
 * provider even when this one is tried first. */
#define MOCK_CDEV makedev(1, 3)

/* Device limits that sysfs does not carry, per ConnectX generation.
 *
 * ConnectX-6 (MT4123): every value from a real `ibv_devinfo -vv` (fw
 * 20.37.1700, upstream rdma-core): https://github.com/openucx/ucx/issues/9908
 *
 * ConnectX-7 (MT4129): vendor_id 0x02c9, part 4129 and hw_ver 0x0 from real
 * ibv_devinfo output (fw 28.42.1000, board MT_0000000838):
 * https://github.com/deepseek-ai/DeepEP/issues/355
 *
 * ConnectX-8 (MT4131): part 4131 is its PCI device 0x1023 (rdma-core
 * providers/mlx5/mlx5.c hca_table); real ibstat output shows "CA type
 * MT4131", "Hardware version: 0" (fw 40.46.5500).
 *
 * BlueField-3 (MT41692, PCI 0xa2dc): part 41692, and the same
 * device_cap_flags, max_qp_rd_atom 16 and ATOMIC_HCA, from a real
 * ibv_devinfo of a B3220 (fw 32.47.1088, board MT_0000000965).
 *
 * hw_ver is the PCI revision, as mlx5 gives it: sysfs hw_rev.
 *
 * No public full -v output of a ConnectX-7 or -8 was found: their limits
 * are the ConnectX-6 ones (same mlx5 firmware interface), until one is. */
struct hca_model {
	const char *hca_type;
	struct ibv_device_attr caps; /* the fields that do not come from sysfs */
	uint64_t flags_ex;           /* device_cap_flags_ex above the 32 of caps */
};

#define MLX5_CAPS(part)                                                          \
	{                                                                      \
		.max_mr_size = UINT64_MAX,                                     \
		.page_size_cap = 0xfffffffffffff000ULL,                        \
		.vendor_id = 0x02c9,                                           \
		.vendor_part_id = (part),                                      \
		.max_qp = 131072,                                              \
		.max_qp_wr = 32768,                                            \
		.device_cap_flags = 0x21361c36,                                \
		.max_sge = 30,                                                 \
		.max_sge_rd = 30,                                              \
		.max_cq = 16777216,                                            \
		.max_cqe = 4194303,                                            \
		.max_mr = 16777216,                                            \
		.max_pd = 8388608,                                             \
		.max_qp_rd_atom = 16,                                          \
		.max_res_rd_atom = 2097152,                                    \
		.max_qp_init_rd_atom = 16,                                     \
		.atomic_cap = IBV_ATOMIC_HCA,                                  \
		.max_mw = 16777216,                                            \
		.max_mcast_grp = 2097152,                                      \
		.max_mcast_qp_attach = 240,                                    \
		.max_total_mcast_qp_attach = 503316480,                        \
		.max_ah = 2147483647,                                          \
		.max_srq = 8388608,                                            \
		.max_srq_wr = 32767,                                           \
		.max_srq_sge = 31,                                             \
		.max_pkeys = 128,                                              \
		.local_ca_ack_delay = 16,                                      \
	}

/* device_cap_flags_ex's upper bits: ConnectX-6 PCI_WRITE_END_PADDING (bit
 * 36) alone, from its -vv; BlueField-3 also bits 38, 60 and 61 (flags_ex
 * 0x3000005021361C36 in the B3220 capture). The ConnectX-7 and -8 take the
 * BlueField-3's, whose network controller is a ConnectX-7 (inferred). */
#define CX6_FLAGS_EX 0x0000001000000000ULL
#define BF3_FLAGS_EX 0x3000005000000000ULL

static const struct hca_model models[] = {
	{ "MT4123", MLX5_CAPS(4123), CX6_FLAGS_EX },   /* ConnectX-6 */
	{ "MT4129", MLX5_CAPS(4129), BF3_FLAGS_EX },   /* ConnectX-7 */
	{ "MT4131", MLX5_CAPS(4131), BF3_FLAGS_EX },   /* ConnectX-8 */
	{ "MT41692", MLX5_CAPS(41692), BF3_FLAGS_EX }, /* BlueField-3 */
};

/* Port attributes sysfs does not carry, from the same ConnectX-6 -vv
 * (InfiniBand port) and https://github.com/openucx/ucx/issues/10420
 * (RoCE port: no VLs, no port_cap_flags2). */
#define MLX5_MAX_MSG_SZ 0x40000000
#define MLX5_IB_MAX_VL_NUM 3 /* "4 (3)" */
#define MLX5_IB_PORT_CAP_FLAGS2 0x0032
#define MLX5_IB_SUBNET_TIMEOUT 18
/* ibv_devinfo on a large host shows 63: mlx5 gives one completion vector
 * per online CPU, up to its EQ limit. */
#define MLX5_MAX_COMP_VECTORS 63


void trace(const char *fmt, ...)
{
	const char *t = getenv("NVMOCK_TRACE");
	va_list ap;

	if (!t || !t[0] || !strcmp(t, "0"))
		return;
	va_start(ap, fmt);
	fputs("nvmock-verbs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* One sysfs value of the CA (path relative to class/infiniband/<ca>) into
 * buf, newline stripped; false if missing or empty. */
static bool ca_read(struct ibv_context *ibctx, char *buf, size_t size,
		    const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool ca_read(struct ibv_context *ibctx, char *buf, size_t size,
		    const char *fmt, ...)
{
	char rel[IBV_SYSFS_PATH_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(rel))
		return false;
	/* ibv_read_sysfs_file leaves buf unterminated for an empty file. */
	memset(buf, 0, size);
	return ibv_read_ibdev_sysfs_file(buf, size,
					 verbs_get_device(ibctx->device)->sysfs,
					 "%s", rel) > 0;
}

/* Leading number of a port's sysfs value ("4: ACTIVE", "0x15", "0"), 0 if
 * the file is missing. */
static unsigned long ca_num(struct ibv_context *ibctx, const char *fmt,
			    unsigned int port)
{
	char buf[64];

	if (!ca_read(ibctx, buf, sizeof(buf), fmt, port))
		return 0;
	return strtoul(buf, NULL, 0);
}

/* Entries of a directory of the CA whose names are numbers (ports,
 * gids, pkeys): what the kernel sizes those tables by. */
static int ca_count(struct ibv_context *ibctx, const char *fmt, unsigned int port)
{
	char rel[64], path[IBV_SYSFS_PATH_MAX];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	snprintf(rel, sizeof(rel), fmt, port);
	if (snprintf(path, sizeof(path), "%s/%s", ibctx->device->ibdev_path,
		     rel) >= (int)sizeof(path))
		return 0;
	dir = opendir(path);
	if (!dir)
		return 0;
	while ((d = readdir(dir)))
		if (isdigit((unsigned char)d->d_name[0]))
			n++;
	closedir(dir);
	return n;
}

/* "a088:c203:0045:1a2c" -> network byte order, as ibv_device_attr wants. */
static __be64 parse_guid(const char *s)
{
	unsigned int g[4];

	if (sscanf(s, "%x:%x:%x:%x", &g[0], &g[1], &g[2], &g[3]) != 4)
		return 0;
	return htobe64((uint64_t)g[0] << 48 | (uint64_t)g[1] << 32 |
		       (uint64_t)g[2] << 16 | g[3]);
}

/* The kernel's rate file, e.g. "400 Gb/sec (4X NDR)" or "10 Gb/sec (4X)",
 * into ibv_port_attr's width and speed encodings (IB_WIDTH_*, IB_SPEED_*). */
static void parse_rate(const char *rate, uint8_t *width, uint8_t *speed)
{
	static const struct { const char *name; uint8_t speed; } speeds[] = {
		{ "", 1 },       { "DDR", 2 },  { "QDR", 4 },  { "FDR10", 8 },
		{ "FDR", 16 },   { "EDR", 32 }, { "HDR", 64 }, { "NDR", 128 },
		/* XDR is 256: too big for rdma-core 44's u8 active_speed
		 * (later ones add active_speed_ex); 0 prints as invalid. */
		{ "XDR", 0 },
	};
	const char *p = strchr(rate, '(');
	unsigned int lanes = 0;
	char name[16] = "";
	size_t i;

	*width = *speed = 0;
	if (!p || sscanf(p, "(%uX %15[^)]", &lanes, name) < 1)
		return;
	switch (lanes) {
	case 1: *width = 1; break;
	case 2: *width = 16; break;
	case 4: *width = 2; break;
	case 8: *width = 4; break;
	case 12: *width = 8; break;
	}
	for (i = 0; i < sizeof(speeds) / sizeof(speeds[0]); i++)
		if (!strcmp(name, speeds[i].name))
			*speed = speeds[i].speed;
}

/* The extended attributes (ibv_devinfo -v's ODP, clock, tag matching, CQ
 * moderation and device memory lines), from the same real ConnectX-6 in IB
 * mode as the limits above (ucx#9908), but for the model's flags_ex: the
 * raw-packet ones (TSO, RSS, pacing) are Ethernet's and stay 0, on an
 * Ethernet port too (no capture of one of these cards in Ethernet mode was
 * found). ConnectX-7 and later take them, as they take the limits. Only fields within
 * attr_size are set: a program built with older headers, or the plain
 * ibv_query_device, asks for less. */
static void extended_caps(const struct hca_model *m, struct ibv_device_attr_ex *attr, size_t attr_size)
{
#define FITS(f) (offsetof(struct ibv_device_attr_ex, f) + sizeof(attr->f) <= attr_size)
	if (FITS(odp_caps)) {
		attr->odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
		attr->odp_caps.per_transport_caps.rc_odp_caps =
			IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
			IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
		attr->odp_caps.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND;
	}
	if (FITS(completion_timestamp_mask))
		attr->completion_timestamp_mask = 0x7fffffffffffffffULL;
	if (FITS(hca_core_clock))
		attr->hca_core_clock = NVMOCK_HCA_CLOCK_KHZ;
	if (FITS(device_cap_flags_ex))
		attr->device_cap_flags_ex = attr->orig_attr.device_cap_flags | m->flags_ex;
	if (FITS(tm_caps))
		attr->tm_caps = (struct ibv_tm_caps){
			.max_rndv_hdr_size = 64, .max_num_tags = 127, .flags = IBV_TM_CAP_RC,
			.max_ops = 32768, .max_sge = 1,
		};
	if (FITS(cq_mod_caps))
		attr->cq_mod_caps = (struct ibv_cq_moderation_caps){ .max_cq_count = 65535, .max_cq_period = 4095 };
	if (FITS(max_dm_size))
		attr->max_dm_size = NVMOCK_DM_SIZE;
	/* libibverbs copies phys_port_cnt when the kernel has no wider count. */
	if (FITS(phys_port_cnt_ex))
		attr->phys_port_cnt_ex = attr->orig_attr.phys_port_cnt;
	if (FITS(xrc_odp_caps))
		attr->xrc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
				     IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
#undef FITS
}

static int nvmock_query_device_ex(struct ibv_context *ibctx,
				  const struct ibv_query_device_ex_input *input,
				  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	const struct hca_model *model = to_ctx(ibctx)->model;
	struct ibv_device_attr *a = &attr->orig_attr;
	char buf[64];

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(*a))
		return EINVAL;
	/* Zero only what the caller has: it may predate fields we know. */
	memset(attr, 0, attr_size);
	*a = model->caps;
	if (ca_read(ibctx, buf, sizeof(buf), "fw_ver"))
		snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", buf);
	if (ca_read(ibctx, buf, sizeof(buf), "node_guid"))
		a->node_guid = parse_guid(buf);
	if (ca_read(ibctx, buf, sizeof(buf), "sys_image_guid"))
		a->sys_image_guid = parse_guid(buf);
	if (ca_read(ibctx, buf, sizeof(buf), "hw_rev"))
		a->hw_ver = strtoul(buf, NULL, 16);
	a->phys_port_cnt = ca_count(ibctx, "ports", 0);
	extended_caps(model, attr, attr_size);
	return 0;
}

static int nvmock_query_port(struct ibv_context *ibctx, uint8_t port,
			     struct ibv_port_attr *attr)
{
	char buf[64];
	bool ib;

	/* libibverbs hands over a zeroed attr of its own size. */
	if (!ca_read(ibctx, buf, sizeof(buf), "ports/%u/state", port))
		return EINVAL; /* no such port, as the kernel answers */
	attr->state = strtoul(buf, NULL, 10);
	attr->phys_state = ca_num(ibctx, "ports/%u/phys_state", port);
	attr->lid = ca_num(ibctx, "ports/%u/lid", port);
	attr->sm_lid = ca_num(ibctx, "ports/%u/sm_lid", port);
	attr->sm_sl = ca_num(ibctx, "ports/%u/sm_sl", port);
	attr->lmc = ca_num(ibctx, "ports/%u/lid_mask_count", port);
	attr->port_cap_flags = ca_num(ibctx, "ports/%u/cap_mask", port);
	attr->gid_tbl_len = ca_count(ibctx, "ports/%u/gids", port);
	attr->pkey_tbl_len = ca_count(ibctx, "ports/%u/pkeys", port);
	if (ca_read(ibctx, buf, sizeof(buf), "ports/%u/rate", port))
		parse_rate(buf, &attr->active_width, &attr->active_speed);

	attr->link_layer = IBV_LINK_LAYER_UNSPECIFIED;
	if (ca_read(ibctx, buf, sizeof(buf), "ports/%u/link_layer", port)) {
		if (!strcmp(buf, "InfiniBand") || !strcmp(buf, "IB"))
			attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
		else if (!strcmp(buf, "Ethernet"))
			attr->link_layer = IBV_LINK_LAYER_ETHERNET;
	}
	ib = attr->link_layer != IBV_LINK_LAYER_ETHERNET;

	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_4096;
	attr->max_msg_sz = MLX5_MAX_MSG_SZ;
	if (ib) {
		attr->max_vl_num = MLX5_IB_MAX_VL_NUM;
		attr->port_cap_flags2 = MLX5_IB_PORT_CAP_FLAGS2;
		/* Set by the SM; a port that never saw one shows 0. */
		if (attr->state == IBV_PORT_ACTIVE)
			attr->subnet_timeout = MLX5_IB_SUBNET_TIMEOUT;
	}
	return 0;
}

static void nvmock_free_context(struct ibv_context *ibctx)
{
	struct nvmock_context *ctx = to_ctx(ibctx);

	datapath_free(ctx);
	verbs_uninit_context(&ctx->vctx); /* closes cmd_fd and async_fd */
	free(ctx);
}

static const struct verbs_context_ops nvmock_ctx_ops = {
	.query_device_ex = nvmock_query_device_ex,
	.query_port = nvmock_query_port,
	.free_context = nvmock_free_context,
};

int (*shim_cmd_fd)(int fd);
int (*shim_channel_writer)(int fd);
int (*shim_async_fd)(int fd);

static struct verbs_context *nvmock_alloc_context(struct ibv_device *ibdev,
						  int cmd_fd, void *private_data)
{
	struct verbs_sysfs_dev *sysfs = verbs_get_device(ibdev)->sysfs;
	struct verbs_context_ops ops;
	const struct hca_model *model = NULL;
	int full;
	struct nvmock_context *ctx;
	char hca_type[32] = "";
	long cpus;
	size_t i;

	(void)private_data;
	if (ibv_read_ibdev_sysfs_file(hca_type, sizeof(hca_type) - 1, sysfs,
				      "hca_type") > 0)
		for (i = 0; i < sizeof(models) / sizeof(models[0]); i++)
			if (!strcmp(hca_type, models[i].hca_type))
				model = &models[i];
	if (!model) {
		/* Inventing limits would be worse than failing to open. */
		trace("%s: hca_type \"%s\" is not a known ConnectX (MT4123, MT4129, MT4131, MT41692)",
		      ibdev->name, hca_type);
		close(cmd_fd); /* ours to close until init takes it */
		errno = EOPNOTSUPP;
		return NULL;
	}

	/* On failure this closes cmd_fd itself. */
	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, vctx,
					   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	/* libibverbs writes a few commands to the kernel itself (a completion
	 * channel's); /dev/null would take them and leave the answer zeroed,
	 * a channel on fd 0 that ibv_destroy_comp_channel then closes.
	 * /dev/full refuses them (ENOSPC), as no kernel is there to answer;
	 * the umad shim, where it is loaded, answers the channel's instead. */
	full = open("/dev/full", O_RDWR | O_CLOEXEC);
	if (full >= 0) {
		int swapped = dup3(full, ctx->vctx.context.cmd_fd, O_CLOEXEC) >= 0;

		close(full);
		shim_cmd_fd = (int (*)(int))dlsym(RTLD_DEFAULT, "nvmock_verbs_cmd_fd");
		shim_channel_writer = (int (*)(int))dlsym(RTLD_DEFAULT, "nvmock_verbs_channel_writer");
		shim_async_fd = (int (*)(int))dlsym(RTLD_DEFAULT, "nvmock_verbs_async_fd");
		if (swapped && shim_cmd_fd)
			shim_cmd_fd(ctx->vctx.context.cmd_fd);
	}
	ctx->model = model;
	ctx->caps = &model->caps;
	ops = nvmock_ctx_ops;
	datapath_ops(&ops);
	verbs_set_ops(&ctx->vctx, &ops);

	/* Without an async fd libibverbs asks the kernel for one, which
	 * /dev/null cannot give. The daemon's tells of the port going down
	 * and up; without a daemon an eventfd never signals, like an HCA
	 * with no async events. */
	ctx->vctx.context.async_fd = connect_async(ctx);
	ctx->async_live = ctx->vctx.context.async_fd >= 0;
	if (ctx->async_live && shim_async_fd)
		shim_async_fd(ctx->vctx.context.async_fd);
	if (ctx->vctx.context.async_fd < 0)
		ctx->vctx.context.async_fd = eventfd(0, EFD_CLOEXEC);
	if (ctx->vctx.context.async_fd < 0) {
		int err = errno;

		verbs_uninit_context(&ctx->vctx);
		free(ctx);
		errno = err;
		return NULL;
	}
	/* Tests start the key count near its wrap (new_key), which takes
	 * 2^24 registrations otherwise. */
	{
		const char *k = getenv("NVMOCK_VERBS_NEXT_KEY");

		if (k)
			ctx->next_key = (uint32_t)strtoul(k, NULL, 0) & 0xffffff;
	}
	if (datapath_init(ctx)) {
		verbs_uninit_context(&ctx->vctx);
		free(ctx);
		errno = ENOMEM;
		return NULL;
	}
	cpus = sysconf(_SC_NPROCESSORS_ONLN);
	ctx->vctx.context.num_comp_vectors =
		cpus < 1 ? 1 : cpus > MLX5_MAX_COMP_VECTORS ? MLX5_MAX_COMP_VECTORS : cpus;
	trace("%s: opened as %s", ibdev->name, model->hca_type);
	return &ctx->vctx;
}

static bool nvmock_match_device(struct verbs_sysfs_dev *sysfs_dev)
{
	return sysfs_dev->sysfs_cdev == MOCK_CDEV;
}

static struct verbs_device *nvmock_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	(void)sysfs_dev;
	return calloc(1, sizeof(struct verbs_device));
}

static void nvmock_uninit_device(struct verbs_device *vdev)
{
	free(vdev);
}

static const struct verbs_device_ops nvmock_dev_ops = {
	.name = "nvmock",
	/* No table: match_device alone decides, before any modalias match. */
	.match_device = nvmock_match_device,
	/* Nothing here depends on the (absent) kernel's uverbs ABI. */
	.match_min_abi_version = 0,
	.match_max_abi_version = UINT32_MAX,
	.alloc_device = nvmock_alloc_device,
	.uninit_device = nvmock_uninit_device,
	.alloc_context = nvmock_alloc_context,
};

/* What PROVIDER_DRIVER() does, without exporting a symbol: libibverbs
 * dlopen()s us and we register from the constructor. */
static void __attribute__((constructor)) nvmock_register(void)
{
	verbs_register_driver(&nvmock_dev_ops);
}
