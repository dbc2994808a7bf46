package nri

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

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

// A pod that asks for it shows each GPU container as a process on its GPUs
// from the moment it starts until it stops; a bad size shows none and
// blocks nothing.
func TestContainersShowAsGPUProcessesWhileTheyRun(t *testing.T) {
	root := installOverlay(t)
	sock := socketPath(t)
	r := startRuntime(t, sock)
	defer r.Stop()
	p := startPlugin(t, Options{Socket: sock, OverlayRoot: root, Inject: inject.Config{Namespaces: []string{"ml"}}})
	registered(t, p, r)
	ctx := context.Background()

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
	c.Pid = uint32(os.Getpid()) // any live pid
	must(t, r.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: train, Container: c}))
	got := processes(t, root)
	if len(got) != 2 || got[0].GPU != 0 || got[1].GPU != 1 {
		t.Fatalf("after start: %+v, want one process on each of GPUs 0 and 1", got)
	}
	for _, q := range got {
		if q.PID != c.Pid || q.UsedBytes != 20<<30 || q.Name != "python3" || q.Owner != "container:c1" || q.Type != 1 {
			t.Errorf("process %+v, want pid %d, 20 GiB, python3, owned by container:c1, compute", q, c.Pid)
		}
	}

	bad := pod("ml", "bad", map[string]string{inject.GPUMemoryAnnotation: "lots"})
	b := ctr(bad, "c2")
	if v, _ := envOf(create(t, r, bad, b), inject.VisibleDevicesEnv); v == "" {
		t.Error("a bad gpu-memory annotation blocked the GPUs")
	}
	b.Pid = uint32(os.Getpid())
	must(t, r.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: bad, Container: b}))
	if got := processes(t, root); len(got) != 2 {
		t.Errorf("a bad annotation registered %d processes", len(got)-2)
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
	} {
		got, ok, err := inject.Processes(inject.Pod{Annotations: c.ann}, inject.Container{Name: "main", Args: c.args}, c.adj)
		if (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.err)
		}
		if ok != c.ok || got.Bytes != c.want.Bytes || got.Name != c.want.Name || len(got.GPUs) != len(c.want.GPUs) {
			t.Errorf("%s: %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
