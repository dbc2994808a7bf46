//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

// What the suite installs, and where.
const (
	nvmockRelease = "nvmock"
	nvmockNS      = "nvmock"
	nvmockPool    = "default" // the DaemonSet is nvmock-default
	// The pool's board: not the chart's default (a100), so that the value
	// visibly reaches the node.
	nvmockProfile = "h100"
	injectKey     = "nvmock.io/inject"
	injectValue   = "enabled"

	nvidiaRelease = "nvdp"
	nvidiaNS      = "nvidia-device-plugin"
	// NVIDIA's chart, from the module hack/fetch-nvidia-tools.sh downloads
	// (it copies the module to .cache/src), and the image hack/e2e-images.sh
	// makes of the binaries it builds.
	nvidiaVersion = "v0.18.2"
	nvidiaImage   = "k8s-device-plugin"

	gpuResource = corev1.ResourceName("nvidia.com/gpu")
	// GFD's output file: NVIDIA's chart mounts the host's features.d there.
	gfdFile = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
)

// cluster is the running cluster, as hack/k8s-node.sh up described it in
// $NVMOCK_K8S_DIR/k8s.env, with what the suite installed on it.
type cluster struct {
	env  map[string]string
	dir  string // $NVMOCK_K8S_DIR
	cfg  *rest.Config
	cs   *kubernetes.Clientset
	node string
	out  string // this run's logs and figures: $NVMOCK_BUILD/k8s-e2e

	mu     sync.Mutex
	truth  []string // nvidia-smi -L on the host against the chart's overlay
	nvidia bool     // NVIDIA's chart is installed and its GPUs allocatable
}

var theCluster *cluster

func TestMain(m *testing.M) {
	// client-go's reflectors log (to stderr, through klog) each watch a
	// test ends; the tests say what went wrong themselves.
	klog.SetLogger(logr.Discard())
	c, err := connect()
	if err != nil {
		msg := "k8s: no cluster (" + err.Error() + "); run hack/k8s-e2e.sh, or hack/k8s-node.sh up as root"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		os.Exit(0)
	}
	theCluster = c
	if err := c.setup(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: k8s: setup:", err)
		c.teardown()
		os.Exit(1)
	}
	code := m.Run()
	if os.Getenv("NVMOCK_K8S_KEEP") == "" {
		if err := c.teardown(); err != nil {
			fmt.Fprintln(os.Stderr, "FAIL: k8s: teardown:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

func connect() (*cluster, error) {
	dir := os.Getenv("NVMOCK_K8S_DIR")
	if dir == "" {
		dir = "/tmp/nvmock-k8s"
	}
	env, err := testenv.ReadEnvFile(filepath.Join(dir, "k8s.env"))
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", env["KUBECONFIG"])
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", env["KUBECONFIG"], err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &cluster{env: env, dir: env["NVMOCK_K8S_DIR"], cfg: cfg, cs: cs, node: env["NODE_NAME"],
		out: filepath.Join(testenv.BuildDir(), "k8s-e2e")}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", c.node, err)
	}
	if !nodeReady(n) {
		return nil, fmt.Errorf("node %s is not Ready", c.node)
	}
	return c, os.MkdirAll(c.out, 0o755)
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// setup imports the nvmock image from make image and installs the chart,
// as every test needs it. NVIDIA's chart is installed by the first test
// that needs it (nvidiaPlugin).
func (c *cluster) setup() error {
	tar := filepath.Join(testenv.BuildDir(), "nvmock-image.tar")
	if _, err := os.Stat(tar); err != nil {
		return fmt.Errorf("no nvmock image at %s: run make image first", tar)
	}
	if out, err := c.ctr("images", "import", tar); err != nil {
		return fmt.Errorf("import %s: %v: %s", tar, err, out)
	}
	return c.installNvmock(context.Background(), c.nvmockValues(nil))
}

// teardown uninstalls what the suite installed, NVIDIA's chart first (its
// pods hold the overlay's driver root), so that the node is as up left it.
func (c *cluster) teardown() error {
	var errs []error
	for _, r := range []struct{ release, ns string }{{nvidiaRelease, nvidiaNS}, {nvmockRelease, nvmockNS}} {
		if err := c.helmUninstall(context.Background(), r.release, r.ns); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ctr runs the e2e node's ctr against the cluster's containerd, in the
// namespace the CRI uses.
func (c *cluster) ctr(args ...string) ([]byte, error) {
	bin := c.env["CTR"]
	if bin == "" {
		bin = filepath.Join(testenv.CacheDir(), "e2e", "bin", "ctr")
	}
	return exec.Command(bin, append([]string{"-a", c.env["CONTAINERD_SOCK"], "-n", "k8s.io"}, args...)...).CombinedOutput()
}

// image is one of hack/e2e-images.sh's images.
func (c *cluster) image(name string) string { return c.env["IMAGE_PREFIX"] + name + ":local" }

// ---------------------------------------------------------------- the chart

// Where the chart installs on this node: under the cluster's dir, where
// containerd (CDI_DIR, NRI_SOCK) and the kubelet look. The kubelet and
// containerd run on the host, so hostPaths are the host's paths.
func (c *cluster) overlayRoot() string { return filepath.Join(c.dir, "nvmock") }
func (c *cluster) nfdDir() string      { return filepath.Join(c.dir, "nfd") }
func (c *cluster) cdiDir() string      { return c.env["CDI_DIR"] }

// nvmockValues are the suite's chart values, with extra's top-level keys
// replacing them.
func (c *cluster) nvmockValues(extra map[string]any) map[string]any {
	v := map[string]any{
		"pools":     []any{map[string]any{"name": nvmockPool, "profile": nvmockProfile}},
		"injection": map[string]any{"namespaceLabel": map[string]any{"key": injectKey, "value": injectValue}},
		"nri":       map[string]any{"socketPath": c.env["NRI_SOCK"]},
		// Imported from make image's archive; never pulled.
		"image":       map[string]any{"pullPolicy": "Never"},
		"overlayRoot": c.overlayRoot(),
		"cdiDir":      c.cdiDir(),
		"nfdDir":      c.nfdDir(),
		// The GPUs' XIDs in the node's kernel log, as the driver writes them.
		"kernelLog": map[string]any{"xids": true},
	}
	for k, x := range extra {
		v[k] = x
	}
	return v
}

func nvmockChart() string { return filepath.Join(testenv.Root(), "charts", "nvmock") }

// installNvmock installs the chart (or upgrades the release to vals if it
// is there), waits for its DaemonSet to be ready and reads the overlay's
// GPUs. If NVIDIA's chart is installed, it waits for its GPUs too: they
// come back when the node's labels do. When the node's GPUs changed (a
// new profile), it restarts NVIDIA's device plugin first, as
// docs/kubernetes.md tells users to: its mount stays on the old overlay.
func (c *cluster) installNvmock(ctx context.Context, vals map[string]any) error {
	before := slices.Clone(c.gpuLines())
	if err := c.helmInstall(ctx, nvmockRelease, nvmockNS, nvmockChart(), vals, true); err != nil {
		return err
	}
	if err := c.waitRollout(ctx, nvmockNS, nvmockRelease); err != nil {
		return err
	}
	if err := c.readTruth(); err != nil {
		return err
	}
	c.mu.Lock()
	nvidia := c.nvidia
	c.mu.Unlock()
	if !nvidia {
		return nil
	}
	if !slices.Equal(before, c.gpuLines()) {
		for _, app := range []string{"nvidia-device-plugin", "gpu-feature-discovery"} {
			if err := c.cs.CoreV1().Pods(nvidiaNS).DeleteCollection(ctx, metav1.DeleteOptions{},
				metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app}); err != nil {
				return fmt.Errorf("restart NVIDIA's %s: %w", app, err)
			}
		}
	}
	return c.waitAllocatable(ctx, len(c.gpuLines()))
}

// readTruth runs the overlay's nvidia-smi -L on the host: the GPUs every
// container on the node must see.
func (c *cluster) readTruth() error {
	smi := filepath.Join(c.overlayRoot(), "driver", "usr", "bin", "nvidia-smi")
	out, err := exec.Command(smi, "-L").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -L on the host: %v: %s", smi, err, out)
	}
	c.mu.Lock()
	c.truth = testenv.Lines(string(out))
	c.mu.Unlock()
	return nil
}

// gpuLines is nvidia-smi -L on the host, against the chart's overlay.
func (c *cluster) gpuLines() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.truth)
}

// uuids are the node's GPU UUIDs, in index order.
func (c *cluster) uuids() []string { return uuidsIn(strings.Join(c.gpuLines(), "\n")) }

var uuidRE = regexp.MustCompile(`\(UUID: (GPU-[0-9a-fA-F-]+)\)`)

// uuidsIn are the UUIDs in nvidia-smi -L output, in order.
func uuidsIn(out string) []string {
	var u []string
	for _, m := range uuidRE.FindAllStringSubmatch(out, -1) {
		u = append(u, m[1])
	}
	return u
}

// ---------------------------------------------------------------- NVIDIA's chart

// nvidiaPlugin installs NVIDIA's device plugin and GPU feature discovery
// with NVIDIA's Helm chart, once, and waits until the node offers the
// GPUs. The namespace is opted in: GFD loads libnvidia-ml.so.1 from the
// standard path, which nvmock's plugin provides; the device plugin loads
// it from the driver root it is given, the overlay.
func (c *cluster) nvidiaPlugin(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nvidia {
		return
	}
	if _, err := os.Stat(filepath.Join(nvidiaChart(), "Chart.yaml")); err != nil {
		testenv.Missing(t, "NVIDIA's chart in %s (make deps, hack/fetch-nvidia-tools.sh, copies the module there)", nvidiaChart())
	}
	if out, err := c.ctr("images", "ls", "-q", "name=="+c.image(nvidiaImage)); err != nil || len(bytes.TrimSpace(out)) == 0 {
		testenv.Missing(t, "the image %s (hack/e2e-images.sh makes it when make deps built NVIDIA's tools): %v %s", c.image(nvidiaImage), err, out)
	}
	ctx := ctxT(t, 4*time.Minute)
	c.ensureNamespace(t, nvidiaNS, map[string]string{injectKey: injectValue})
	if err := c.nvidiaRelease(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.waitAllocatable(ctx, len(c.truth)); err != nil {
		t.Fatal(err)
	}
	c.nvidia = true
}

func nvidiaChart() string {
	return filepath.Join(testenv.CacheDir(), "src", "k8s-device-plugin@"+nvidiaVersion, "deployments", "helm", "nvidia-device-plugin")
}

// nvidiaRelease installs or upgrades NVIDIA's release with the suite's
// values and extra ones (such as migStrategy), and waits until it has
// rolled out.
func (c *cluster) nvidiaRelease(ctx context.Context, extra map[string]any) error {
	vals := map[string]any{
		"image": map[string]any{"repository": strings.TrimSuffix(c.image(nvidiaImage), ":local"), "tag": "local", "pullPolicy": "Never"},
		// docs/kubernetes.md: the device plugin loads the mock library from the overlay.
		"nvidiaDriverRoot": filepath.Join(c.overlayRoot(), "driver"),
		"gfd":              map[string]any{"enabled": true},
		// Its node-feature-discovery subchart needs NFD's images, which this
		// node cannot pull: GFD's labels are read from its output file.
		"nfd": map[string]any{"enabled": false},
		// The MPS daemon's pod mounts its root Bidirectional, which needs a
		// shared mount: k8s-node.sh makes the cluster's directory one.
		"mps": map[string]any{"root": filepath.Join(c.dir, "mps")},
	}
	maps.Copy(vals, extra)
	if err := c.helmInstall(ctx, nvidiaRelease, nvidiaNS, nvidiaChart(), vals, false); err != nil {
		return err
	}
	return c.waitRollout(ctx, nvidiaNS, nvidiaRelease)
}

// waitAllocatable waits until the node offers n nvidia.com/gpu.
func (c *cluster) waitAllocatable(ctx context.Context, n int) error {
	return c.waitResource(ctx, gpuResource, n)
}

// waitResource waits until the node offers n of an extended resource.
func (c *cluster) waitResource(ctx context.Context, res corev1.ResourceName, n int) error {
	var last string
	for {
		node, err := c.cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
		if err == nil {
			q := node.Status.Allocatable[res]
			if q.Value() == int64(n) {
				return nil
			}
			last = q.String()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: allocatable %s is %q, want %d (device plugin logs: %s)", c.node, res, last, n,
				c.podLogs(nvidiaNS, "app.kubernetes.io/name=nvidia-device-plugin"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podResources is a client of the kubelet's pod resources API, closed
// when the test ends.
func (c *cluster) podResources(t testing.TB) podresources.PodResourcesListerClient {
	t.Helper()
	sock := filepath.Join(c.env["KUBELET_ROOT"], "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("pod resources API at %s: %v", sock, err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresources.NewPodResourcesListerClient(conn)
}

// allocated is what the kubelet's pod resources API says the device plugin
// allocated to a pod's containers: device IDs (NVIDIA's are UUIDs).
func (c *cluster) allocated(t testing.TB, ns, pod string) []string {
	t.Helper()
	return c.allocatedOf(t, ns, pod, gpuResource)
}

// allocatedOf is allocated for one extended resource.
func (c *cluster) allocatedOf(t testing.TB, ns, pod string, res corev1.ResourceName) []string {
	t.Helper()
	resp, err := c.podResources(t).List(ctxT(t, 10*time.Second), &podresources.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod resources API: List: %v", err)
	}
	var ids []string
	for _, p := range resp.PodResources {
		if p.Namespace != ns || p.Name != pod {
			continue
		}
		for _, ctr := range p.Containers {
			for _, d := range ctr.Devices {
				if d.ResourceName == string(res) {
					ids = append(ids, d.DeviceIds...)
				}
			}
		}
	}
	return ids
}

// ---------------------------------------------------------------- what tests check

// pluginPod is the chart's one pod on the node, once Ready.
func (c *cluster) pluginPod(t testing.TB) *corev1.Pod {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	for {
		pods, err := c.cs.CoreV1().Pods(nvmockNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + nvmockRelease})
		if err == nil && len(pods.Items) == 1 && pods.Items[0].DeletionTimestamp == nil {
			if ok, _ := podReady(&pods.Items[0]); ok {
				return &pods.Items[0]
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no Ready nvmock pod on the node%s", c.podLogs(nvmockNS, ""))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// nodeLabels are the labels hostprep puts on a node of the suite's pool.
func nodeLabels(t testing.TB) map[string]string {
	return hostprep.Labels(testenv.Profile(t, nvmockProfile, 0))
}

// grepLines are the last n lines of s that contain substr.
func grepLines(s, substr string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return tail(strings.Join(out, "\n"), n)
}

// gfdLabels are the labels GFD wrote to its output file on the host (no
// node-feature-discovery here turns them into node labels).
func (c *cluster) gfdLabels(t testing.TB) map[string]string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		data, err := os.ReadFile(gfdFile)
		if err == nil && len(data) > 0 {
			m := map[string]string{}
			for _, l := range testenv.Lines(string(data)) {
				if k, v, ok := strings.Cut(l, "="); ok {
					m[k] = v
				}
			}
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("GFD wrote no %s in a minute: %v%s", gfdFile, err, c.podLogs(nvidiaNS, "app.kubernetes.io/name=gpu-feature-discovery"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// seesItsAllocation checks that a running pod printed exactly one GPU, the
// one the device plugin allocated to it, as the node's nvidia-smi names it
// (renumbered from 0, as in any container with one GPU), and returns its UUID.
func (c *cluster) seesItsAllocation(t testing.TB, ns, pod, out string) string {
	t.Helper()
	seen := uuidsIn(out)
	alloc := c.allocated(t, ns, pod)
	if len(seen) != 1 || len(alloc) != 1 || seen[0] != alloc[0] {
		t.Errorf("pod %s sees %v; the device plugin allocated %v; want one GPU, the allocated one. It printed:\n%s", pod, seen, alloc, out)
		return ""
	}
	i := slices.Index(c.uuids(), seen[0])
	if i < 0 {
		t.Errorf("pod %s sees %s, not one of the node's GPUs %v", pod, seen[0], c.uuids())
		return ""
	}
	_, rest, _ := strings.Cut(c.gpuLines()[i], ": ")
	if want := "GPU 0: " + rest; testenv.Lines(out)[0] != want {
		t.Errorf("pod %s printed %q, want %q", pod, testenv.Lines(out)[0], want)
	}
	return seen[0]
}

// waitPods waits until n pods match selector in ns and done says so of
// each, and returns them.
func (c *cluster) waitPods(t testing.TB, ns, selector string, n int, done func(*corev1.Pod) (bool, error)) []corev1.Pod {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	for {
		list, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(list.Items) == n {
			all := true
			for i := range list.Items {
				ok, err := done(&list.Items[i])
				if err != nil {
					t.Fatalf("%v%s", err, c.describe(ns, list.Items[i].Name))
				}
				all = all && ok
			}
			if all {
				return list.Items
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not %d pods %s in %s, done:%s", n, selector, ns, c.podLogs(ns, selector))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probeScript prints the GPUs a container sees, or that it has none.
const probeScript = "if command -v nvidia-smi >/dev/null; then nvidia-smi -L; else echo no nvidia-smi; fi; ls /dev | grep nvidia || echo no /dev/nvidia"

// untouched is what probeScript prints in a container nvmock left alone.
const untouched = "no nvidia-smi\nno /dev/nvidia\n"

// ---------------------------------------------------------------- small things

// ctxT is a context that ends after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
