package nri

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	nriapi "github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/plugin/inject"
	"github.com/nvmock/nvmock/profile"
)

// wait bounds every wait in these tests.
const wait = 10 * time.Second

// installOverlay installs a 4-GPU overlay into a temporary root (device
// nodes need root) and returns the root. The plugin never loads the
// library, so without a build it uses stand-in assets.
func installOverlay(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to install an overlay with device nodes")
	}
	p, err := profile.Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	p.GPUs = 4
	root := filepath.Join(t.TempDir(), "var", "lib", "nvmock")
	install(t, root, p, "")
	return root
}

// installOverlayWithHook is installOverlay with a stand-in runtime hook:
// containers the plugin edits get it, and the tests play its part.
func installOverlayWithHook(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to install an overlay with device nodes")
	}
	p, err := profile.Builtin("a100")
	must(t, err)
	p.GPUs = 4
	hook := filepath.Join(t.TempDir(), "nvmock-hook")
	must(t, os.WriteFile(hook, []byte("#!/bin/true\n"), 0o755))
	root := filepath.Join(t.TempDir(), "var", "lib", "nvmock")
	install(t, root, p, hook)
	return root
}

// reinstall installs an overlay of n GPUs of a built-in profile over the one
// in root, which switches root/driver to it.
func reinstall(t *testing.T, root, name string, n int) {
	t.Helper()
	p, err := profile.Builtin(name)
	must(t, err)
	p.GPUs = n
	install(t, root, p, "")
}

func install(t *testing.T, root string, p *profile.Profile, hook string) {
	t.Helper()
	d := filepath.Dir(filepath.Dir(filepath.Dir(root)))
	_, err := hostprep.Install(hostprep.InstallOptions{
		Render:   hostprep.Options{Profile: p, NodeName: "nri-test-node", Assets: assets(t), Hook: hook},
		Root:     root,
		CDIDir:   filepath.Join(d, "cdi"),
		NFDDir:   filepath.Join(d, "nfd"),
		ProcRoot: filepath.Join(d, "proc"),
	})
	if err != nil {
		t.Fatalf("install: %v", err)
	}
}

// assets is the built driver tree when there is one, else stand-ins.
func assets(t *testing.T) string {
	t.Helper()
	d := filepath.Join(testenv.BuildDir(), "driver")
	_, e1 := os.Stat(filepath.Join(d, "usr", "lib64", "libnvidia-ml.so.1"))
	_, e2 := os.Stat(filepath.Join(d, "usr", "bin", "nvidia-smi"))
	if e1 == nil && e2 == nil {
		return d
	}
	// Review: the stand-ins lacked the umad shim a100's HCAs need.
	t.Logf("no built driver tree in %s; using stand-in assets", d)
	d = testenv.FakeDriverAssets(t)
	for _, name := range hostprep.MPSBinaries { // the build has them
		must(t, os.WriteFile(filepath.Join(d, "usr", "bin", name), []byte("#!/bin/sh\n"), 0o755))
	}
	return d
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLog is a logger that writes to the test's log.
func testLog(t *testing.T) *logrus.Entry {
	l := logrus.New()
	l.SetOutput(tWriter{t})
	l.SetLevel(logrus.InfoLevel)
	return logrus.NewEntry(l)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// runtime is an in-process NRI runtime (containerd/nri's adaptation) on a
// socket; running are the containers it reports at Synchronize.
type runtime struct {
	*nriapi.Adaptation
	running []*api.Container
}

func socketPath(t *testing.T) string {
	// Short: unix socket paths are limited to 108 bytes.
	d, err := os.MkdirTemp("", "nri")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "nri.sock")
}

func startRuntime(t *testing.T, sock string, running ...*api.Container) *runtime {
	t.Helper()
	rt := &runtime{running: running}
	dir := filepath.Dir(sock)
	r, err := nriapi.New("fake-runtime", "0.0.1",
		func(ctx context.Context, cb nriapi.SyncCB) error {
			_, err := cb(ctx, nil, rt.running)
			return err
		},
		func(context.Context, []*nriapi.ContainerUpdate) ([]*nriapi.ContainerUpdate, error) { return nil, nil },
		nriapi.WithSocketPath(sock), nriapi.WithPluginPath(filepath.Join(dir, "plugins")),
		nriapi.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	must(t, err)
	must(t, r.Start())
	rt.Adaptation = r
	return rt
}

// startPlugin runs a plugin until the test ends; it fails the test if Run
// does not return within the wait after cancellation.
func startPlugin(t *testing.T, opt Options) *Plugin {
	t.Helper()
	if opt.Log == nil {
		opt.Log = testLog(t)
	}
	opt.MinBackoff, opt.MaxBackoff = 10*time.Millisecond, 200*time.Millisecond
	p, err := New(opt)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return within %v of cancellation", wait)
		}
	})
	return p
}

// registered waits until the plugin synchronized with r and r listed it.
func registered(t *testing.T, p *Plugin, r *runtime) {
	t.Helper()
	select {
	case <-p.syncedC:
	case <-time.After(wait):
		t.Fatalf("plugin did not synchronize within %v", wait)
	}
	r.BlockPluginSync().Unblock() // returns once the runtime has added the plugin
}

func pod(ns, name string, ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: ns + "-" + name + "-id", Name: name, Uid: ns + "-" + name + "-uid", Namespace: ns, Annotations: ann}
}

func ctr(p *api.PodSandbox, id string, env ...string) *api.Container {
	return &api.Container{Id: id, PodSandboxId: p.Id, Name: "c-" + id, Env: env, State: api.ContainerState_CONTAINER_CREATED}
}

// create sends CreateContainer through the runtime, bounded by the wait.
func create(t *testing.T, r *runtime, p *api.PodSandbox, c *api.Container) *api.ContainerAdjustment {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	must(t, r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: p}))
	resp, err := r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: p, Container: c})
	if err != nil {
		t.Fatalf("CreateContainer %s/%s: %v", p.Namespace, c.Name, err)
	}
	return resp.GetAdjust()
}

// envOf is the adjustment's value of key.
func envOf(a *api.ContainerAdjustment, key string) (string, bool) {
	for _, kv := range a.GetEnv() {
		if kv.GetKey() == key {
			return kv.GetValue(), true
		}
	}
	return "", false
}

// untouched says the runtime's merged adjustment changes nothing.
func untouched(a *api.ContainerAdjustment) bool {
	return len(a.GetEnv()) == 0 && len(a.GetMounts()) == 0 && len(a.GetLinux().GetDevices()) == 0 &&
		len(a.GetLinux().GetResources().GetDevices()) == 0
}

// nodeUUIDs are the installed overlay's GPU UUIDs, in index order.
func nodeUUIDs(t *testing.T, root string) []string {
	t.Helper()
	n, err := inject.NodeStateFromOverlay(root)
	must(t, err)
	var out []string
	for _, g := range n.GPUs {
		out = append(out, g.UUID)
	}
	return out
}

// scrape reads the plugin's /metrics text.
func scrape(t *testing.T, p *Plugin) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return string(b)
}

// proxy forwards unix connections from listen to target. The in-process
// runtime's Stop leaves external plugins' connections open (a real runtime
// exits and the kernel closes them), so cut does that part of a restart.
type proxy struct {
	l      net.Listener
	mu     sync.Mutex
	conns  []net.Conn
	target string
}

func startProxy(t *testing.T, listen, target string) *proxy {
	t.Helper()
	l, err := net.Listen("unix", listen)
	must(t, err)
	px := &proxy{l: l, target: target}
	t.Cleanup(func() { l.Close(); px.cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", px.target)
			if err != nil {
				c.Close()
				continue
			}
			px.mu.Lock()
			px.conns = append(px.conns, c, u)
			px.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	return px
}

// cut closes every forwarded connection, as a runtime's exit does.
func (px *proxy) cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	for _, c := range px.conns {
		c.Close()
	}
	px.conns = nil
}

// adjust is create for tests that expect no refusal: a refusal is an
// adjustment the test did not expect, so it panics with the message.
func (p *Plugin) adjust(pod *api.PodSandbox, ctr *api.Container) *api.ContainerAdjustment {
	adj, err := p.create(pod, ctr)
	if err != nil {
		panic(fmt.Sprintf("refused: %v", err))
	}
	return adj
}
