package nri

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/plugin/inject"
)

func TestPluginInjectsContainersThroughTheRuntime(t *testing.T) {
	root := installOverlay(t)
	uuids := nodeUUIDs(t, root)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"gpu-jobs"}}})
	registered(t, p, r)

	start := time.Now()
	jobs := pod("gpu-jobs", "train", nil)
	adj := create(t, r, jobs, ctr(jobs, "c1"))
	t.Logf("CreateContainer through the runtime: %v", time.Since(start))

	if v, _ := envOf(adj, inject.VisibleDevicesEnv); v != strings.Join(uuids, ",") {
		t.Errorf("%s = %q, want all four GPUs %q", inject.VisibleDevicesEnv, v, strings.Join(uuids, ","))
	}
	var dsts []string
	for _, m := range adj.GetMounts() {
		dsts = append(dsts, m.Destination)
		from := filepath.Join(root, "driver") + "/"
		if m.Destination == "/etc/nvmock/state" {
			from = filepath.Join(root, hostprep.StateFile)
		}
		if !slices.Contains(m.Options, "ro") || m.Type != "bind" || !strings.HasPrefix(m.Source, from) {
			t.Errorf("mount %s: source %s type %s options %v; want a read-only bind from the overlay", m.Destination, m.Source, m.Type, m.Options)
		}
	}
	slices.Sort(dsts)
	// The driver's programs, as NVIDIA's runtime mounts them: nvidia-smi
	// and the MPS control daemon and server.
	wantDsts := []string{"/etc/nvmock/snapshot", "/etc/nvmock/state", "/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-server",
		"/usr/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1"}
	if !slices.Equal(dsts, wantDsts) {
		t.Errorf("mounts %v, want %v", dsts, wantDsts)
	}
	var devs []string
	for _, d := range adj.GetLinux().GetDevices() {
		devs = append(devs, d.Path)
		if d.Type != "c" || d.GetFileMode().GetValue() != 0o666 {
			t.Errorf("device %s: type %q mode %o, want c 0666", d.Path, d.Type, d.GetFileMode().GetValue())
		}
	}
	wantDevs := []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
	if !slices.Equal(devs, wantDevs) {
		t.Errorf("devices %v, want %v", devs, wantDevs)
	}
	if rules := adj.GetLinux().GetResources().GetDevices(); len(rules) == 0 {
		t.Errorf("no device cgroup rules")
	} else {
		for _, rl := range rules {
			if !rl.Allow || rl.Access != "rwm" || rl.Major == nil || rl.Minor == nil {
				t.Errorf("device rule %v, want allow rwm with numbers", rl)
			}
		}
	}

	t.Run("a pod in a namespace not allowlisted is untouched", func(t *testing.T) {
		other := pod("default", "web", nil)
		if a := create(t, r, other, ctr(other, "c2")); !untouched(a) {
			t.Errorf("adjustment %v, want none", a)
		}
	})

	t.Run("counts spread later containers and Stop frees them", func(t *testing.T) {
		one := pod("gpu-jobs", "one", map[string]string{inject.GPUsAnnotation: "1"})
		// c1 holds all four; each of the next two gets the least used GPU.
		a3 := create(t, r, one, ctr(one, "c3"))
		a4 := create(t, r, one, ctr(one, "c4"))
		v3, _ := envOf(a3, inject.VisibleDevicesEnv)
		v4, _ := envOf(a4, inject.VisibleDevicesEnv)
		if v3 != uuids[0] || v4 != uuids[1] {
			t.Errorf("got %q then %q, want GPU 0 then GPU 1", v3, v4)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if _, err := r.StopContainer(ctx, &api.StopContainerRequest{Pod: one, Container: ctr(one, "c3")}); err != nil {
			t.Fatal(err)
		}
		a5 := create(t, r, one, ctr(one, "c5"))
		if v5, _ := envOf(a5, inject.VisibleDevicesEnv); v5 != uuids[0] {
			t.Errorf("after stopping c3, got %q, want GPU 0 again", v5)
		}
	})

	m := scrape(t, p)
	for _, want := range []string{
		`nvmock_nri_injections_total 4`,
		`nvmock_nri_skipped_total{reason="not_selected"} 1`,
		`nvmock_nri_decision_seconds_count 5`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, grep(m, "nvmock_nri_"))
		}
	}
}

// A container created the moment a reinstall has switched root/driver gets
// the new overlay's GPUs: the UUIDs its snapshot holds (with the old ones
// its nvmlInit fails).
func TestPluginProbesAgainWhenTheOverlaySwitches(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"*"}}})
	registered(t, p, r)
	jobs := pod("gpu-jobs", "train", nil)
	if n := len(create(t, r, jobs, ctr(jobs, "c0")).GetLinux().GetDevices()); n != 4+4 {
		t.Fatalf("%d devices, want 4 GPUs and 4 control nodes", n)
	}
	for i, next := range []struct {
		profile string
		gpus    int
	}{{"a100", 2}, {"h100", 2}, {"a100", 4}} {
		reinstall(t, root, next.profile, next.gpus)
		adj := create(t, r, jobs, ctr(jobs, fmt.Sprint("c", i+1)))
		want := strings.Join(nodeUUIDs(t, root), ",")
		if v, _ := envOf(adj, inject.VisibleDevicesEnv); v != want || len(adj.GetLinux().GetDevices()) != next.gpus+4 {
			t.Errorf("right after switching to %d %s GPUs: %s=%q and %d devices; want %q and %d", next.gpus, next.profile,
				inject.VisibleDevicesEnv, v, len(adj.GetLinux().GetDevices()), want, next.gpus+4)
		}
	}
}

func TestPluginRebuildsUseCountsAtSynchronize(t *testing.T) {
	root := installOverlay(t)
	uuids := nodeUUIDs(t, root)
	sock := socketPath(t)
	running := pod("gpu-jobs", "old", nil)
	r := startRuntime(t, sock,
		&api.Container{Id: "old1", PodSandboxId: running.Id, Name: "a", State: api.ContainerState_CONTAINER_RUNNING,
			Env: []string{inject.VisibleDevicesEnv + "=" + uuids[0] + "," + uuids[1]}, Annotations: injected},
		&api.Container{Id: "old2", PodSandboxId: running.Id, Name: "b", State: api.ContainerState_CONTAINER_RUNNING,
			Env: []string{inject.VisibleDevicesEnv + "=" + uuids[2]}, Annotations: injected},
		&api.Container{Id: "gone", PodSandboxId: running.Id, Name: "c", State: api.ContainerState_CONTAINER_STOPPED,
			Env: []string{inject.VisibleDevicesEnv + "=" + uuids[3]}, Annotations: injected},
		// Not nvmock's (a CUDA image elsewhere): holds none of these.
		&api.Container{Id: "cuda", PodSandboxId: running.Id, Name: "d", State: api.ContainerState_CONTAINER_RUNNING,
			Env: []string{inject.VisibleDevicesEnv + "=all"}})
	defer r.Stop()
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"*"}}})
	registered(t, p, r)

	one := pod("gpu-jobs", "one", map[string]string{inject.GPUsAnnotation: "1"})
	if v, _ := envOf(create(t, r, one, ctr(one, "new")), inject.VisibleDevicesEnv); v != uuids[3] {
		t.Errorf("got %q, want GPU 3, the only one no running container uses", v)
	}
}

func TestPluginReconnectsWhenTheRuntimeRestarts(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	// The plugin dials the proxy; the runtime listens behind it, so that a
	// restart can close the plugin's connection as a runtime's exit would.
	px := startProxy(t, filepath.Join(filepath.Dir(sock), "px.sock"), sock)
	r1 := startRuntime(t, sock)
	p := startPlugin(t, Options{Socket: px.l.Addr().String(), OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"gpu-jobs"}}})
	registered(t, p, r1)
	jobs := pod("gpu-jobs", "train", nil)
	if untouched(create(t, r1, jobs, ctr(jobs, "c1"))) {
		t.Fatal("first runtime: container untouched")
	}

	start := time.Now()
	r1.Stop()
	px.cut()
	r2 := startRuntime(t, sock) // the same socket path
	defer r2.Stop()
	registered(t, p, r2)
	t.Logf("re-registered %v after the runtime restarted", time.Since(start))
	if untouched(create(t, r2, jobs, ctr(jobs, "c2"))) {
		t.Error("second runtime: container untouched")
	}
	if !p.synced.Load() {
		t.Error("not ready after re-registering")
	}
}

func TestPluginFailsOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, root string, cfg *inject.Config)
		reason string
	}{
		{"a corrupt snapshot leaves containers untouched", func(t *testing.T, root string, _ *inject.Config) {
			must(t, os.WriteFile(filepath.Join(root, "driver", "etc", "nvmock", "snapshot"), []byte("garbage"), 0o644))
		}, reasonProbe},
		{"a missing device node leaves containers untouched", func(t *testing.T, root string, _ *inject.Config) {
			must(t, os.Remove(filepath.Join(root, "driver", "dev", "nvidiactl")))
		}, reasonProbe},
		{"a panic while deciding leaves containers untouched", func(t *testing.T, _ string, cfg *inject.Config) {
			cfg.Extensions = []inject.Extension{{Name: "boom", Apply: func(inject.Input, *inject.Adjustment) error { panic("boom") }}}
		}, reasonPanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := installOverlay(t)
			cfg := inject.Config{Namespaces: []string{"gpu-jobs"}}
			tc.break_(t, root, &cfg)
			sock := socketPath(t)
			r := startRuntime(t, sock)
			defer r.Stop()
			p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: cfg})
			registered(t, p, r)
			jobs := pod("gpu-jobs", "train", nil)
			if a := create(t, r, jobs, ctr(jobs, "c1")); !untouched(a) {
				t.Errorf("adjustment %v, want none", a)
			}
			if m := scrape(t, p); !strings.Contains(m, `nvmock_nri_errors_total{reason="`+tc.reason+`"} 1`) {
				t.Errorf("errors_total{reason=%q} is not 1:\n%s", tc.reason, grep(m, "nvmock_nri_errors_total"))
			}
		})
	}
}

func TestReadyzAndMetricsOverHTTP(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"gpu-jobs"}}})
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		c := &http.Client{Timeout: wait}
		resp, err := c.Get(srv.URL + path)
		must(t, err)
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz %d before registering, want 200", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not registered") {
		t.Errorf("/readyz %d %q before registering, want 503 not registered", code, body)
	}
	r := startRuntime(t, sock)
	defer r.Stop()
	registered(t, p, r)
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz %d %q once registered, want 200", code, body)
	}
	jobs := pod("gpu-jobs", "train", nil)
	create(t, r, jobs, ctr(jobs, "c1"))
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, "nvmock_nri_injections_total 1") || !strings.Contains(body, "nvmock_nri_decision_seconds_bucket") {
		t.Errorf("/metrics %d:\n%s", code, grep(body, "nvmock_nri_"))
	}

	must(t, os.Remove(filepath.Join(root, "driver")))
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "overlay") {
		t.Errorf("/readyz %d %q without the overlay, want 503 naming the overlay", code, body)
	}
}

func TestBadOptionsFailAtStart(t *testing.T) {
	for name, opt := range map[string]Options{
		"an empty namespace":      {Inject: inject.Config{Namespaces: []string{"a", ""}}},
		"a bad default request":   {Inject: inject.Config{DefaultGPUs: "lots"}},
		"a plugin index of three": {PluginIdx: "123"},
	} {
		if _, err := New(opt); err == nil {
			t.Errorf("%s: New accepted it", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
