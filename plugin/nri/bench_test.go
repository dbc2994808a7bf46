package nri

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/plugin/inject"
)

// syntheticNode is an 8-GPU node state as NodeStateFromOverlay gives it
// for an overlay with NVIDIA's real numbers.
func syntheticNode(gpus int) inject.NodeState {
	d := "/var/lib/nvmock/driver"
	n := inject.NodeState{
		DriverRoot: d, Overlay: "/var/lib/nvmock/overlays/0123456789abcdef/driver",
		Library: d + "/usr/lib64/libnvidia-ml.so.1", NvidiaSMI: d + "/usr/bin/nvidia-smi", Snapshot: d + "/etc/nvmock/snapshot",
		Control: []inject.DeviceNode{
			{Path: "/dev/nvidiactl", Type: "c", Major: 195, Minor: 255, FileMode: 0o666},
			{Path: "/dev/nvidia-uvm", Type: "c", Major: 511, Minor: 0, FileMode: 0o666},
			{Path: "/dev/nvidia-uvm-tools", Type: "c", Major: 511, Minor: 1, FileMode: 0o666},
			{Path: "/dev/nvidia-modeset", Type: "c", Major: 195, Minor: 254, FileMode: 0o666},
		},
	}
	for i := 0; i < gpus; i++ {
		n.GPUs = append(n.GPUs, inject.GPU{Index: i, UUID: fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i, i),
			Node: inject.DeviceNode{Path: fmt.Sprintf("/dev/nvidia%d", i), Type: "c", Major: 195, Minor: int64(i), FileMode: 0o666}})
	}
	return n
}

// benchPlugin is a plugin whose node state comes from syntheticNode, with
// logging off, so that the benchmark measures the create path alone.
func benchPlugin(b *testing.B, gpus int) *Plugin {
	l := logrus.New()
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.WarnLevel)
	root := b.TempDir()
	// A driver link as install leaves it: create reads it every time.
	if err := os.Symlink("overlays/0123456789abcdef/driver", filepath.Join(root, "driver")); err != nil {
		b.Fatal(err)
	}
	p, err := New(Options{OverlayRoot: root, Log: logrus.NewEntry(l),
		Inject: inject.Config{Namespaces: []string{"gpu-jobs"}}})
	if err != nil {
		b.Fatal(err)
	}
	n := syntheticNode(gpus)
	p.node.probe = func(string) (inject.NodeState, error) { return n, nil }
	return p
}

// BenchmarkCreateContainer is the plugin's CreateContainer in process: the
// node state lookup, inject.Decide, the NRI adjustment and the GPU
// bookkeeping, without ttrpc.
func BenchmarkCreateContainer(b *testing.B) {
	for _, gpus := range []int{1, 8} {
		b.Run(fmt.Sprintf("gpus=%d", gpus), func(b *testing.B) {
			p := benchPlugin(b, gpus)
			pd := &api.PodSandbox{Id: "p", Name: "train", Uid: "u", Namespace: "gpu-jobs"}
			c := &api.Container{Id: "c", PodSandboxId: "p", Name: "main",
				Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME=train"}}
			if p.adjust(pd, c) == nil {
				b.Fatal("not injected")
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if p.adjust(pd, c) == nil {
					b.Fatal("not injected")
				}
			}
		})
	}
	b.Run("not-selected", func(b *testing.B) {
		p := benchPlugin(b, 8)
		pd := &api.PodSandbox{Id: "p", Name: "web", Uid: "u", Namespace: "default"}
		c := &api.Container{Id: "c", PodSandboxId: "p", Name: "main"}
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if p.adjust(pd, c) != nil {
				b.Fatal("injected")
			}
		}
	})
}
