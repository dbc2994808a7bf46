//go:build integration

package hostprep_test

// NVIDIA's own NVML clients, built from the Go module proxy by
// hack/fetch-nvidia-tools.sh, accept an installed node overlay: nvidia-ctk
// writes a CDI spec for it, gpu-feature-discovery labels it as a real node of
// the board, and the device plugin registers with a (stand-in) kubelet and
// allocates its GPUs.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/hostprep/nsexec"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/pcisim/expose"
	"github.com/nvmock/nvmock/profile"
)

// nvidiaTool is a binary hack/fetch-nvidia-tools.sh built into the cache.
func nvidiaTool(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(testenv.CacheDir(), "bin", name)
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "%s (run make deps, or hack/fetch-nvidia-tools.sh %s)", p, testenv.CacheDir())
	}
	return p
}

// installNode installs a fresh overlay for a built-in profile with n GPUs.
func installNode(t *testing.T, name string, n int) (*hostprep.Result, *profile.Profile) {
	t.Helper()
	p := testenv.Profile(t, name, n)
	return install(t, newSite(t).options(p, realAssets(t))), p
}

// toolEnv runs a tool against the overlay's library and device nodes only.
func toolEnv(res *hostprep.Result) []string {
	return cleanEnv(
		"LD_LIBRARY_PATH="+filepath.Join(res.Driver, "usr", "lib64"),
		"NVMOCK_DEV_ROOT="+filepath.Join(res.Driver, "dev"),
	)
}

// runTool runs a tool to completion, bounded by timeout.
func runTool(t *testing.T, timeout time.Duration, env []string, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: no exit within %v\n%s", filepath.Base(bin), strings.Join(args, " "), timeout, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return out
}

var toolCases = []struct {
	name    string
	profile string
	gpus    int
}{
	{"eight A100s", "a100", 8},
	{"eight H100s", "h100", 8},
	{"eight B200s", "b200", 8},
	{"four GB200s", "gb200", 4},
	{"one L40S", "l40s", 1},
	{"one T4", "t4", 1},
}

func TestNvidiaCTKGeneratesACDISpecNamingEveryMockGPUByIndexAndUUID(t *testing.T) {
	needRoot(t)
	ctk := nvidiaTool(t, "nvidia-ctk")
	for _, tc := range toolCases {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := installNode(t, tc.profile, tc.gpus)
			out := filepath.Join(t.TempDir(), "nvidia.yaml")
			log := runTool(t, 2*time.Minute, cleanEnv(), ctk, "cdi", "generate",
				"--driver-root", res.Driver, "--dev-root", res.Driver, "--output", out)
			// ReadSpec parses the YAML (sigs.k8s.io/yaml) and validates it as
			// container runtimes do.
			spec, err := cdi.ReadSpec(out, 0)
			if err != nil {
				t.Fatalf("read the generated spec: %v\nnvidia-ctk said:\n%s", err, log)
			}
			if spec.Kind != "nvidia.com/gpu" {
				t.Errorf("kind %q, want nvidia.com/gpu", spec.Kind)
			}

			var names, want []string
			for _, d := range spec.Devices {
				names = append(names, d.Name)
			}
			for _, id := range res.GPUs {
				want = append(want, strconv.Itoa(id.Index), id.UUID)
			}
			want = append(want, "all")
			slices.Sort(names)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("devices in the spec:\n  %v\nwant every GPU by index and by UUID, and all:\n  %v", names, want)
			}

			// Both names of a GPU get its own device node, from the overlay.
			nodeOf := func(name string) []string {
				d := spec.GetDevice(name)
				if d == nil {
					return nil
				}
				var nodes []string
				for _, n := range d.ContainerEdits.DeviceNodes {
					nodes = append(nodes, n.Path+" from "+n.HostPath)
				}
				slices.Sort(nodes)
				return nodes
			}
			for _, id := range res.GPUs {
				dev := fmt.Sprintf("/dev/nvidia%d", id.Index)
				want := []string{dev + " from " + filepath.Join(res.Driver, dev)}
				for _, name := range []string{strconv.Itoa(id.Index), id.UUID} {
					if got := nodeOf(name); !slices.Equal(got, want) {
						t.Errorf("device %s: nodes %v, want %v", name, got, want)
					}
				}
			}

			// The control nodes every GPU container needs come with any device.
			var common []string
			for _, n := range spec.ContainerEdits.DeviceNodes {
				common = append(common, n.Path)
			}
			for _, n := range []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
				if !slices.Contains(common, n) {
					t.Errorf("spec-wide device nodes %v lack %s", common, n)
				}
			}

			// An NVL72 tray's driver root has the IMEX tools, which the spec
			// mounts as the driver's other binaries; other boards have none.
			var mounts []string
			for _, m := range spec.ContainerEdits.Mounts {
				mounts = append(mounts, m.ContainerPath)
			}
			// So are the MPS control daemon and server, as a driver has them.
			clique := hostprep.HasClique(testenv.Profile(t, tc.profile, tc.gpus))
			for _, b := range []string{"/usr/bin/nvidia-smi", "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server",
				"/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex-ctl"} {
				if want := !strings.Contains(b, "imex") || clique; slices.Contains(mounts, b) != want {
					t.Errorf("%s (clique %v): spec-wide mounts %v; want %s: %v", tc.profile, clique, mounts, b, want)
				}
			}
		})
	}
}

// gfdLabels are the labels gpu-feature-discovery gives a real node of the
// profile's board with the profile's driver (see internal/lm in k8s-device-plugin).
func gfdLabels(p *profile.Profile, machine string) map[string]string {
	b := p.Board
	major, minor, _ := strings.Cut(b.ComputeCapability, ".")
	drv := strings.SplitN(p.Driver.Version, ".", 3)
	cudaMajor, cudaMinor, _ := strings.Cut(p.Driver.CUDAVersion, ".")
	l := map[string]string{
		"gpu.product":                  profile.ProductLabel(b.ProductName),
		"gpu.count":                    strconv.Itoa(p.GPUs),
		"gpu.memory":                   strconv.FormatUint(uint64(b.Memory.Total)>>20, 10),
		"gpu.compute.major":            major,
		"gpu.compute.minor":            minor,
		"gpu.family":                   strings.ToLower(strings.ReplaceAll(b.Architecture, " ", "-")),
		"gpu.machine":                  strings.ReplaceAll(machine, " ", "-"),
		"cuda.driver-version.full":     p.Driver.Version,
		"cuda.driver-version.major":    drv[0],
		"cuda.driver-version.minor":    drv[1],
		"cuda.driver-version.revision": drv[2],
		"cuda.driver.major":            drv[0],
		"cuda.driver.minor":            drv[1],
		"cuda.driver.rev":              drv[2],
		"cuda.runtime-version.full":    p.Driver.CUDAVersion,
		"cuda.runtime-version.major":   cudaMajor,
		"cuda.runtime-version.minor":   cudaMinor,
		"cuda.runtime.major":           cudaMajor,
		"cuda.runtime.minor":           cudaMinor,
		"mig.capable":                  strconv.FormatBool(b.Modes.MIG != nil),
		"vgpu.present":                 "false",
		"gpu.sharing-strategy":         "none",
		"gpu.replicas":                 "1",
		"mps.capable":                  "false",
		// From the PCI class (0x0302, 3D controller) in sysfs: pcisim's tree.
		"gpu.mode": "compute",
	}
	out := map[string]string{}
	for k, v := range l {
		out["nvidia.com/"+k] = v
	}
	return out
}

func TestGPUFeatureDiscoveryLabelsTheNodeAsARealNodeOfTheBoard(t *testing.T) {
	needRoot(t)
	gfd := nvidiaTool(t, "gpu-feature-discovery")
	for _, tc := range toolCases {
		t.Run(tc.name, func(t *testing.T) {
			res, p := installNode(t, tc.profile, tc.gpus)
			dir := t.TempDir()
			machine := "NVIDIA DGX " + p.Name
			mt := filepath.Join(dir, "product_name")
			must(t, os.WriteFile(mt, []byte(machine+"\n"), 0o644))
			labels := filepath.Join(dir, "labels")
			// In the node's namespace: gpu.mode comes from the GPUs' PCI class in /sys.
			log := inNode(t, res, 2*time.Minute, toolEnv(res), gfd,
				"--oneshot", "--no-timestamp", "--output-file", labels, "--machine-type-file", mt)
			got := readLabels(t, labels)
			var diffs []string
			want := gfdLabels(p, machine)
			for k, v := range want {
				if g, ok := got[k]; !ok {
					diffs = append(diffs, fmt.Sprintf("%s missing, want %q", k, v))
				} else if g != v {
					diffs = append(diffs, fmt.Sprintf("%s=%q, want %q", k, g, v))
				}
			}
			if len(diffs) > 0 {
				slices.Sort(diffs)
				t.Errorf("labels differ from a real %s node:\n  %s\nall labels: %v\ngpu-feature-discovery said:\n%s",
					p.Board.ProductName, strings.Join(diffs, "\n  "), got, log)
			}
		})
	}
}

func readLabels(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	return out
}

// devicePluginCaseEnv carries a case into the re-executed test binary that
// runs inside a private mount namespace.
const devicePluginCaseEnv = "NVMOCK_TEST_DEVICE_PLUGIN_CASE"

// hostMountNSEnv names the parent's mount namespace, so the child can check
// that it has a private one before mounting anything.
const hostMountNSEnv = "NVMOCK_TEST_HOST_MOUNT_NS"

// devicePluginHost checks what running NVIDIA's device plugin needs and
// returns this process's mount namespace, for the re-executed test binary
// to check that it has a private one.
func devicePluginHost(t *testing.T) string {
	t.Helper()
	needRoot(t)
	nvidiaTool(t, "nvidia-device-plugin")
	realAssets(t)
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		testenv.Missing(t, "mount namespaces (%v)", err)
	}
	return hostNS
}

// The plugin's own socket directory is hard-coded to
// /var/lib/kubelet/device-plugins/, so the test re-executes itself in a
// private mount namespace with a tmpfs there: nothing lands in the host's
// /var/lib, and a real kubelet on the machine is not disturbed.
func TestTheDevicePluginRegistersWithTheKubeletAndAllocatesTheMockGPUs(t *testing.T) {
	if c := os.Getenv(devicePluginCaseEnv); c != "" {
		devicePluginInNamespace(t, c)
		return
	}
	hostNS := devicePluginHost(t)
	for _, tc := range []struct {
		name    string
		profile string
		gpus    int
	}{
		{"eight A100s", "a100", 8},
		{"eight H100s", "h100", 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inMountNamespace(t, hostNS, fmt.Sprintf("%s=%s:%d", devicePluginCaseEnv, tc.profile, tc.gpus))
		})
	}
}

// inMountNamespace re-executes the running top-level test in a private
// mount namespace with env added (the case it is to run), and fails unless
// it passes there. hostNS names the parent's namespace (hostMountNSEnv).
func inMountNamespace(t *testing.T, hostNS, env string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+strings.Split(t.Name(), "/")[0]+"$", "-test.v", "-test.timeout=150s")
	cmd.Env = append(cleanEnv(), env, hostMountNSEnv+"="+hostNS)
	// Go makes / recursively private in the child's new namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err != nil && !errors.As(err, &exit) && errors.Is(err, syscall.EPERM):
		testenv.Missing(t, "a private mount namespace (CAP_SYS_ADMIN): %v", err)
	case err != nil:
		t.Fatalf("in a private mount namespace: %v\n%s", err, out)
	case bytes.Contains(out, []byte("--- SKIP")):
		t.Skipf("skipped in the mount namespace:\n%s", out)
	case !bytes.Contains(out, []byte("--- PASS")):
		t.Fatalf("no test ran in the mount namespace:\n%s", out)
	}
	t.Logf("in a private mount namespace:\n%s", out)
}

// devicePluginInNamespace is the test proper: kubelet's side of the
// device-plugin protocol against the real plugin on the mock node.
func devicePluginInNamespace(t *testing.T, c string) {
	name, n, _ := strings.Cut(c, ":")
	gpus, err := strconv.Atoi(n)
	if err != nil {
		t.Fatalf("%s=%q: want profile:gpus", devicePluginCaseEnv, c)
	}
	privateKubeletDir(t)
	dp := nvidiaTool(t, "nvidia-device-plugin")
	res, p := installNode(t, name, gpus)
	// The plugin reads each GPU's NUMA node from sysfs, where a node
	// (or a container the NRI plugin serves) shows pcisim's tree.
	if err := expose.Expose("/sys", hostprep.SysOf(res.Overlay)); err != nil {
		t.Fatal(err)
	}

	kubelet := startKubelet(t, pluginapi.KubeletSocket)
	log, exited := startDevicePlugin(t, dp, res)

	reg := kubelet.waitRegister(t, time.Minute, exited, log.String)
	if reg.Version != pluginapi.Version || reg.ResourceName != "nvidia.com/gpu" || reg.Endpoint != "nvidia-gpu.sock" {
		t.Fatalf("Register %+v, want version %s, resource nvidia.com/gpu, endpoint nvidia-gpu.sock", reg, pluginapi.Version)
	}
	t.Logf("registered: %+v", reg)

	plugin := dialPlugin(t, filepath.Join(pluginapi.DevicePluginPath, reg.Endpoint))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	stream, err := plugin.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("ListAndWatch: %v\n%s", err, log.String())
	}
	list, err := stream.Recv()
	if err != nil {
		t.Fatalf("ListAndWatch: first response: %v\n%s", err, log.String())
	}
	// Each GPU healthy, on its NUMA node, which the kubelet's Topology
	// Manager aligns CPUs with.
	var got, want []string
	for _, d := range list.Devices {
		numa := "none"
		if d.Topology != nil {
			var ids []string
			for _, n := range d.Topology.Nodes {
				ids = append(ids, strconv.FormatInt(n.ID, 10))
			}
			numa = strings.Join(ids, ",")
		}
		got = append(got, d.ID+" "+d.Health+" NUMA "+numa)
	}
	for i, id := range res.GPUs {
		numa := p.Topology.NUMANodes[i%len(p.Topology.NUMANodes)]
		want = append(want, fmt.Sprintf("%s %s NUMA %d", id.UUID, pluginapi.Healthy, numa))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ListAndWatch devices:\n  %v\nwant every mock GPU by UUID, healthy, on its NUMA node:\n  %v", got, want)
	}
	t.Logf("ListAndWatch: %v", got)

	preferredAllocation(t, ctx, plugin, name, res, log.String)

	pick := res.GPUs[len(res.GPUs)-1].UUID
	alloc, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIDs: []string{pick}}},
	})
	if err != nil {
		t.Fatalf("Allocate %s: %v\n%s", pick, err, log.String())
	}
	if len(alloc.ContainerResponses) != 1 {
		t.Fatalf("Allocate: %d container responses, want 1", len(alloc.ContainerResponses))
	}
	if env := alloc.ContainerResponses[0].Envs; env["NVIDIA_VISIBLE_DEVICES"] != pick {
		t.Errorf("Allocate %s: env %v, want NVIDIA_VISIBLE_DEVICES=%s", pick, env, pick)
	}
	t.Logf("Allocate %s: %v", pick, alloc.ContainerResponses[0])

	// An XID on one GPU, injected in the node's live state as nvmock ctl
	// does: the plugin's health checker, waiting in NVML's event set,
	// marks exactly that GPU unhealthy in ListAndWatch.
	if !strings.Contains(waitLog(t, log, "Ignoring the following XIDs for health checks", 30*time.Second), "Ignoring") {
		t.Fatalf("the plugin's health checker did not start:\n%s", log.String())
	}
	time.Sleep(time.Second) // from its log line to its event set
	sick := res.GPUs[0].UUID
	state, err := live.Open(filepath.Join(filepath.Dir(res.Driver), hostprep.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	injected := time.Now()
	if err := state.Update(func(s *live.State, now int64) error { return s.XID(0, 48, now) }); err != nil {
		t.Fatal(err)
	}
	for {
		list, err := stream.Recv()
		if err != nil {
			t.Fatalf("ListAndWatch after XID 48 on %s: %v\n%s", sick, err, log.String())
		}
		health := map[string]string{}
		for _, d := range list.Devices {
			health[d.ID] = d.Health
		}
		if health[sick] != pluginapi.Unhealthy {
			continue
		}
		for id, h := range health {
			if id != sick && h != pluginapi.Healthy {
				t.Errorf("%s is %s after an XID on %s only", id, h, sick)
			}
		}
		t.Logf("ListAndWatch shows %s Unhealthy %v after XID 48", sick, time.Since(injected).Round(time.Millisecond))
		break
	}

	// A GPU that falls off the bus (XID 79): the checker cannot read the
	// lost GPU's UUID from the event, and so marks every GPU unhealthy.
	if err := state.Update(func(s *live.State, now int64) error { return s.XID(len(res.GPUs)-1, 79, now) }); err != nil {
		t.Fatal(err)
	}
	for {
		list, err := stream.Recv()
		if err != nil {
			t.Fatalf("ListAndWatch after XID 79: %v\n%s", err, log.String())
		}
		healthy := 0
		for _, d := range list.Devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			}
		}
		if healthy == 0 {
			break
		}
	}
	// Its log comes through a pipe, maybe after the update.
	if l := waitLog(t, log, "Failed to determine uuid for event", 10*time.Second); !strings.Contains(l, "Failed to determine uuid for event") {
		t.Errorf("the plugin's log does not say why every GPU went:\n%s", l)
	}
}

// waitLog waits until the log holds text, and returns the log.
func waitLog(t *testing.T, log *testenv.SyncBuffer, text string, timeout time.Duration) string {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if s := log.String(); strings.Contains(s, text) {
			return s
		}
	}
	return log.String()
}

// privateKubeletDir puts a tmpfs on /var/lib/kubelet (or on /var/lib where
// the host has no kubelet dir: a mount point must exist) and creates
// device-plugins/ in it. It refuses to run in the parent test's mount
// namespace (named by hostMountNSEnv).
func privateKubeletDir(t *testing.T) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/mnt")
	host := os.Getenv(hostMountNSEnv)
	if err != nil || host == "" || self == host {
		t.Fatalf("refusing to mount over /var/lib outside a private mount namespace (self %q, parent %q, %v)", self, host, err)
	}
	target := "/var/lib/kubelet"
	if _, err := os.Stat(target); err != nil {
		target = "/var/lib"
	}
	if err := syscall.Mount("tmpfs", target, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount tmpfs on %s in the private namespace: %v", target, err)
	}
	must(t, os.MkdirAll(pluginapi.DevicePluginPath, 0o755))
}

// Given the resolved driver root (nvidia-ctk resolves the libraries'
// symlinks and drops those that leave the root it was given, so the
// overlay's stable driver symlink does not do), nvidia-ctk finds the library
// through the root's loader cache and mounts it with its links made by hook.
// The driver version it finds the library by is the one NVML reports, which
// /proc/driver/nvidia/version and nvidia-smi's header also carry: a Blackwell
// board on its 580 driver, and an A100 whose driver --driver-version set.
func TestNvidiaCTKMountsTheLibraryFromTheResolvedDriverRoot(t *testing.T) {
	needRoot(t)
	ctk := nvidiaTool(t, "nvidia-ctk")
	a100 := testenv.Profile(t, "a100", 2)
	if err := a100.SetDriver("535.261.03"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		p       *profile.Profile
		version string
		module  string // how the kernel module names itself in /proc/driver/nvidia/version
	}{
		// Blackwell runs only the open modules (QA: the file named the proprietary one).
		{"b200 on its driver 580.105.08", testenv.Profile(t, "b200", 2), "580.105.08", "NVIDIA UNIX Open Kernel Module for x86_64  580.105.08  Release Build  ("},
		{"a100 on driver 535.261.03 by override", a100, "535.261.03", "NVIDIA UNIX x86_64 Kernel Module  535.261.03  "},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := install(t, newSite(t).options(c.p, realAssets(t)))
			root, err := filepath.EvalSymlinks(res.Driver)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "nvidia.yaml")
			log := runTool(t, 2*time.Minute, cleanEnv(), ctk, "cdi", "generate", "--driver-root", root, "--dev-root", root, "--output", out)
			spec, err := cdi.ReadSpec(out, 0)
			if err != nil {
				t.Fatalf("read the generated spec: %v\nnvidia-ctk said:\n%s", err, log)
			}
			var mounts, hooks []string
			for _, m := range spec.ContainerEdits.Mounts {
				mounts = append(mounts, m.ContainerPath+" from "+m.HostPath)
			}
			for _, h := range spec.ContainerEdits.Hooks {
				hooks = append(hooks, strings.Join(h.Args, " "))
			}
			lib := "/usr/lib64/libnvidia-ml.so." + c.version
			if want := lib + " from " + filepath.Join(root, lib); !slices.Contains(mounts, want) {
				t.Errorf("mounts %v lack %s", mounts, want)
			}
			if !slices.ContainsFunc(hooks, func(h string) bool {
				return strings.Contains(h, "create-symlinks") && strings.Contains(h, "libnvidia-ml.so."+c.version+"::/usr/lib64/libnvidia-ml.so.1")
			}) {
				t.Errorf("no hook links libnvidia-ml.so.1 to the library: %v", hooks)
			}
			proc, err := os.ReadFile(filepath.Join(root, "proc", "driver", "nvidia", "version"))
			if err != nil || !strings.HasPrefix(string(proc), "NVRM version: "+c.module) {
				t.Errorf("/proc/driver/nvidia/version: %v\n%s\nwant NVRM version: %s...", err, proc, c.module)
			}
			smi := runTool(t, time.Minute, toolEnv(res), filepath.Join(root, "usr", "bin", "nvidia-smi"),
				"--query-gpu=driver_version", "--format=csv,noheader")
			if got := strings.TrimSpace(string(smi)); got != c.version+"\n"+c.version && got != c.version {
				t.Errorf("nvidia-smi --query-gpu=driver_version printed %q, want %s per GPU", got, c.version)
			}
		})
	}
}

// inNode runs a tool as nvmock exec runs commands, over the installed
// overlay: a private mount namespace with its device nodes, library and
// PCI tree (/sys) at the standard places. The built nvmock binary is the
// namespace's child half.
func inNode(t *testing.T, res *hostprep.Result, timeout time.Duration, env []string, bin string, args ...string) []byte {
	t.Helper()
	out, status := inNodeStatus(t, res, timeout, env, bin, args...)
	if status != 0 {
		t.Fatalf("%s %s: status %d\n%s", filepath.Base(bin), strings.Join(args, " "), status, out)
	}
	return out
}

// inNodeStatus is inNode for a command that may fail: its output and exit
// status.
func inNodeStatus(t *testing.T, res *hostprep.Result, timeout time.Duration, env []string, bin string, args ...string) ([]byte, int) {
	t.Helper()
	self := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	if _, err := os.Stat(self); err != nil {
		testenv.Missing(t, "%s (run make build)", self)
	}
	var out testenv.SyncBuffer
	done := make(chan struct{})
	var status int
	var err error
	go func() {
		defer close(done)
		status, err = nsexec.Run(nsexec.Options{
			Driver: res.Driver, Sys: hostprep.SysOf(res.Overlay), Work: t.TempDir(),
			Args: append([]string{bin}, args...), Env: env,
			Self:  []string{self, "__exec-child"},
			Stdin: strings.NewReader(""), Stdout: &out, Stderr: &out,
		})
	}()
	select {
	case <-done:
	case <-time.After(timeout):
		t.Fatalf("%s %s: no exit within %v\n%s", filepath.Base(bin), strings.Join(args, " "), timeout, out.String())
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String())
	}
	return []byte(out.String()), status
}

// preferredTogether says, per board, which GPUs a topology-aware placement
// keeps together: the group of each GPU index and the group's size. The
// plugin's allocator (go-gpuallocator's best-effort policy) scores NVLinks
// to the peer GPU first, but on these boards every NVLink ends at an
// NVSwitch, so PCIe ancestry decides: a DGX A100's GPUs pair under a PCIe
// switch (PXB), a DGX H100's sit four to a CPU socket (NODE, SYS across).
var preferredTogether = map[string]struct {
	group func(int) int
	size  int
}{
	"a100": {func(i int) int { return i / 2 }, 2},
	"h100": {func(i int) int { return i / 4 }, 4},
}

// preferredAllocation asks the plugin where to place requests as the
// kubelet does before Allocate, and checks that the answer keeps the GPUs
// together as the board's topology says, from every GPU and from a few.
func preferredAllocation(t *testing.T, ctx context.Context, plugin pluginapi.DevicePluginClient, board string, res *hostprep.Result, log func() string) {
	t.Helper()
	together, ok := preferredTogether[board]
	if !ok || len(res.GPUs) < 8 {
		return
	}
	index := map[string]int{}
	var all []string
	for i, id := range res.GPUs {
		index[id.UUID] = i
		all = append(all, id.UUID)
	}
	ask := func(avail []int, size int) []int {
		t.Helper()
		var ids []string
		for _, i := range avail {
			ids = append(ids, res.GPUs[i].UUID)
		}
		pref, err := plugin.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{
			ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: ids, AllocationSize: int32(size)}},
		})
		if err != nil {
			t.Fatalf("GetPreferredAllocation: %v\n%s", err, log())
		}
		if len(pref.ContainerResponses) != 1 || len(pref.ContainerResponses[0].DeviceIDs) != size {
			t.Fatalf("GetPreferredAllocation of %d from GPUs %v: %v", size, avail, pref)
		}
		var got []int
		for _, id := range pref.ContainerResponses[0].DeviceIDs {
			i, ok := index[id]
			if !ok || !slices.Contains(ids, id) {
				t.Fatalf("GetPreferredAllocation of %d from GPUs %v offers %s, not one of them", size, avail, id)
			}
			got = append(got, i)
		}
		slices.Sort(got)
		t.Logf("GetPreferredAllocation of %d from GPUs %v: GPUs %v", size, avail, got)
		return got
	}
	// wholeGroups says whether GPUs make up whole groups, or lie in one.
	wholeGroups := func(gpus []int) bool {
		n := map[int]int{}
		for _, i := range gpus {
			n[together.group(i)]++
		}
		for _, k := range n {
			if k != together.size && len(n) > 1 {
				return false
			}
		}
		return true
	}
	// From every GPU, and from every GPU but the rest of GPU 0's group: an
	// allocator blind to topology takes GPU 0 in the second.
	var every, apart []int
	for i := range all {
		every = append(every, i)
		if i == 0 || together.group(i) != together.group(0) {
			apart = append(apart, i)
		}
	}
	for _, avail := range [][]int{every, apart} {
		for _, size := range []int{2, 4} {
			if got := ask(avail, size); !wholeGroups(got) {
				t.Errorf("GetPreferredAllocation of %d from GPUs %v gives GPUs %v: want them together (%s: groups of %d)", size, avail, got, board, together.size)
			}
		}
	}
}

// startDevicePlugin runs NVIDIA's device plugin dp with the node's driver
// root, for the stand-in kubelet, with flags added; it must end on SIGTERM
// when the test does. It returns the plugin's output and a channel closed
// when it exits.
func startDevicePlugin(t *testing.T, dp string, res *hostprep.Result, flags ...string) (*testenv.SyncBuffer, <-chan struct{}) {
	t.Helper()
	log := &testenv.SyncBuffer{}
	cmd := exec.Command(dp, append([]string{"--kubelet-socket", pluginapi.KubeletSocket,
		"--driver-root", res.Driver, "--dev-root", res.Driver}, flags...)...)
	cmd.Env = toolEnv(res)
	cmd.Stdout, cmd.Stderr = log, log
	// Should this process die first, the plugin must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the device plugin ignored SIGTERM for 15s:\n%s", log.String())
		}
	})
	return log, exited
}
