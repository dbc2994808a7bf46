package inject

import (
	"slices"
	"testing"
)

func TestInfiniBandGivesGPUContainersTheHCAs(t *testing.T) {
	node := testNode(8, false)
	node.IB = &IBNode{
		DevDir:    "/var/lib/nvmock/overlays/0123456789abcdef/driver/dev/infiniband",
		Shim:      "/var/lib/nvmock/overlays/0123456789abcdef/driver/usr/lib64/nvmock/libnvmock-umad.so",
		Provider:  "/var/lib/nvmock/overlays/0123456789abcdef/driver/usr/lib64/libibverbs/libnvmock-rdmav34.so",
		SocketDir: "/var/lib/nvmock/ib",
	}
	cfg := testConfig
	cfg.Extensions = []Extension{InfiniBand}
	const provider = "/usr/lib/nvmock/libibverbs/libnvmock"
	withDrivers := func(a Adjustment, preload, drivers string, theirs ...string) Adjustment {
		// The GPUs' own rule already allows /dev/null's numbers.
		for _, m := range []Mount{
			{Source: node.IB.DevDir, Destination: "/dev/infiniband", Type: "bind", Options: []string{"rbind", "ro", "nosuid"}},
			{Source: node.IB.Shim, Destination: "/usr/lib/nvmock/libnvmock-umad.so", Type: "bind", Options: ro},
			{Source: node.IB.Provider, Destination: "/usr/lib/nvmock/libibverbs/libnvmock-rdmav34.so", Type: "bind", Options: ro},
			{Source: "/var/lib/nvmock/ib", Destination: "/run/nvmock", Type: "bind", Options: ro},
		} {
			if !slices.Contains(theirs, m.Destination) {
				a.Mounts = append(a.Mounts, m)
			}
		}
		a.Env = append(a.Env, EnvVar{"LD_PRELOAD", preload}, EnvVar{"NVMOCK_IBD", "/run/nvmock/ibd.sock"}, EnvVar{"RDMAV_DRIVERS", drivers})
		return a
	}
	planes := func(a Adjustment, preload string) Adjustment { return withDrivers(a, preload, provider) }
	noIB := node
	noIB.IB = nil
	runDecide(t, []decideCase{
		{name: "a GPU container gets the devices, the shim preloaded, the daemon's socket and the provider",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "2"), ctr: ctr, want: planes(gave(node, 0, 1), "/usr/lib/nvmock/libnvmock-umad.so"), ok: true},
		{name: "the image's own preload stays, after the shim",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withEnv(ctr, "LD_PRELOAD=/opt/libjemalloc.so"),
			want: planes(gave(node, 0), "/usr/lib/nvmock/libnvmock-umad.so:/opt/libjemalloc.so"), ok: true},
		{name: "a pod annotated nvmock.io/infiniband=false gets GPUs only",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1", InfiniBandAnnotation, "false"), ctr: ctr, want: gave(node, 0), ok: true},
		{name: "as nvmock.io/inject reads false: any case, spaces around",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1", InfiniBandAnnotation, " False "), ctr: ctr, want: gave(node, 0), ok: true},
		{name: "a node without InfiniBand gives GPUs only",
			cfg: cfg, node: noIB, pod: pod("ml", GPUsAnnotation, "1"), ctr: ctr, want: gave(noIB, 0), ok: true},
		// Review: the image's settings are kept, once each.
		{name: "a preload naming the shim already is kept as it is",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withEnv(ctr, "LD_PRELOAD=/opt/libjemalloc.so /usr/lib/nvmock/libnvmock-umad.so"),
			want: planes(gave(node, 0), "/opt/libjemalloc.so /usr/lib/nvmock/libnvmock-umad.so"), ok: true},
		{name: "a preload of separators alone is replaced",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withEnv(ctr, "LD_PRELOAD=: "),
			want: planes(gave(node, 0), "/usr/lib/nvmock/libnvmock-umad.so"), ok: true},
		{name: "the image's verbs providers follow the mock's",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withEnv(ctr, "RDMAV_DRIVERS=/opt/efa/libefa;mlx5"),
			want: withDrivers(gave(node, 0), "/usr/lib/nvmock/libnvmock-umad.so", provider+":/opt/efa/libefa;mlx5"), ok: true},
		{name: "IBV_DRIVERS, which RDMAV_DRIVERS hides, joins it",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withEnv(ctr, "IBV_DRIVERS=/opt/efa/libefa"),
			want: withDrivers(gave(node, 0), "/usr/lib/nvmock/libnvmock-umad.so", provider+":/opt/efa/libefa"), ok: true},
		{name: "RDMAV_DRIVERS wins over IBV_DRIVERS, as in rdma-core",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withEnv(withEnv(ctr, "IBV_DRIVERS=/opt/a"), "RDMAV_DRIVERS="+provider),
			want: withDrivers(gave(node, 0), "/usr/lib/nvmock/libnvmock-umad.so", provider), ok: true},
		{name: "the container's own /dev/infiniband and /run/nvmock stay",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "1"), ctr: withMounts(ctr, "/dev/infiniband", "/run/nvmock"),
			want: withDrivers(gave(node, 0), "/usr/lib/nvmock/libnvmock-umad.so", provider, "/dev/infiniband", "/run/nvmock"), ok: true},
		{name: "the driver alone comes without the HCAs",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "none"), ctr: ctr, want: driverOnly(node), ok: true},
	})
}
