package main

import (
	"bytes"
	"encoding/pem"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// installed installs an overlay with stand-in driver files into a temporary
// root and returns the root; uninstall's arguments name the same places.
func installed(t *testing.T) (root string, args []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to create device nodes")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // install labels no real node
	d := t.TempDir()
	root = filepath.Join(d, "var", "lib", "nvmock")
	args = []string{"--root=" + root, "--node-name=node-7"}
	var out, errs bytes.Buffer
	if err := hostprepRun(append([]string{"install", "--profile=a100", "--gpus=1", "--assets=" + testenv.FakeDriverAssets(t),
		"--cdi-dir=" + filepath.Join(d, "cdi"), "--nfd-dir=" + filepath.Join(d, "nfd")}, args...),
		&out, &errs, filepath.Join(d, "proc")); err != nil {
		t.Fatalf("install: %v\n%s", err, errs.String())
	}
	return root, args
}

func TestUninstallUnlessDaemonSetOutsideAClusterUninstalls(t *testing.T) {
	root, args := installed(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // no API server to ask
	var out, errs bytes.Buffer
	if err := hostprepRun(append([]string{"uninstall", "--unless-daemonset=nvmock/nvmock-default"}, args...), &out, &errs, ""); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, errs.String())
	}
	if !strings.HasPrefix(out.String(), "uninstalled from "+root) {
		t.Errorf("output %q, want uninstalled from %s", out.String(), root)
	}
	if _, err := os.Lstat(filepath.Join(root, "driver")); err == nil {
		t.Error("the driver symlink is still there")
	}
}

// An install a DaemonSet made, uninstalled by hand outside the cluster,
// says that its pods install again and the labels stay. Review: it said
// nothing of either.
func TestUninstallByHandOfAChartsInstallSaysWhatStays(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to create device nodes")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	d := t.TempDir()
	args := []string{"--root=" + filepath.Join(d, "root"), "--node-name=node-7"}
	var out, errs bytes.Buffer
	if err := hostprepRun(append([]string{"install", "--profile=a100", "--gpus=1", "--assets=" + testenv.FakeDriverAssets(t), "--owner=nvmock/nvmock-default",
		"--cdi-dir=" + filepath.Join(d, "cdi"), "--nfd-dir=" + filepath.Join(d, "nfd")}, args...), &out, &errs, filepath.Join(d, "proc")); err != nil {
		t.Fatalf("install: %v\n%s", err, errs.String())
	}
	out.Reset()
	if err := hostprepRun(append([]string{"uninstall"}, args...), &out, &errs, ""); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, errs.String())
	}
	if want := "DaemonSet nvmock/nvmock-default installed it: its next pod on this node installs again; the node's nvidia.com labels stay"; !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want %q", out.String(), want)
	}
}

// In a cluster (a stand-in API server: the real one cannot be made to fail
// on demand; hostprep's tests run Leaving against a real one): kept while
// the DaemonSet runs on the node; uninstalled, with a warning, when the API
// server fails.
func TestUninstallUnlessDaemonSetInACluster(t *testing.T) {
	// A DaemonSet whose hostprep installs into ROOT, or elsewhere.
	ds := func(root string) string {
		return `{"metadata":{},"spec":{"template":{"spec":{"initContainers":[{"name":"hostprep","args":["hostprep","install","--root=` + root + `","--cdi-dir=/var/run/cdi"]}]}}}}`
	}
	for _, c := range []struct {
		name    string
		status  int
		ds      string
		keep    bool
		stdout  string
		warning string
	}{
		{"a DaemonSet that still runs on the node keeps the overlay", http.StatusOK, `{"metadata":{},"spec":{"template":{"spec":{}}}}`, true,
			"kept the overlay in ROOT: DaemonSet nvmock/nvmock-default still runs on node node-7; its next pod installs over it\n", ""},
		{"a DaemonSet that installs into the same root keeps it", http.StatusOK, ds("ROOT"), true,
			"kept the overlay in ROOT", ""},
		// Found in review: a helm upgrade that moved overlayRoot left the old one.
		{"a DaemonSet that now installs elsewhere uninstalls here", http.StatusOK, ds("/var/lib/elsewhere"), false,
			"uninstalled from ROOT", "unless-daemonset: DaemonSet nvmock/nvmock-default now installs with --root=/var/lib/elsewhere, not ROOT"},
		{"an API error uninstalls with a warning", http.StatusInternalServerError, `{"metadata":{},"spec":{"template":{"spec":{}}}}`, false,
			"uninstalled from ROOT", "warning: cannot tell whether node node-7 leaves DaemonSet nvmock/nvmock-default, uninstalling: get DaemonSet nvmock/nvmock-default: an error on the server"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root, args := installed(t)
			var paths []string
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				paths = append(paths, r.Method+" "+r.URL.Path)
				w.Header().Set("Content-Type", "application/json")
				switch {
				case r.Header.Get("Authorization") != "Bearer secret":
					http.Error(w, "Unauthorized", http.StatusUnauthorized)
				case r.Method == http.MethodGet && r.URL.Path == "/apis/apps/v1/namespaces/nvmock/daemonsets/nvmock-default":
					w.WriteHeader(c.status)
					w.Write([]byte(strings.ReplaceAll(c.ds, "ROOT", root)))
				case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/node-7":
					w.Write([]byte("{}"))
				default:
					http.NotFound(w, r)
				}
			}))
			useAPIServer(t, srv, "secret")

			var out, errs bytes.Buffer
			if err := hostprepRun(append([]string{"uninstall", "--unless-daemonset=nvmock/nvmock-default"}, args...), &out, &errs, ""); err != nil {
				t.Fatalf("uninstall: %v\n%s", err, errs.String())
			}
			if want := strings.ReplaceAll(c.stdout, "ROOT", root); !strings.HasPrefix(out.String(), want) {
				t.Errorf("output %q, want %q", out.String(), want)
			}
			if w := strings.ReplaceAll(c.warning, "ROOT", root); w != "" && !strings.Contains(errs.String(), w) {
				t.Errorf("stderr lacks %q:\n%s", c.warning, errs.String())
			}
			_, err := os.Lstat(filepath.Join(root, "driver"))
			if kept := err == nil; kept != c.keep {
				t.Errorf("driver symlink there: %v, want %v (%v)", kept, c.keep, err)
			}
			wantPaths := []string{"GET /apis/apps/v1/namespaces/nvmock/daemonsets/nvmock-default"}
			if !c.keep {
				wantPaths = append(wantPaths, "PATCH /api/v1/nodes/node-7") // the labels go too
			}
			if strings.Join(paths, ",") != strings.Join(wantPaths, ",") {
				t.Errorf("requests %q, want %q", paths, wantPaths)
			}
		})
	}
}

func TestUninstallRejectsAMalformedDaemonSetWithOneLine(t *testing.T) {
	for _, v := range []string{"no-slash", "/name", "ns/", "a/b/c"} {
		err := hostprepRun([]string{"uninstall", "--root=" + t.TempDir(), "--unless-daemonset=" + v}, &bytes.Buffer{}, &bytes.Buffer{}, "")
		if err == nil || !strings.Contains(err.Error(), "--unless-daemonset") || !strings.Contains(err.Error(), "NAMESPACE/NAME") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: got %v, want one line naming --unless-daemonset", v, err)
		}
	}
}

// hostprep wait, the chart's uninstall container's main process, returns on
// SIGTERM (the kubelet's stop, after the preStop) with no error.
func TestHostprepWaitReturnsOnSIGTERM(t *testing.T) {
	// The test's own handler keeps a SIGTERM that arrives before hostprep
	// wait's from ending the test binary (a Go program always catches
	// SIGTERM, so SigCgt cannot tell when wait's handler is in): the
	// signal is sent until wait returns.
	keep := make(chan os.Signal, 16)
	signal.Notify(keep, syscall.SIGTERM)
	defer signal.Stop(keep)
	done := make(chan error, 1)
	go func() { done <- hostprepRun([]string{"wait"}, io.Discard, io.Discard, "") }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("hostprep wait: %v", err)
			}
			return
		case <-tick.C:
			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("hostprep wait did not return within 5 s of SIGTERM")
		}
	}
}

func TestHostprepPreDeleteNeedsItsDaemonSetsAndACluster(t *testing.T) {
	for _, c := range []struct{ args, want string }{
		{"", "hostprep pre-delete: need --daemonset NAMESPACE/NAME"},
		{"--daemonset nvmock", `invalid value "nvmock" for flag -daemonset: want NAMESPACE/NAME`},
		{"--daemonset nvmock/a/b", `invalid value "nvmock/a/b" for flag -daemonset: want NAMESPACE/NAME`},
		{"--daemonset nvmock/nvmock-default", "hostprep pre-delete: not in a cluster: it runs as the chart's pre-delete hook"},
	} {
		t.Run(c.args, func(t *testing.T) {
			args := append([]string{"pre-delete"}, strings.Fields(c.args)...)
			err := hostprepRun(args, io.Discard, io.Discard, "")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("hostprep %s: %v, want %q", strings.Join(args, " "), err, c.want)
			}
		})
	}
}

func TestFabricSlotsPlaceNamedNodes(t *testing.T) {
	for _, tc := range []struct {
		name, node, list string
		def, want        int
		err              string
	}{
		{"a named node takes its slot", "b", "a=0,b=3", -1, 3, ""},
		{"a node not named keeps the default", "c", "a=0,b=3", 5, 5, ""},
		{"no list keeps the default", "c", "", -1, -1, ""},
		{"two nodes on one slot are refused", "a", "a=1,b=1", -1, 0, "nodes a and b both take slot 1"},
		{"a slot must be a number from 0", "a", "a=x", -1, 0, `"a=x" is not NODE=SLOT`},
		{"a negative slot is refused", "a", "a=-2", -1, 0, `"a=-2" is not NODE=SLOT`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slotOf(tc.node, tc.list, tc.def)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("slot %d (%v), want %d", got, err, tc.want)
			}
		})
	}
}

// A host with no node name of its own (no --node-name, no NODE_NAME) gets
// the UUIDs that exec, profile show and the library give it: from
// /etc/machine-id, not from the hostname as before.
func TestInstallWithoutANodeNameTakesTheLibrarysSeed(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to create device nodes")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("NODE_NAME", "")
	os.Unsetenv("NODE_NAME")
	seed, err := snapshot.NodeSeed()
	if err != nil {
		testenv.Missing(t, "/etc/machine-id")
	}
	d := t.TempDir()
	var out, errs bytes.Buffer
	if err := hostprepRun([]string{"install", "--profile=a100", "--gpus=1", "--assets=" + testenv.FakeDriverAssets(t), "--root=" + filepath.Join(d, "root"),
		"--cdi-dir=" + filepath.Join(d, "cdi"), "--nfd-dir=" + filepath.Join(d, "nfd")}, &out, &errs, filepath.Join(d, "proc")); err != nil {
		t.Fatalf("install: %v\n%s", err, errs.String())
	}
	spec, err := os.ReadFile(filepath.Join(d, "cdi", "nvmock.io-gpu.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := snapshot.UUID("a100", seed, 0); !strings.Contains(string(spec), want) {
		t.Errorf("the CDI spec lacks %s, GPU 0's UUID under exec:\n%s", want, spec)
	}
}

// An install killed anywhere (SIGKILL; Go runs no defers on SIGTERM or
// Ctrl-C either) leaves nothing that uninstall misses: its staged CDI spec
// and NFD file, renders, the live state and the directories it made. Found
// in review: each killed install left a staged spec that nothing removed,
// a killed first install left no manifest, so uninstall did nothing, and a
// killed install to new directories left them.
func TestAKilledInstallLeavesNothingUninstallMisses(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to create device nodes")
	}
	bin := filepath.Join(testenv.BuildDir(), "bin", "nvmock")
	if _, err := os.Stat(bin); err != nil {
		testenv.Missing(t, "%s (run make build)", bin)
	}
	assets := testenv.FakeDriverAssets(t)
	// An install takes about 1 s here: the kills land before, while and after
	// the spec is staged, the overlay rendered and the driver switched.
	for _, after := range []time.Duration{20, 300, 800} {
		// First install; over another; over another, to other directories.
		for _, mode := range []string{"first", "over", "moved"} {
			d := t.TempDir()
			args := func(profile, cdi string) []string {
				return []string{"hostprep", "install", "--profile", profile, "--gpus", "64", "--node-name", "n1", "--assets", assets,
					"--root", filepath.Join(d, "root"), "--cdi-dir", filepath.Join(d, cdi), "--nfd-dir", filepath.Join(d, cdi, "nfd")}
			}
			if mode != "first" {
				if out, err := exec.Command(bin, args("b200", "cdi")...).CombinedOutput(); err != nil {
					t.Fatalf("install: %v\n%s", err, out)
				}
			}
			cdi := "cdi"
			if mode == "moved" {
				cdi = "cdi2/sub"
			}
			cmd := exec.Command(bin, args("gb300", cdi)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(after * time.Millisecond)
			cmd.Process.Kill()
			cmd.Wait()
			if out, err := exec.Command(bin, "hostprep", "uninstall", "--root", filepath.Join(d, "root")).CombinedOutput(); err != nil {
				t.Fatalf("uninstall after a kill at %d ms: %v\n%s", after, err, out)
			}
			var left []string
			filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
				if p == d {
					return nil
				}
				rel := strings.TrimPrefix(p, d+"/")
				left = append(left, rel)
				if e != nil && e.IsDir() && strings.Count(rel, "/") >= 2 {
					return fs.SkipDir // the name says enough
				}
				return nil
			})
			if len(left) > 0 {
				t.Errorf("install killed at %d ms (%s), then uninstall: left %v", after, mode, left)
			}
		}
	}
}

// A pool pod leaving a node where install did nothing (the DaemonSet gone)
// leaves the node's nvidia.com labels where a real NVIDIA driver is
// loaded: they are GFD's there (review: they were removed). Where none is,
// it removes them, as an uninstall that could not left them.
func TestUninstallWithNothingInstalledLeavesARealGPUNodesLabels(t *testing.T) {
	for _, real := range []bool{true, false} {
		var paths []string
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			paths = append(paths, r.Method+" "+r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/nodes/gpu-node":
				w.Write([]byte("{}"))
			default:
				http.NotFound(w, r) // the DaemonSet is gone
			}
		}))
		useAPIServer(t, srv, "")
		proc := filepath.Join(t.TempDir(), "proc")
		if real {
			if err := os.MkdirAll(filepath.Join(proc, "driver", "nvidia"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var out, errs bytes.Buffer
		err := hostprepRun([]string{"uninstall", "--root=" + t.TempDir(), "--node-name=gpu-node", "--unless-daemonset=nvmock/nvmock-default"}, &out, &errs, proc)
		if err != nil {
			t.Fatalf("real driver %v: uninstall: %v\n%s", real, err, errs.String())
		}
		patched := strings.Contains(strings.Join(paths, ","), "PATCH /api/v1/nodes/gpu-node")
		if patched == real {
			t.Errorf("real driver %v: requests %q (labels removed: %v); output %q", real, paths, patched, out.String())
		}
		if real && !strings.Contains(out.String(), "labels are left, as a real NVIDIA driver is loaded") {
			t.Errorf("output %q does not say why the labels stay", out.String())
		}
	}
}

// A pool's DaemonSet whose pod cannot end (its node NotReady) does not
// fail the pre-delete hook, which would fail helm uninstall (review): it
// warns and goes on to the next.
func TestPreDeleteGoesOnPastADaemonSetStillEnding(t *testing.T) {
	var paths []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/daemonsets/stuck"):
			// Deleting, never gone.
			w.Write([]byte(`{"metadata":{"name":"stuck","deletionTimestamp":"2026-12-07T00:00:00Z"}}`))
		default:
			http.NotFound(w, r) // gone at once
		}
	}))
	useAPIServer(t, srv, "")
	var out, errs bytes.Buffer
	err := hostprepRun([]string{"pre-delete", "--daemonset", "nvmock/stuck", "--daemonset", "nvmock/other", "--timeout", "1s"}, &out, &errs, "")
	if err != nil {
		t.Fatalf("pre-delete: %v, want a warning and no error\n%s", err, errs.String())
	}
	if !strings.Contains(errs.String(), "warning: DaemonSet nvmock/stuck is still being deleted") {
		t.Errorf("stderr %q lacks the warning", errs.String())
	}
	if !strings.Contains(strings.Join(paths, ","), "DELETE /apis/apps/v1/namespaces/nvmock/daemonsets/other") {
		t.Errorf("requests %q: the second DaemonSet was not deleted", paths)
	}
}

// With --after-plugin, a leaving pod's uninstall waits until its plugin
// no longer listens (a sidecar's preStop runs beside the plugin's end,
// KEP-753; review: the overlay went while the plugin still injected).
func TestUninstallWaitsForThePluginToStop(t *testing.T) {
	root, args := installed(t)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	closed := make(chan time.Time, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		closed <- time.Now() // before: the wait cannot end earlier
		l.Close()
	}()
	var out, errs bytes.Buffer
	if err := hostprepRun(append([]string{"uninstall", "--after-plugin=" + l.Addr().String()}, args...), &out, &errs, ""); err != nil {
		t.Fatalf("uninstall: %v\n%s", err, errs.String())
	}
	done := time.Now()
	if at := <-closed; done.Before(at) {
		t.Errorf("uninstalled at %v, before the plugin stopped listening at %v", done, at)
	}
	if _, err := os.Lstat(filepath.Join(root, "driver")); err == nil {
		t.Error("the driver symlink is still there")
	}
}

// useAPIServer makes commands run against srv, a stand-in API server, as
// in a cluster, with token (none: ""), until the test ends; it closes srv
// then.
func useAPIServer(t *testing.T, srv *httptest.Server, token string) {
	t.Helper()
	saved := inClusterClient
	t.Cleanup(func() { inClusterClient = saved; srv.Close() })
	inClusterClient = func() (*hostprep.KubeClient, bool, error) {
		c, err := hostprep.NewKubeClient(&rest.Config{Host: srv.URL, BearerToken: token,
			TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})}})
		return c, true, err
	}
}
