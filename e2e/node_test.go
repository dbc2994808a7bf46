//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	cricli "github.com/nvmock/nvmock/internal/cri"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/plugin/inject"
)

// node is the running e2e node, as hack/e2e-node.sh up described it.
type node struct {
	env  map[string]string
	rt   cri.RuntimeServiceClient
	gpus []inject.GPU // the overlay's GPUs, from its snapshot
	smiL []string     // nvidia-smi -L on the host against the overlay: the truth
}

var theNode *node

func TestMain(m *testing.M) {
	n, err := connect()
	if err != nil {
		msg := "e2e: no e2e node (" + err.Error() + "); run make e2e, or hack/e2e-node.sh up as root"
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "SKIP:", msg)
		os.Exit(0)
	}
	theNode = n
	os.Exit(m.Run())
}

func connect() (*node, error) {
	dir := os.Getenv("NVMOCK_E2E_DIR")
	if dir == "" {
		dir = "/tmp/nvmock-e2e"
	}
	return connectDir(dir)
}

// connectDir connects to the node whose work dir is dir.
func connectDir(dir string) (*node, error) {
	env, err := testenv.ReadEnvFile(filepath.Join(dir, "e2e.env"))
	if err != nil {
		return nil, err
	}
	rt, _, err := cricli.Dial(env["CONTAINERD_SOCK"])
	if err != nil {
		return nil, err
	}
	n := &node{env: env, rt: rt}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := n.rt.Version(ctx, &cri.VersionRequest{}); err != nil {
		return nil, fmt.Errorf("CRI at %s: %w", env["CONTAINERD_SOCK"], err)
	}
	snap, err := os.ReadFile(filepath.Join(env["OVERLAY_ROOT"], "driver", "etc", "nvmock", "snapshot"))
	if err != nil {
		return nil, err
	}
	if n.gpus, err = inject.DecodeGPUs(snap); err != nil {
		return nil, err
	}
	out, err := exec.Command(env["NVIDIA_SMI"], "-L").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("nvidia-smi -L on the host: %v: %s", err, out)
	}
	n.smiL = testenv.Lines(string(out))
	return n, nil
}

// versionedLib is the overlay's library file, named after the driver
// version its profile reports: libnvidia-ml.so.<version>.
func (n *node) versionedLib(t testing.TB) string {
	t.Helper()
	libs, _ := filepath.Glob(filepath.Join(n.env["OVERLAY_ROOT"], "driver", "usr", "lib64", "libnvidia-ml.so.*.*"))
	if len(libs) != 1 {
		t.Fatalf("the overlay has %d versioned libraries (%v), want 1", len(libs), libs)
	}
	return filepath.Base(libs[0])
}

// driverVersion is the driver the overlay's profile reports, as its library's
// file name carries it.
func (n *node) driverVersion(t testing.TB) string {
	t.Helper()
	return strings.TrimPrefix(n.versionedLib(t), "libnvidia-ml.so.")
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

var seq atomic.Int64

// pod is one pod sandbox (host network: no CNI on this node).
type pod struct {
	id  string
	cfg *cri.PodSandboxConfig
}

// runPod starts a pod in namespace ns; it is stopped and removed at cleanup.
func (n *node) runPod(t testing.TB, ns string, annotations map[string]string) *pod {
	t.Helper()
	return n.runPodWith(t, ns, annotations, "")
}

// runPodWith starts a pod under a runtime handler ("" for runc).
func (n *node) runPodWith(t testing.TB, ns string, annotations map[string]string, handler string) *pod {
	t.Helper()
	return n.startPod(t, ns, annotations, handler, false)
}

// runPrivilegedPod starts a pod whose containers may be privileged.
func (n *node) runPrivilegedPod(t testing.TB, ns string) *pod {
	t.Helper()
	return n.startPod(t, ns, nil, "", true)
}

// runUserNSPod starts a pod with a user namespace of its own, as kubelet
// asks for one with hostUsers: false: container root is host uid 524288.
// Its handler's runc has idmapped mounts, which containerd needs for it
// (hack/e2e-node.sh).
func (n *node) runUserNSPod(t testing.TB, ns string, annotations map[string]string) *pod {
	t.Helper()
	ids := []*cri.IDMapping{{HostId: 524288, ContainerId: 0, Length: 65536}}
	return n.startPodWith(t, ns, annotations, "runc-userns", func(sc *cri.LinuxSandboxSecurityContext) {
		sc.NamespaceOptions.UsernsOptions = &cri.UserNamespace{Mode: cri.NamespaceMode_POD, Uids: ids, Gids: ids}
	})
}

func (n *node) startPod(t testing.TB, ns string, annotations map[string]string, handler string, privileged bool) *pod {
	t.Helper()
	return n.startPodWith(t, ns, annotations, handler, func(sc *cri.LinuxSandboxSecurityContext) { sc.Privileged = privileged })
}

func (n *node) startPodWith(t testing.TB, ns string, annotations map[string]string, handler string, security func(*cri.LinuxSandboxSecurityContext)) *pod {
	t.Helper()
	name := fmt.Sprintf("p%d-%d", os.Getpid(), seq.Add(1))
	cfg := &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: ns, Uid: name + "-uid"},
		LogDirectory: filepath.Join(n.env["POD_LOG_DIR"], name),
		Annotations:  annotations,
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE}}},
	}
	security(cfg.Linux.SecurityContext)
	r, err := n.rt.RunPodSandbox(ctx(t), &cri.RunPodSandboxRequest{Config: cfg, RuntimeHandler: handler})
	if err != nil {
		t.Fatalf("run pod in %s: %v", ns, err)
	}
	p := &pod{id: r.PodSandboxId, cfg: cfg}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, _ = n.rt.StopPodSandbox(c, &cri.StopPodSandboxRequest{PodSandboxId: p.id})
		_, _ = n.rt.RemovePodSandbox(c, &cri.RemovePodSandboxRequest{PodSandboxId: p.id})
	})
	return p
}

// ctr says what container to make: an image of IMAGE_PREFIX, its command and
// environment, and CDI devices asked for through CRI.
type ctr struct {
	image string // glibc, gonvml, busybox, static, musl, pciprobe
	cmd   []string
	env   map[string]string
	cdi   []string
	name  string // default: c<seq>
	// mounts and devices are asked of CRI directly.
	mounts     []cri.Mount
	devices    [][2]string // host path, container path
	privileged bool        // in a pod of runPrivilegedPod
}

func (n *node) create(t testing.TB, p *pod, c ctr) string {
	t.Helper()
	id, err := n.tryCreate(t, p, c)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// tryCreate creates a container; an error is the runtime's answer.
func (n *node) tryCreate(t testing.TB, p *pod, c ctr) (string, error) {
	t.Helper()
	if c.name == "" {
		c.name = fmt.Sprintf("c%d", seq.Add(1))
	}
	cfg := &cri.ContainerConfig{
		Metadata: &cri.ContainerMetadata{Name: c.name},
		Image:    &cri.ImageSpec{Image: n.env["IMAGE_PREFIX"] + c.image + ":local"},
		Command:  c.cmd,
		LogPath:  c.name + ".log",
		Linux:    &cri.LinuxContainerConfig{},
	}
	for k, v := range c.env {
		cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: k, Value: v})
	}
	for _, d := range c.cdi {
		cfg.CDIDevices = append(cfg.CDIDevices, &cri.CDIDevice{Name: d})
	}
	for i := range c.mounts {
		cfg.Mounts = append(cfg.Mounts, &c.mounts[i])
	}
	for _, d := range c.devices {
		cfg.Devices = append(cfg.Devices, &cri.Device{ContainerPath: d[1], HostPath: d[0], Permissions: "rwm"})
	}
	if c.privileged {
		cfg.Linux.SecurityContext = &cri.LinuxContainerSecurityContext{Privileged: true}
	}
	// kubelet gives each container its pod's user namespace.
	if u := p.cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u != nil {
		cfg.Linux.SecurityContext = &cri.LinuxContainerSecurityContext{NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, UsernsOptions: u}}
	}
	r, err := n.rt.CreateContainer(ctx(t), &cri.CreateContainerRequest{PodSandboxId: p.id, Config: cfg, SandboxConfig: p.cfg})
	if err != nil {
		return "", fmt.Errorf("create container %s (%s): %w", c.name, c.image, err)
	}
	return r.ContainerId, nil
}

// start creates and starts a container and returns its ID.
func (n *node) start(t testing.TB, p *pod, c ctr) string {
	t.Helper()
	id := n.create(t, p, c)
	if _, err := n.rt.StartContainer(ctx(t), &cri.StartContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("start container %s: %v", id, err)
	}
	return id
}

// result is what a container did: its output (stdout and stderr, in order)
// and exit code.
type result struct {
	out  string
	code int32
}

// run starts a container, waits for it to exit and removes it.
func (n *node) run(t testing.TB, p *pod, c ctr) result {
	t.Helper()
	id := n.start(t, p, c)
	code := n.wait(t, id)
	r := result{out: n.logs(t, id), code: code}
	_, _ = n.rt.RemoveContainer(ctx(t), &cri.RemoveContainerRequest{ContainerId: id})
	return r
}

// wait waits for a container to exit and returns its exit code.
func (n *node) wait(t testing.TB, id string) int32 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s, err := n.rt.ContainerStatus(ctx(t), &cri.ContainerStatusRequest{ContainerId: id})
		if err != nil {
			t.Fatalf("status of %s: %v", id, err)
		}
		if s.Status.State == cri.ContainerState_CONTAINER_EXITED {
			return s.Status.ExitCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s still %s after 60 s; output so far:\n%s", id, s.Status.State, n.logs(t, id))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logs reads what a container wrote, from its CRI log file.
func (n *node) logs(t testing.TB, id string) string {
	t.Helper()
	s, err := n.rt.ContainerStatus(ctx(t), &cri.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("status of %s: %v", id, err)
	}
	data, err := os.ReadFile(s.Status.LogPath)
	if err != nil && !os.IsNotExist(err) {
		t.Fatalf("log of %s: %v", id, err)
	}
	return cricli.Log(data)
}

// waitOutput waits until a running container has printed want.
func (n *node) waitOutput(t testing.TB, id, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := n.logs(t, id)
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("container %s did not print %q in 30 s; it printed:\n%s", id, want, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// spec is the OCI runtime spec containerd made for a container (CRI's
// verbose status), exactly as containerd serialised it.
func (n *node) spec(t testing.TB, id string) []byte {
	t.Helper()
	s, err := n.rt.ContainerStatus(ctx(t), &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("status of %s: %v", id, err)
	}
	var info struct {
		RuntimeSpec json.RawMessage `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(s.Info["info"]), &info); err != nil || len(info.RuntimeSpec) == 0 {
		t.Fatalf("no runtime spec in the verbose status of %s: %v", id, err)
	}
	return info.RuntimeSpec
}

// pid is a running container's process on the node (CRI's verbose status).
func (n *node) pid(t testing.TB, id string) uint32 {
	t.Helper()
	s, err := n.rt.ContainerStatus(ctx(t), &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatalf("status of %s: %v", id, err)
	}
	var info struct{ Pid uint32 }
	if err := json.Unmarshal([]byte(s.Info["info"]), &info); err != nil || info.Pid == 0 {
		t.Fatalf("no pid in the verbose status of %s: %v", id, err)
	}
	return info.Pid
}

// script runs hack/e2e-node.sh with args (plugin start, containerd restart...).
func (n *node) script(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command(n.env["NODE_SCRIPT"], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("e2e-node.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// pluginRunning makes sure the plugin runs when the test ends, whatever the
// test did to it, so later tests find the node as it was.
func (n *node) pluginRunning(t testing.TB) {
	t.Cleanup(func() {
		if !n.pluginReady() {
			out, err := exec.Command(n.env["NODE_SCRIPT"], "plugin", "start").CombinedOutput()
			if err != nil {
				t.Errorf("restart the plugin after the test: %v\n%s", err, out)
			}
		}
	})
}

func (n *node) pluginReady() bool {
	c := http.Client{Timeout: time.Second}
	r, err := c.Get(n.env["PLUGIN_URL"] + "/readyz")
	if err != nil {
		return false
	}
	r.Body.Close()
	return r.StatusCode == http.StatusOK
}

// uuid is the node's UUID of GPU i.
func (n *node) uuid(i int) string { return n.gpus[i].UUID }

// smiLine is nvidia-smi -L's line for node GPU i shown at index k.
func (n *node) smiLine(i, k int) string {
	_, rest, _ := strings.Cut(n.smiL[i], ": ")
	return fmt.Sprintf("GPU %d: %s", k, rest)
}

func itoa(i int) string { return fmt.Sprint(i) }

// exited says whether a container has exited.
func (n *node) exited(t testing.TB, id string) bool {
	s, err := n.rt.ContainerStatus(ctx(t), &cri.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatalf("status of %s: %v", id, err)
	}
	return s.Status.State == cri.ContainerState_CONTAINER_EXITED
}
