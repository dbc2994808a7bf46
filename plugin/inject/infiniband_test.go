package inject

import "testing"

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
	planes := func(a Adjustment, preload string) Adjustment {
		// The GPUs' own rule already allows /dev/null's numbers.
		a.Mounts = append(a.Mounts,
			Mount{Source: node.IB.DevDir, Destination: "/dev/infiniband", Type: "bind", Options: []string{"rbind", "ro", "nosuid"}},
			Mount{Source: node.IB.Shim, Destination: "/usr/lib/nvmock/libnvmock-umad.so", Type: "bind", Options: ro},
			Mount{Source: node.IB.Provider, Destination: "/usr/lib/nvmock/libibverbs/libnvmock-rdmav34.so", Type: "bind", Options: ro},
			Mount{Source: "/var/lib/nvmock/ib", Destination: "/run/nvmock", Type: "bind", Options: ro})
		a.Env = append(a.Env, EnvVar{"LD_PRELOAD", preload}, EnvVar{"NVMOCK_IBD", "/run/nvmock/ibd.sock"},
			EnvVar{"RDMAV_DRIVERS", "/usr/lib/nvmock/libibverbs/libnvmock"})
		return a
	}
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
		{name: "the driver alone comes without the HCAs",
			cfg: cfg, node: node, pod: pod("ml", GPUsAnnotation, "none"), ctr: ctr, want: driverOnly(node), ok: true},
	})
}
