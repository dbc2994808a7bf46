package nri

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/plugin/inject"
)

func processes(t *testing.T, root string) []live.Process {
	t.Helper()
	f, err := live.Open(filepath.Join(root, hostprep.StateFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Read().Processes()
}

// hookReports plays the runtime hook's part for a container given adj:
// it writes pid to the pid file the plugin asked for, as the hook does.
func hookReports(t *testing.T, adj *api.ContainerAdjustment, pid int) {
	t.Helper()
	hooks := adj.GetHooks().GetCreateContainer()
	if len(hooks) != 1 || len(hooks[0].Args) != 6 {
		t.Fatalf("hooks %v, want the runtime hook asked for a pid file", hooks)
	}
	path := hooks[0].Args[5]
	must(t, os.WriteFile(path+".tmp", []byte(strconv.Itoa(pid)+"\n"), 0o644))
	must(t, os.Rename(path+".tmp", path))
}

// waitProcesses waits for the node to show n processes.
func waitProcesses(t *testing.T, root string, n int) []live.Process {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := processes(t, root)
		if len(got) == n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A pod that asks for it shows each GPU container as a process on its GPUs
// from the moment its runtime hook reports its pid until it stops; a bad
// size shows none and blocks nothing. No container's start waits for the
// plugin: it has no PostStartContainer.
func TestContainersShowAsGPUProcessesWhileTheyRun(t *testing.T) {
	if _, ok := any(handler{}).(stub.PostStartContainerInterface); ok {
		t.Error("the plugin handles PostStartContainer: containerd would wait for it at every container's start")
	}
	root := installOverlayWithHook(t)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"ml"}}})
	registered(t, p, r)
	ctx := context.Background()

	// A pid file left by a plugin before this one goes when the first is asked for.
	started := hostprep.StartedDir(filepath.Join(root, hostprep.StateFile))
	must(t, os.MkdirAll(started, 0o700))
	must(t, os.WriteFile(filepath.Join(started, "gone"), []byte("1\n"), 0o644))
	old := time.Now().Add(-2 * leftoverAge)
	must(t, os.Chtimes(filepath.Join(started, "gone"), old, old))
	// One just written is the other plugin's in a rolling update: it stays.
	must(t, os.WriteFile(filepath.Join(started, "theirs"), []byte("1\n"), 0o644))

	train := pod("ml", "train", map[string]string{inject.GPUMemoryAnnotation: "20GiB", inject.GPUsAnnotation: "2"})
	c := ctr(train, "c1")
	c.Args = []string{"python3", "train.py"}
	adj := create(t, r, train, c)
	if v, _ := envOf(adj, inject.VisibleDevicesEnv); v == "" {
		t.Fatalf("no GPUs given: %v", adj)
	}
	if got := processes(t, root); len(got) != 0 {
		t.Fatalf("before the container starts: %+v", got)
	}
	if _, err := os.Stat(filepath.Join(started, "gone")); !os.IsNotExist(err) {
		t.Errorf("a leftover pid file stayed: %v", err)
	}
	pid := os.Getpid() // any live pid
	hookReports(t, adj, pid)
	got := waitProcesses(t, root, 2)
	if len(got) != 2 || got[0].GPU != 0 || got[1].GPU != 1 {
		t.Fatalf("after start: %+v, want one process on each of GPUs 0 and 1", got)
	}
	for _, q := range got {
		if q.PID != uint32(pid) || q.UsedBytes != 20<<30 || q.Name != "python3" || q.Owner != "container:c1" || q.Type != 1 {
			t.Errorf("process %+v, want pid %d, 20 GiB, python3, owned by container:c1, compute", q, pid)
		}
	}
	if ents, _ := os.ReadDir(started); len(ents) != 1 || ents[0].Name() != "theirs" {
		t.Errorf("pid files %v left after registering, want only the other plugin's", ents)
	}

	bad := pod("ml", "bad", map[string]string{inject.GPUMemoryAnnotation: "lots"})
	b := ctr(bad, "c2")
	badAdj := create(t, r, bad, b)
	if v, _ := envOf(badAdj, inject.VisibleDevicesEnv); v == "" {
		t.Error("a bad gpu-memory annotation blocked the GPUs")
	}
	if h := badAdj.GetHooks().GetCreateContainer(); len(h) != 1 || len(h[0].Args) > 5 {
		t.Errorf("a bad annotation asked the hook for a pid: %v", h)
	}

	// A stop with nothing to remove (train's processes stay) leaves the
	// state as it was: no new generation for every reader to notice.
	state := filepath.Join(root, hostprep.StateFile)
	gen := live.Generation(state)
	_, err := r.StopContainer(ctx, &api.StopContainerRequest{Pod: bad, Container: b})
	must(t, err)
	must(t, r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: bad, Container: b}))
	if got := live.Generation(state); got != gen || len(processes(t, root)) != 2 {
		t.Errorf("a container without processes stopped and removed: state generation %d -> %d, want unchanged", gen, got)
	}

	_, err = r.StopContainer(ctx, &api.StopContainerRequest{Pod: train, Container: c})
	must(t, err)
	if got := processes(t, root); len(got) != 0 {
		t.Errorf("after stop: %+v", got)
	}

	// The directory removed (an uninstall, then an install): the next
	// container asking makes it again.
	must(t, os.RemoveAll(started))
	again := ctr(train, "c4")
	hookReports(t, create(t, r, train, again), pid)
	if got := waitProcesses(t, root, 2); len(got) != 2 || got[0].Owner != "container:c4" {
		t.Fatalf("after the pid files' directory went: %+v, want c4's two processes", got)
	}
	_, err = r.StopContainer(ctx, &api.StopContainerRequest{Pod: train, Container: again})
	must(t, err)

	// A container stopped before its pid came in shows nothing, and a pid
	// file the other plugin's hook writes (a rolling update's other pod)
	// stays for it (review: both plugins saw it, and the one that had not
	// asked could take it first).
	late := ctr(train, "c3")
	lateAdj := create(t, r, train, late)
	_, err = r.StopContainer(ctx, &api.StopContainerRequest{Pod: train, Container: late})
	must(t, err)
	hookReports(t, lateAdj, pid)
	must(t, os.WriteFile(filepath.Join(started, "theirs.tmp"), []byte("1\n"), 0o644))
	must(t, os.Rename(filepath.Join(started, "theirs.tmp"), filepath.Join(started, "theirs")))
	// A leftover from before a restart of this plugin goes at a later
	// report (review: it stayed for good).
	must(t, os.WriteFile(filepath.Join(started, "stale"), []byte("1\n"), 0o644))
	must(t, os.Chtimes(filepath.Join(started, "stale"), old, old))
	next := ctr(train, "c5")
	hookReports(t, create(t, r, train, next), pid) // its event comes after theirs
	if got := waitProcesses(t, root, 2); len(got) != 2 || got[0].Owner != "container:c5" || got[1].Owner != "container:c5" {
		t.Errorf("a pid reported after its container stopped: processes %+v, want c5's only", got)
	}
	if _, err := os.Stat(filepath.Join(started, "theirs")); err != nil {
		t.Errorf("the other plugin's pid file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(started, "stale")); !os.IsNotExist(err) {
		t.Errorf("a leftover pid file a minute old stayed: %v", err)
	}
}

// An overlay without the runtime hook (an older install) cannot show
// processes: the container gets its GPUs, and the plugin says why.
func TestProcessesNeedTheRuntimeHook(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	l := logrus.New()
	l.SetOutput(tWriter{t})
	logs := logtest.NewLocal(l)
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"ml"}}, Log: logrus.NewEntry(l)})
	registered(t, p, r)
	train := pod("ml", "train", map[string]string{inject.GPUMemoryAnnotation: "1GiB"})
	adj := create(t, r, train, ctr(train, "c1"))
	if v, _ := envOf(adj, inject.VisibleDevicesEnv); v == "" {
		t.Fatalf("no GPUs given: %v", adj)
	}
	var warned bool
	for _, e := range logs.AllEntries() {
		err, _ := e.Data[logrus.ErrorKey].(error)
		warned = warned || e.Message == "no GPU process shown for this container" && err != nil && strings.Contains(err.Error(), "no live state or runtime hook")
	}
	if !warned {
		t.Errorf("no warning that the overlay has no runtime hook: %v", logs.AllEntries())
	}
}

func TestProcessesComeFromTheAnnotation(t *testing.T) {
	adj := inject.Adjustment{GPUs: []int{1, 3}}
	for _, c := range []struct {
		name string
		ann  map[string]string
		args []string
		adj  inject.Adjustment
		want inject.ProcessRequest
		ok   bool
		err  string
	}{
		{"no annotation shows nothing", nil, nil, adj, inject.ProcessRequest{}, false, ""},
		{"a size in GiB, named by its command", map[string]string{inject.GPUMemoryAnnotation: "20GiB"}, []string{"/usr/bin/python3", "x"}, adj,
			inject.ProcessRequest{GPUs: []int{1, 3}, Bytes: 20 << 30, Name: "/usr/bin/python3"}, true, ""},
		{"bytes, named by the container without args", map[string]string{inject.GPUMemoryAnnotation: "1048576"}, nil, adj,
			inject.ProcessRequest{GPUs: []int{1, 3}, Bytes: 1 << 20, Name: "main"}, true, ""},
		{"a container without GPUs shows nothing", map[string]string{inject.GPUMemoryAnnotation: "1Gi"}, nil, inject.Adjustment{}, inject.ProcessRequest{}, false, ""},
		{"a bad size is an error", map[string]string{inject.GPUMemoryAnnotation: "20 GB"}, nil, adj, inject.ProcessRequest{}, false, `annotation nvmock.io/gpu-memory: "20 GB" is not a quantity`},
		{"on its first MIG device, not on their GPU", map[string]string{inject.GPUMemoryAnnotation: "4188Mi"}, nil, inject.Adjustment{GPUs: []int{1}, MIG: []int{1, 0}},
			inject.ProcessRequest{MIG: &inject.MIGRef{GPU: 1, GI: 13, CI: 0}, Bytes: 4188 << 20, Name: "main"}, true, ""},
		{"a MIG device the node does not have", map[string]string{inject.GPUMemoryAnnotation: "1Gi"}, nil, inject.Adjustment{GPUs: []int{1}, MIG: []int{5}},
			inject.ProcessRequest{}, false, "MIG device 5: the node has 2"},
	} {
		node := &inject.NodeState{MIG: []inject.MIGDevice{{GPU: 1, Index: 0, GI: 1, CI: 0}, {GPU: 1, Index: 1, GI: 13, CI: 0}}}
		got, ok, err := inject.Processes(inject.Pod{Annotations: c.ann}, inject.Container{Name: "main", Args: c.args}, c.adj, node)
		if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
		if ok != c.ok || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
