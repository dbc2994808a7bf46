//go:build k8s

package k8s

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/storage/driver"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// Deploying NVIDIA's DRA driver for TestDRADriver: its chart, the node's
// CDI directory and shared mounts, its ResourceSlices, the host's view of
// the GPUs to compare them with.

// draDriverRoot is the driver root the DRA driver is given: the overlay's
// stable symlink, as for NVIDIA's device plugin (docs/dra.md says why not
// the resolved root nvidia-ctk needs).
func (c *cluster) draDriverRoot() string { return filepath.Join(c.overlayRoot(), "driver") }

// draProcDevices is the overlay's /proc/devices, which the compute-domain
// plugin reads for the nvidia-caps and nvidia-caps-imex-channels majors of
// the driver (given to it as ALT_PROC_DEVICES_PATH, the chart's
// altProcDevices; docs/dra.md).
func (c *cluster) draProcDevices() string { return filepath.Join(c.draDriverRoot(), "proc", "devices") }

func draDeploy(t *testing.T, c *cluster) *draEnv {
	t.Helper()
	cache := testenv.CacheDir()
	if _, err := os.Stat(filepath.Join(cache, "dra", "bin", ".dra-driver-"+draVersion)); err != nil {
		testenv.Missing(t, "NVIDIA's DRA driver %s in %s (hack/fetch-dra-driver.sh builds it; NVMOCK_DRA_SRC names its source)", draVersion, filepath.Join(cache, "dra"))
	}
	chartDir := filepath.Join(cache, "dra", "src", draVersion, "deployments", "helm", "dra-driver-nvidia-gpu")

	// The chart mounts the driver root with mountPropagation HostToContainer
	// (and the kubelet's plugins dir Bidirectional, which the kubelet makes
	// shared itself): the runtime refuses that on a private mount.
	if err := draSharedMount(c.overlayRoot()); err != nil {
		t.Fatalf("the DRA driver's chart cannot mount the driver root: %v; on a systemd node / is shared, here hack/k8s-node.sh up must make $NVMOCK_K8S_DIR a shared mount (docs/dra.md)", err)
	}

	// The chart's init container waits, forever, for the driver root's
	// nvidia-smi to answer --version (550.163.01 does, 535.261.03 does not).
	smi, lib := filepath.Join(c.draDriverRoot(), "usr", "bin", "nvidia-smi"), filepath.Join(c.draDriverRoot(), "usr", "lib64", "libnvidia-ml.so.1")
	if out, err := exec.Command("env", "-i", "LD_PRELOAD="+lib, smi, "--version").CombinedOutput(); err != nil {
		t.Fatalf("the overlay's nvidia-smi does not answer --version (%v: %s), which the DRA driver's init container waits for; the overlay needs an nvidia-smi that has it, as 550.163.01 (docs/dra.md)",
			err, strings.TrimSpace(string(out)))
	}

	script := filepath.Join(testenv.Root(), "hack", "k8s", "dra-images.sh")
	cmd := exec.Command(script)
	cmd.Env = append(os.Environ(), "NVMOCK_K8S_DIR="+c.dir, "NVMOCK_CACHE="+cache)
	if ctr := c.env["CTR"]; ctr != "" {
		cmd.Env = append(cmd.Env, "CTR="+ctr)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}

	d := &draEnv{c: c, gpus: c.draHostGPUs(t), chart: chartDir}
	if v, err := exec.Command(smi, "--query-gpu=driver_version", "--format=csv,noheader", "-i", "0").Output(); err != nil {
		t.Fatalf("%s --query-gpu=driver_version: %v", smi, err)
	} else {
		d.driver = strings.TrimSpace(string(v))
	}
	_, err := os.Stat(c.draProcDevices())
	d.computeDomains = err == nil
	if !d.computeDomains {
		t.Logf("the overlay has no %s: the compute-domain plugin cannot start; installing without compute domains (docs/dra.md)", c.draProcDevices())
	}

	// Its namespace opts in, so that the plugin's runtime hook shows its
	// containers the node's PCI tree, where the kubelet plugin reads each
	// GPU's PCIe root (values: no GPU edits otherwise).
	// A release left by a run that kept it (NVMOCK_K8S_KEEP) goes first,
	// with its namespace: the install would make the namespace again
	// without the label (review: the driver then ran without injection).
	ctx := ctxT(t, 5*time.Minute)
	if err := c.draRemoveKept(ctx, chartDir); err != nil {
		t.Fatal(err)
	}
	c.ensureNamespace(t, draNS, map[string]string{injectKey: injectValue})
	start := time.Now()
	if err := c.draInstall(ctx, chartDir, d.values()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("NVMOCK_K8S_KEEP") != "" {
			return
		}
		if err := c.draUninstall(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if err := c.draWaitSlices(ctx, draGPUDriver, len(d.gpus)); err != nil {
		t.Fatal(err)
	}
	t.Logf("DRA driver %s deployed, its %d GPUs published, in %.1f s", draVersion, len(d.gpus), time.Since(start).Seconds())
	return d
}

// values are the chart's values for this node.
func (d *draEnv) values() map[string]any {
	c := d.c
	kubelet := c.env["KUBELET_ROOT"]
	v := map[string]any{
		"image": map[string]any{"repository": draImage, "tag": draVersion, "pullPolicy": "Never"},
		// The overlay's driver root; the chart mounts it at /driver-root
		// and its parent at /driver-root-parent (the init container).
		"nvidiaDriverRoot": c.draDriverRoot(),
		// DRA plugins follow the kubelet's root dir (hack/k8s-node.sh).
		// In the opted-in namespace the plugins' containers take no GPU
		// edits (the chart sets void on each: they reach the driver root
		// themselves), only the node's PCI tree; the controller nothing.
		"kubeletPlugin": map[string]any{
			"kubeletRegistrarDirectoryPath": filepath.Join(kubelet, "plugins_registry"),
			"kubeletPluginsDirectoryPath":   filepath.Join(kubelet, "plugins"),
		},
		"controller": map[string]any{"podAnnotations": map[string]any{"nvmock.io/inject": "false"}},
		// GPUs through DRA beside NVIDIA's device plugin (which other tests
		// install): the chart refuses unless told; the tests never ask both
		// for the same GPU.
		"gpuResourcesEnabledOverride": true,
		"resources": map[string]any{
			"gpus":           map[string]any{"enabled": true},
			"computeDomains": map[string]any{"enabled": d.computeDomains},
		},
	}
	if d.computeDomains {
		v["altProcDevices"] = c.draProcDevices()
	}
	return v
}

// draCDIDir points the chart's CDI volume at the runtime's CDI directory: a
// Helm post-renderer, as the chart has no value for it.
type draCDIDir string

func (dir draCDIDir) Run(in *bytes.Buffer) (*bytes.Buffer, error) {
	var out bytes.Buffer
	for _, doc := range strings.Split(in.String(), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return nil, fmt.Errorf("post-render: %w", err)
		}
		if obj == nil {
			continue
		}
		if obj["kind"] == "DaemonSet" {
			spec, _ := obj["spec"].(map[string]any)
			tmpl, _ := spec["template"].(map[string]any)
			pod, _ := tmpl["spec"].(map[string]any)
			vols, _ := pod["volumes"].([]any)
			for _, v := range vols {
				vol, _ := v.(map[string]any)
				hp, _ := vol["hostPath"].(map[string]any)
				if vol["name"] == "cdi" && hp["path"] == draChartCDIDir {
					hp["path"] = string(dir)
				}
			}
		}
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	return &out, nil
}

// draInstall installs the chart (helm install --wait: its DaemonSet and
// Deployment ready).
func (c *cluster) draInstall(ctx context.Context, chartDir string, vals map[string]any) error {
	cfg, ch, err := c.draChart(chartDir)
	if err != nil {
		return err
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = draRelease, draNS, true
	in.Wait, in.Timeout = true, 3*time.Minute
	in.PostRenderer = draCDIDir(c.cdiDir())
	if _, err := in.RunWithContext(ctx, ch, vals); err != nil {
		return fmt.Errorf("helm install %s %s -n %s: %w%s", draRelease, chartDir, draNS, err, c.podLogs(draNS, ""))
	}
	return nil
}

// draRemoveKept uninstalls a release a run kept (NVMOCK_K8S_KEEP).
func (c *cluster) draRemoveKept(ctx context.Context, chartDir string) error {
	cfg, _, err := c.draChart(chartDir)
	if err != nil {
		return err
	}
	if _, err := action.NewStatus(cfg).Run(draRelease); err != nil {
		return nil
	}
	return c.draUninstall(ctx)
}

// draUninstall removes the ComputeDomains and the release, waits for its
// pods to go, and removes what Helm leaves: the namespace and the chart's
// CRDs.
func (c *cluster) draUninstall(ctx context.Context) error {
	// As upstream says: ComputeDomains first, while the controller that
	// removes their finalizers (and their daemons') still runs.
	if err := c.draDeleteComputeDomains(ctx, ""); err != nil {
		return err
	}
	if err := c.helmUninstall(ctx, draRelease, draNS); err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.cfg)
	if err != nil {
		return err
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, n := range []string{"computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"} {
		if err := dyn.Resource(crds).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete CRD %s: %w", n, err)
		}
	}
	if err := c.cs.CoreV1().Namespaces().Delete(ctx, draNS, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// Gone, so that an install right after can create it again.
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := c.cs.CoreV1().Namespaces().Get(ctx, draNS, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still there: %v", draNS, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// draSharedMount says why the mount holding path is neither shared nor a
// slave (nil if it is one), as the runtime checks it for a volume with
// mountPropagation (containerd: "is mounted on / but it is not a shared or
// slave mount").
func draSharedMount(path string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	best, opts := "", ""
	for _, l := range testenv.Lines(string(data)) {
		// id parent major:minor root mountpoint options optional... - type source super
		f := strings.Fields(l)
		if len(f) < 7 {
			continue
		}
		mp := f[4]
		if (path == mp || strings.HasPrefix(path, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			best, opts = mp, ""
			for _, o := range f[6:] {
				if o == "-" {
					break
				}
				opts += " " + o
			}
		}
	}
	if strings.Contains(opts, "shared:") || strings.Contains(opts, "master:") {
		return nil
	}
	return fmt.Errorf("%s is on the mount %s, which is private", path, best)
}

// draSlices are the devices of a driver's ResourceSlices on the node.
func (c *cluster) draSlices(ctx context.Context, driverName string) ([]resourcev1.Device, error) {
	l, err := c.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + c.node + ",spec.driver=" + driverName})
	if err != nil {
		return nil, err
	}
	var devs []resourcev1.Device
	for _, s := range l.Items {
		devs = append(devs, s.Spec.Devices...)
	}
	return devs, nil
}

// draWaitSlices waits until a driver's slices on the node list at least n
// devices; it stops early if a pod of the driver is stuck.
func (c *cluster) draWaitSlices(ctx context.Context, driverName string, n int) error {
	var last []resourcev1.Device
	var err error
	for {
		if last, err = c.draSlices(ctx, driverName); err == nil && len(last) >= n {
			return nil
		}
		if pods, perr := c.cs.CoreV1().Pods(draNS).List(ctx, metav1.ListOptions{}); perr == nil {
			for _, p := range pods.Items {
				if serr := stuck(&p); serr != nil {
					return fmt.Errorf("ResourceSlices of %s: %v%s", driverName, serr, c.podLogs(draNS, ""))
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ResourceSlices of %s on %s: %d devices (%v), want %d%s", driverName, c.node, len(last), err, n,
				c.podLogs(draNS, ""))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// draHostGPUs is the truth: the real nvidia-smi on the host, against the
// overlay.
func (c *cluster) draHostGPUs(t testing.TB) []draGPU {
	t.Helper()
	smi := filepath.Join(c.draDriverRoot(), "usr", "bin", "nvidia-smi")
	q, err := exec.Command(smi, "--query-gpu=uuid,name,compute_cap,memory.total,pci.bus_id", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Fatalf("%s --query-gpu on the host: %v", smi, err)
	}
	x, err := exec.Command(smi, "-q", "-x").Output()
	if err != nil {
		t.Fatalf("%s -q -x on the host: %v", smi, err)
	}
	var log struct {
		GPUs []struct {
			UUID string `xml:"uuid"`
			Arch string `xml:"product_architecture"`
		} `xml:"gpu"`
	}
	if err := xml.Unmarshal(x, &log); err != nil {
		t.Fatalf("%s -q -x: %v", smi, err)
	}
	arch := map[string]string{}
	for _, g := range log.GPUs {
		arch[g.UUID] = g.Arch
	}
	var gpus []draGPU
	for i, l := range testenv.Lines(string(q)) {
		f := strings.Split(l, ", ")
		if len(f) != 5 {
			t.Fatalf("nvidia-smi --query-gpu printed %q", l)
		}
		mem, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			t.Fatalf("nvidia-smi --query-gpu: memory.total %q", f[3])
		}
		gpus = append(gpus, draGPU{uuid: f[0], name: f[1], cc: f[2], memMiB: mem, arch: arch[f[0]],
			line: fmt.Sprintf("GPU %d: %s (UUID: %s)", i, f[1], f[0]), pcieRoot: c.pcieRoot(t, f[4])})
	}
	if len(gpus) == 0 || !slices.Equal(uuidsIn(strings.Join(c.gpuLines(), "\n")), draUUIDs(gpus)) {
		t.Fatalf("nvidia-smi on the host: --query-gpu lists %v, -L %v", draUUIDs(gpus), c.gpuLines())
	}
	return gpus
}

func draUUIDs(gpus []draGPU) []string {
	var u []string
	for _, g := range gpus {
		u = append(u, g.uuid)
	}
	return u
}

// pcieRoot is the host bridge the overlay's rendered PCI tree puts a GPU
// under (NVML's bus id "00000000:4D:00.0"), read from the tree's
// /sys/bus/pci/devices link as the kernel's would be.
func (c *cluster) pcieRoot(t testing.TB, busID string) string {
	t.Helper()
	a, err := profile.ParsePCIAddress(busID)
	if err != nil {
		t.Fatalf("nvidia-smi pci.bus_id %q: %v", busID, err)
	}
	overlay, err := filepath.EvalSymlinks(c.draDriverRoot())
	if err != nil {
		t.Fatal(err)
	}
	link, err := os.Readlink(filepath.Join(hostprep.SysOf(filepath.Dir(overlay)), "bus", "pci", "devices", a.String()))
	if err != nil {
		t.Fatalf("the overlay's PCI tree: %v", err)
	}
	// ../../../devices/pci0000:4d/...
	_, rest, _ := strings.Cut(link, "devices/")
	root, _, _ := strings.Cut(rest, "/")
	return root
}

// withFeatureGates upgrades the release with the driver's feature gates
// set, and back to the suite's values when the test ends. Each waits for
// the kubelet plugins' new pods to pass their startup probe (registered
// with the kubelet): helm's wait does not, and a claim prepared before
// then fails, and waits out the kubelet's retry (about 90 s, measured).
func (d *draEnv) withFeatureGates(t *testing.T, gates map[string]any) {
	t.Helper()
	upgrade := func(vals map[string]any) error {
		ctx := ctxT(t, 4*time.Minute)
		if err := d.c.draUpgrade(ctx, d.chart, vals); err != nil {
			return err
		}
		return d.c.waitRollout(ctx, draNS, draRelease)
	}
	t.Cleanup(func() {
		if err := upgrade(d.values()); err != nil {
			t.Error(err)
		}
	})
	vals := d.values()
	vals["featureGates"] = gates
	if err := upgrade(vals); err != nil {
		t.Fatal(err)
	}
}

// draUpgrade changes the release's values, as helm upgrade does; the
// kubelet plugin's pods restart when their spec changes.
func (c *cluster) draUpgrade(ctx context.Context, chartDir string, vals map[string]any) error {
	cfg, ch, err := c.draChart(chartDir)
	if err != nil {
		return err
	}
	up := action.NewUpgrade(cfg)
	up.Namespace, up.Wait, up.Timeout = draNS, true, 3*time.Minute
	up.PostRenderer = draCDIDir(c.cdiDir())
	if _, err := up.RunWithContext(ctx, draRelease, ch, vals); err != nil {
		return fmt.Errorf("helm upgrade %s %s -n %s: %w%s", draRelease, chartDir, draNS, err, c.podLogs(draNS, ""))
	}
	return nil
}

// draChart is Helm's configuration for the driver's namespace and its chart.
func (c *cluster) draChart(chartDir string) (*action.Configuration, *chart.Chart, error) {
	cfg, err := c.helmConfig(draNS)
	if err != nil {
		return nil, nil, err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, nil, fmt.Errorf("load chart %s: %w", chartDir, err)
	}
	return cfg, ch, nil
}
