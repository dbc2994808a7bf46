//go:build k8s

package k8s

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/storage/driver"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	watchtools "k8s.io/client-go/tools/watch"
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
	env, err := readEnv(filepath.Join(dir, "k8s.env"))
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
// come back when the node's labels do.
func (c *cluster) installNvmock(ctx context.Context, vals map[string]any) error {
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
	if nvidia {
		return c.waitAllocatable(ctx, len(c.gpuLines()))
	}
	return nil
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
	c.truth = lines(string(out))
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
	chartDir := filepath.Join(testenv.CacheDir(), "src", "k8s-device-plugin@"+nvidiaVersion, "deployments", "helm", "nvidia-device-plugin")
	if _, err := os.Stat(filepath.Join(chartDir, "Chart.yaml")); err != nil {
		testenv.Missing(t, "NVIDIA's chart in %s (make deps, hack/fetch-nvidia-tools.sh, copies the module there)", chartDir)
	}
	if out, err := c.ctr("images", "ls", "-q", "name=="+c.image(nvidiaImage)); err != nil || len(bytes.TrimSpace(out)) == 0 {
		testenv.Missing(t, "the image %s (hack/e2e-images.sh makes it when make deps built NVIDIA's tools): %v %s", c.image(nvidiaImage), err, out)
	}
	ctx := ctxT(t, 4*time.Minute)
	c.ensureNamespace(t, nvidiaNS, map[string]string{injectKey: injectValue})
	vals := map[string]any{
		"image": map[string]any{"repository": strings.TrimSuffix(c.image(nvidiaImage), ":local"), "tag": "local", "pullPolicy": "Never"},
		// docs/kubernetes.md: the device plugin loads the mock library from the overlay.
		"nvidiaDriverRoot": filepath.Join(c.overlayRoot(), "driver"),
		"gfd":              map[string]any{"enabled": true},
		// Its node-feature-discovery subchart needs NFD's images, which this
		// node cannot pull: GFD's labels are read from its output file.
		"nfd": map[string]any{"enabled": false},
	}
	if err := c.helmInstall(ctx, nvidiaRelease, nvidiaNS, chartDir, vals, false); err != nil {
		t.Fatal(err)
	}
	if err := c.waitRollout(ctx, nvidiaNS, nvidiaRelease); err != nil {
		t.Fatal(err)
	}
	if err := c.waitAllocatable(ctx, len(c.truth)); err != nil {
		t.Fatal(err)
	}
	c.nvidia = true
}

// waitAllocatable waits until the node offers n nvidia.com/gpu.
func (c *cluster) waitAllocatable(ctx context.Context, n int) error {
	var last string
	for {
		node, err := c.cs.CoreV1().Nodes().Get(ctx, c.node, metav1.GetOptions{})
		if err == nil {
			q := node.Status.Allocatable[gpuResource]
			if q.Value() == int64(n) {
				return nil
			}
			last = q.String()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s: allocatable %s is %q, want %d (device plugin logs: %s)", c.node, gpuResource, last, n,
				c.podLogs(nvidiaNS, "app.kubernetes.io/name=nvidia-device-plugin"))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// allocated is what the kubelet's pod resources API says the device plugin
// allocated to a pod's containers: device IDs (NVIDIA's are UUIDs).
func (c *cluster) allocated(t testing.TB, ns, pod string) []string {
	t.Helper()
	sock := filepath.Join(c.env["KUBELET_ROOT"], "pod-resources", "kubelet.sock")
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("pod resources API at %s: %v", sock, err)
	}
	defer conn.Close()
	resp, err := podresources.NewPodResourcesListerClient(conn).List(ctxT(t, 10*time.Second), &podresources.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("pod resources API at %s: %v", sock, err)
	}
	var ids []string
	for _, p := range resp.PodResources {
		if p.Namespace != ns || p.Name != pod {
			continue
		}
		for _, ctr := range p.Containers {
			for _, d := range ctr.Devices {
				if d.ResourceName == string(gpuResource) {
					ids = append(ids, d.DeviceIds...)
				}
			}
		}
	}
	return ids
}

// ---------------------------------------------------------------- Helm

// helmConfig is the Helm SDK's configuration for namespace ns, as helm -n ns
// with the cluster's kubeconfig; Helm's debug log goes to helm.log.
func (c *cluster) helmConfig(ns string) (*action.Configuration, error) {
	flags := genericclioptions.NewConfigFlags(false)
	kubeconfig, cacheDir := c.env["KUBECONFIG"], filepath.Join(c.dir, "helm-cache")
	flags.KubeConfig, flags.Namespace, flags.CacheDir = &kubeconfig, &ns, &cacheDir
	f, err := os.OpenFile(filepath.Join(c.out, "helm.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cfg := new(action.Configuration)
	logf := func(format string, v ...any) {
		fmt.Fprintf(f, time.Now().Format("15:04:05.000 ")+format+"\n", v...)
	}
	if err := cfg.Init(flags, ns, "secret", logf); err != nil {
		return nil, fmt.Errorf("helm in namespace %s: %w", ns, err)
	}
	return cfg, nil
}

// helmInstall is helm upgrade --install --wait: the release at vals,
// its workloads ready.
func (c *cluster) helmInstall(ctx context.Context, release, ns, chartDir string, vals map[string]any, createNS bool) error {
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	hist := action.NewHistory(cfg)
	hist.Max = 1
	if _, err := hist.Run(release); errors.Is(err, driver.ErrReleaseNotFound) {
		in := action.NewInstall(cfg)
		in.ReleaseName, in.Namespace, in.CreateNamespace = release, ns, createNS
		in.Wait, in.Timeout = true, 3*time.Minute
		if _, err := in.RunWithContext(ctx, ch, vals); err != nil {
			return fmt.Errorf("helm install %s %s -n %s: %w%s", release, chartDir, ns, err, c.podLogs(ns, ""))
		}
		return nil
	} else if err != nil {
		return fmt.Errorf("helm history %s -n %s: %w", release, ns, err)
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = ns, true, 3*time.Minute
	if _, err := up.RunWithContext(ctx, release, ch, vals); err != nil {
		return fmt.Errorf("helm upgrade %s %s -n %s: %w%s", release, chartDir, ns, err, c.podLogs(ns, ""))
	}
	return nil
}

// waitRollout waits until every DaemonSet of a release has rolled out on
// the node: its pods are of the current template, Ready, and no old pod is
// left (its preStop hook has run). Helm's --wait does not: it counts a
// DaemonSet ready with maxUnavailable (1) pods not ready, which on one node
// is before the pod has even started.
func (c *cluster) waitRollout(ctx context.Context, ns, release string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	sel := "app.kubernetes.io/instance=" + release
	var last string
	for {
		done, state, err := c.rolledOut(ctx, ns, sel)
		if done {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = state
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("DaemonSets of %s in %s not rolled out: %s%s", release, ns, last, c.podLogs(ns, sel))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (c *cluster) rolledOut(ctx context.Context, ns, sel string) (bool, string, error) {
	dss, err := c.cs.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return false, "", err
	}
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return false, "", err
	}
	for _, ds := range dss.Items {
		st := ds.Status
		if st.ObservedGeneration < ds.Generation || st.UpdatedNumberScheduled != st.DesiredNumberScheduled || st.NumberAvailable != st.DesiredNumberScheduled {
			return false, fmt.Sprintf("DaemonSet %s: generation %d observed %d, %d desired, %d updated, %d available",
				ds.Name, ds.Generation, st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberAvailable), nil
		}
		n := 0
		for _, p := range pods.Items {
			if !metav1.IsControlledBy(&p, &ds) {
				continue
			}
			ready, _ := podReady(&p)
			if p.DeletionTimestamp != nil || p.Labels["pod-template-generation"] != fmt.Sprint(ds.Generation) || !ready {
				return false, fmt.Sprintf("DaemonSet %s: pod %s: %s", ds.Name, p.Name, podState(&p)), nil
			}
			n++
		}
		if n != int(st.DesiredNumberScheduled) {
			return false, fmt.Sprintf("DaemonSet %s: %d pods, want %d", ds.Name, n, st.DesiredNumberScheduled), nil
		}
	}
	return len(dss.Items) > 0, "no DaemonSets", nil
}

// helmUninstall is helm uninstall --wait: the release's objects are gone,
// its pods too (their preStop hooks have run).
func (c *cluster) helmUninstall(ctx context.Context, release, ns string) error {
	cfg, err := c.helmConfig(ns)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, 2*time.Minute
	if _, err := un.Run(release); err != nil {
		return fmt.Errorf("helm uninstall %s -n %s: %w", release, ns, err)
	}
	if release == nvidiaRelease {
		c.mu.Lock()
		c.nvidia = false
		c.mu.Unlock()
	}
	// Helm waits for the DaemonSets, not for their pods and hooks.
	return c.waitNoPods(ctx, ns, "app.kubernetes.io/instance="+release)
}

// waitNoPods waits until no pod matches selector in ns.
func (c *cluster) waitNoPods(ctx context.Context, ns, selector string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pods %s in %s still there: %v", selector, ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podLogs is, for a failure message, the state and logs of ns's pods that
// match selector (all: ""), every container's.
func (c *cluster) podLogs(ns, selector string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return "\n(pods of " + ns + ": " + err.Error() + ")"
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "\n--- pod %s/%s: %s", ns, p.Name, podState(&p))
		for _, ctr := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			data, err := c.cs.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name}).DoRaw(ctx)
			if err != nil {
				continue
			}
			fmt.Fprintf(&b, "\n--- logs of %s:\n%s", ctr.Name, tail(string(data), 20))
		}
	}
	return b.String()
}

// ---------------------------------------------------------------- namespaces and pods

var seq atomic.Int64

// namespace creates a namespace for one test, opted in to injection or
// not; it is deleted when the test ends.
func (c *cluster) namespace(t testing.TB, optedIn bool) string {
	t.Helper()
	name := fmt.Sprintf("e2e-%d-%d", os.Getpid(), seq.Add(1))
	labels := map[string]string{}
	if optedIn {
		labels[injectKey] = injectValue
	}
	c.ensureNamespace(t, name, labels)
	t.Cleanup(func() {
		_ = c.cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// ensureNamespace creates ns with labels, or sets them on it.
func (c *cluster) ensureNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		c.labelNamespace(t, name, labels)
		err = nil
	}
	if err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	// Pods need the namespace's service account, which the controller-manager makes.
	for {
		if _, err := c.cs.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("namespace %s: no default service account after 30 s", name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// labelNamespace sets (value "") or removes (nil) labels on a namespace.
func (c *cluster) labelNamespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ns, err := c.cs.CoreV1().Namespaces().Get(ctxT(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	for k, v := range labels {
		ns.Labels[k] = v
	}
	if _, err := c.cs.CoreV1().Namespaces().Update(ctxT(t, 10*time.Second), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label namespace %s: %v", name, err)
	}
}

func (c *cluster) unlabelNamespace(t testing.TB, name string, keys ...string) {
	t.Helper()
	ns, err := c.cs.CoreV1().Namespaces().Get(ctxT(t, 10*time.Second), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		delete(ns.Labels, k)
	}
	if _, err := c.cs.CoreV1().Namespaces().Update(ctxT(t, 10*time.Second), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("unlabel namespace %s: %v", name, err)
	}
}

// podSpec is one container of the glibc test image (Debian's binaries,
// nothing NVIDIA in it) running script with sh. It stops at once when
// deleted.
func (c *cluster) podSpec(script string, gpus int) corev1.PodSpec {
	zero := int64(0)
	s := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: &zero,
		Containers: []corev1.Container{{
			Name: "main", Image: c.image("glibc"), ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", script},
		}},
	}
	if gpus > 0 {
		q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
		s.Containers[0].Resources.Limits = corev1.ResourceList{gpuResource: q}
	}
	return s
}

// pod is a pod named name of podSpec(script, gpus).
func (c *cluster) pod(name, script string, gpus int) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: c.podSpec(script, gpus)}
}

// create creates a pod; it is deleted when the test ends.
func (c *cluster) create(t testing.TB, ns string, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := c.cs.CoreV1().Pods(ns).Create(ctxT(t, 30*time.Second), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, p.Name, err)
	}
	t.Cleanup(func() { c.deletePod(ns, p.Name) })
	return got
}

func (c *cluster) deletePod(ns, name string) {
	zero := int64(0)
	_ = c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
}

// result is what a pod's container did: its output (stdout and stderr)
// and the pod's phase.
type result struct {
	out   string
	phase corev1.PodPhase
}

// run creates a pod, waits for it to finish and returns what it printed.
func (c *cluster) run(t testing.TB, ns string, p *corev1.Pod) result {
	t.Helper()
	c.create(t, ns, p)
	got := c.waitPod(t, ns, p.Name, 2*time.Minute, "finished", podFinished)
	return result{out: c.logs(t, ns, p.Name, ""), phase: got.Status.Phase}
}

// running creates a pod and waits until it runs and has printed want.
func (c *cluster) running(t testing.TB, ns string, p *corev1.Pod, want string) string {
	t.Helper()
	c.create(t, ns, p)
	c.waitPod(t, ns, p.Name, 2*time.Minute, "Running", podRunning)
	return c.waitLog(t, ns, p.Name, want)
}

// failedWaiting are container waiting reasons that will not resolve by
// themselves: the test says so at once rather than at the timeout.
var failedWaiting = []string{"ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}

func podFinished(p *corev1.Pod) (bool, error) {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, stuck(p)
}

func podRunning(p *corev1.Pod) (bool, error) {
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false, fmt.Errorf("pod %s ended (%s) instead of running", p.Name, p.Status.Phase)
	}
	return p.Status.Phase == corev1.PodRunning, stuck(p)
}

func podReady(p *corev1.Pod) (bool, error) {
	if ok, err := podRunning(p); !ok || err != nil {
		return ok, err
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue, nil
		}
	}
	return false, nil
}

func stuck(p *corev1.Pod) error {
	for _, s := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && slices.Contains(failedWaiting, w.Reason) {
			return fmt.Errorf("pod %s: container %s: %s: %s", p.Name, s.Name, w.Reason, w.Message)
		}
	}
	return nil
}

// waitPod watches a pod until done says so, and returns it then.
func (c *cluster) waitPod(t testing.TB, ns, name string, timeout time.Duration, what string, done func(*corev1.Pod) (bool, error)) *corev1.Pod {
	t.Helper()
	p, err := c.watchPod(ns, name, timeout, done)
	if err != nil {
		t.Fatalf("pod %s/%s not %s: %v%s", ns, name, what, err, c.describe(ns, name))
	}
	return p
}

// watchPod is waitPod's watch: it lists, then watches from there, so no
// change is missed between the two.
func (c *cluster) watchPod(ns, name string, timeout time.Duration, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	lw := cache.NewListWatchFromClient(c.cs.CoreV1().RESTClient(), "pods", ns, fields.OneTermEqualSelector("metadata.name", name))
	ev, err := watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("pod deleted")
		}
		p, ok := e.Object.(*corev1.Pod)
		if !ok {
			return false, nil
		}
		return done(p)
	})
	if err != nil {
		return nil, err
	}
	return ev.Object.(*corev1.Pod), nil
}

// describe is, for a failure message, a pod's state and its events.
func (c *cluster) describe(ns, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	if p, err := c.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		fmt.Fprintf(&b, "\npod %s/%s: %s", ns, name, podState(p))
	}
	evs, err := c.cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err == nil {
		for _, e := range evs.Items {
			fmt.Fprintf(&b, "\n  event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	return b.String()
}

// podState is a pod's phase, node and each container's state, in one line.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s on %q", p.Status.Phase, p.Spec.NodeName)
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Running != nil:
			s += fmt.Sprintf("; %s running (restarts %d)", cs.Name, cs.RestartCount)
		case cs.State.Terminated != nil:
			s += fmt.Sprintf("; %s exited %d %s", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Reason)
		}
	}
	return s
}

// logs is what a pod's container (its only one: "") printed.
func (c *cluster) logs(t testing.TB, ns, pod, container string) string {
	t.Helper()
	data, err := c.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctxT(t, 30*time.Second))
	if err != nil {
		t.Fatalf("logs of %s/%s %s: %v", ns, pod, container, err)
	}
	return string(data)
}

// waitLog waits until a running pod has printed want.
func (c *cluster) waitLog(t testing.TB, ns, pod, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := c.logs(t, ns, pod, "")
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s did not print %q in 30 s; it printed:\n%s", ns, pod, want, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs cmd in a running pod's container, as kubectl exec does (the
// API server's WebSocket exec), and returns its stdout and stderr.
func (c *cluster) exec(t testing.TB, ns, pod, container string, cmd ...string) (string, error) {
	t.Helper()
	req := c.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewWebSocketExecutor(c.cfg, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	var out lockedBuffer
	err = ex.StreamWithContext(ctxT(t, time.Minute), remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	return out.String(), err
}

// lockedBuffer is a buffer two streams write at once: the executor copies
// stdout and stderr in goroutines of their own (one bytes.Buffer for both
// loses and garbles output).
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
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
			for _, l := range lines(string(data)) {
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
	if want := "GPU 0: " + rest; lines(out)[0] != want {
		t.Errorf("pod %s printed %q, want %q", pod, lines(out)[0], want)
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

func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
