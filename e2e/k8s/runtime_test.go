//go:build k8s

package k8s

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nvmock/nvmock/internal/testenv"
)

// NVIDIA's container runtime as GPU-operator clusters run it: containerd's
// runtime handler nvidia (hack/k8s-node.sh registers it in CDI mode), a
// RuntimeClass nvidia, and the nvidia.com/gpu CDI spec nvidia-ctk makes from
// the overlay. A pod of that class asking NVIDIA's device plugin for a GPU
// gets exactly that GPU from the runtime, with the node's UUID; nvmock's
// plugin adds only the snapshot, so each edit is in the spec runc runs once.
func TestNvidiaRuntimeClassGivesThePodItsAllocatedGPU(t *testing.T) {
	c := theCluster
	c.nvidiaPlugin(t)
	c.runtimeClass(t)
	names := testenv.NvidiaCTKSpec(t, filepath.Join(c.overlayRoot(), "driver"), filepath.Join(c.cdiDir(), "nvidia.yaml"))
	t.Logf("nvidia-ctk named the devices %v", names)
	ns := c.namespace(t, true)
	p := c.pod("runtime-class", gpuScript, 1)
	p.Spec.RuntimeClassName = ptrTo("nvidia")
	out := c.running(t, ns, p, "started")
	c.seesItsAllocation(t, ns, p.Name, out)

	got, err := c.cs.CoreV1().Pods(ns).Get(ctxT(t, 10*time.Second), p.Name, metav1.GetOptions{})
	if err != nil || len(got.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod status: %v", err)
	}
	id := strings.TrimPrefix(got.Status.ContainerStatuses[0].ContainerID, "containerd://")
	count := testenv.Edits(testenv.BundleSpec(t, filepath.Join(c.dir, "state"), id))
	lib := "/usr/lib64/libnvidia-ml.so." + c.driverVersion(t)
	for _, want := range []string{"/usr/bin/nvidia-smi", lib, "/etc/nvmock/snapshot", "/dev/nvidiactl"} {
		if count[want] != 1 {
			t.Errorf("%s is in the spec runc ran %d times, want once", want, count[want])
		}
	}
	if count["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] != 0 {
		t.Errorf("nvmock's library mount is in the spec; under NVIDIA's runtime the plugin adds only the snapshot")
	}
	gpus := 0
	for path, n := range count {
		if strings.HasPrefix(path, "/dev/nvidia") && strings.TrimLeft(strings.TrimPrefix(path, "/dev/nvidia"), "0123456789") == "" {
			gpus += n
		}
	}
	if gpus != 1 {
		t.Errorf("%d GPU device nodes in the spec runc ran, want the one allocated", gpus)
	}
}

func ptrTo[T any](v T) *T { return &v }

// runtimeClass creates RuntimeClass nvidia (handler nvidia) for the test.
func (c *cluster) runtimeClass(t *testing.T) {
	t.Helper()
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia"}
	_, err := c.cs.NodeV1().RuntimeClasses().Create(ctxT(t, 10*time.Second), rc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create RuntimeClass nvidia: %v", err)
	}
}

// driverVersion is the overlay's driver, as its library's file name says.
func (c *cluster) driverVersion(t *testing.T) string {
	t.Helper()
	libs, _ := filepath.Glob(filepath.Join(c.overlayRoot(), "driver", "usr", "lib64", "libnvidia-ml.so.*.*"))
	if len(libs) != 1 {
		t.Fatalf("the overlay has %d versioned libraries (%v), want 1", len(libs), libs)
	}
	return strings.TrimPrefix(filepath.Base(libs[0]), "libnvidia-ml.so.")
}
