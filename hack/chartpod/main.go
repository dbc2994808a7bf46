// Command chartpod runs the Helm chart's pod on a CRI runtime without a
// cluster, as the kubelet would, so the e2e suite tests the shipped chart
// and image: hostprep install with exactly the arguments the chart renders,
// then the plugin container.
//
//	chartpod -cri SOCK -chart DIR -values FILE -node NAME -dir DIR up|start|stop|kill|down
//
// up runs the pod: init containers to completion (a sidecar, restartPolicy
// Always, only started), then the containers. stop and kill end the
// containers and sidecars (SIGTERM, SIGKILL); start starts them again in
// the same pod. down runs each running container's preStop hook, then the
// sidecars', as the kubelet does when the pod is deleted, then removes the
// pod; a failing hook fails down.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	cricli "github.com/nvmock/nvmock/internal/cri"
)

// state is what up leaves for the other subcommands.
type state struct {
	PodID      string            `json:"podID"`
	Containers map[string]string `json:"containers"` // name -> ID of the running ones
}

func main() {
	sock := flag.String("cri", "", "CRI socket")
	chart := flag.String("chart", "charts/nvmock", "chart directory")
	values := flag.String("values", "", "values file")
	node := flag.String("node", "", "node name (spec.nodeName)")
	dir := flag.String("dir", "", "work directory: ConfigMap files, logs, state")
	release := flag.String("release", "nvmock", "release name")
	ns := flag.String("namespace", "nvmock", "release namespace")
	flag.Parse()
	if *sock == "" || *node == "" || *dir == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: chartpod -cri SOCK -chart DIR -values FILE -node NAME -dir DIR up|start|stop|kill|down")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, flag.Arg(0), *sock, *chart, *values, *node, *dir, *release, *ns); err != nil {
		fmt.Fprintln(os.Stderr, "chartpod:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd, sock, chart, values, node, dir, release, ns string) error {
	// stop and kill need only the state; rendering is the slow part.
	var r *rendered
	if cmd != "stop" && cmd != "kill" {
		var err error
		if r, err = render(chart, values, release, ns); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	rt, conn, err := cricli.Dial(sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	p := &pod{r: r, node: node, dir: dir}
	statePath := filepath.Join(dir, "chartpod.json")

	var st state
	if cmd != "up" {
		data, err := os.ReadFile(statePath)
		if err != nil {
			return fmt.Errorf("%s: no pod (run up first): %w", cmd, err)
		}
		if err := json.Unmarshal(data, &st); err != nil {
			return err
		}
	}
	switch cmd {
	case "up":
		sb := p.sandboxConfig()
		resp, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: sb})
		if err != nil {
			return fmt.Errorf("run pod %s: %w", p.name(), err)
		}
		st = state{PodID: resp.PodSandboxId, Containers: map[string]string{}}
		if err := save(statePath, st); err != nil {
			return err
		}
		// As the kubelet: init containers in order, a sidecar's start
		// (restartPolicy Always) counting as its completion.
		for _, c := range r.ds.Spec.Template.Spec.InitContainers {
			cfg, err := p.containerConfig(c)
			if err != nil {
				return err
			}
			if sidecar(c) {
				id, err := createStart(ctx, rt, st.PodID, sb, cfg)
				if err != nil {
					return err
				}
				st.Containers[c.Name] = id
				continue
			}
			if err := runToCompletion(ctx, rt, st.PodID, sb, cfg); err != nil {
				return err
			}
		}
		err = startAll(ctx, rt, p, &st)
		if serr := save(statePath, st); err == nil {
			err = serr
		}
		return err
	case "start":
		err := startAll(ctx, rt, p, &st)
		if serr := save(statePath, st); err == nil {
			err = serr
		}
		return err
	case "stop", "kill":
		timeout := int64(10)
		if cmd == "kill" {
			timeout = 0
		}
		for name, id := range st.Containers {
			if _, err := rt.StopContainer(ctx, &cri.StopContainerRequest{ContainerId: id, Timeout: timeout}); err != nil {
				return fmt.Errorf("stop %s: %w", name, err)
			}
			if _, err := rt.RemoveContainer(ctx, &cri.RemoveContainerRequest{ContainerId: id}); err != nil {
				return fmt.Errorf("remove %s: %w", name, err)
			}
			delete(st.Containers, name)
		}
		return save(statePath, st)
	case "down":
		var errs []error
		// The containers' hooks first, then the sidecars', last started
		// first, as the kubelet stops them.
		stopping := slices.Clone(r.ds.Spec.Template.Spec.Containers)
		var sidecars []corev1.Container
		for _, c := range r.ds.Spec.Template.Spec.InitContainers {
			if sidecar(c) {
				sidecars = append(sidecars, c)
			}
		}
		slices.Reverse(sidecars)
		for _, c := range append(stopping, sidecars...) {
			id, ok := st.Containers[c.Name]
			if !ok || c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
				continue
			}
			res, err := rt.ExecSync(ctx, &cri.ExecSyncRequest{ContainerId: id, Cmd: c.Lifecycle.PreStop.Exec.Command, Timeout: 60})
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("preStop of %s: %w", c.Name, err))
			case res.ExitCode != 0:
				errs = append(errs, fmt.Errorf("preStop of %s exited %d: %s%s", c.Name, res.ExitCode, res.Stdout, res.Stderr))
			default:
				fmt.Printf("preStop of %s:\n%s%s", c.Name, res.Stdout, res.Stderr)
			}
		}
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: st.PodID}); err != nil {
			errs = append(errs, err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: st.PodID}); err != nil {
			errs = append(errs, err)
		}
		os.Remove(statePath)
		return errors.Join(errs...)
	}
	return fmt.Errorf("unknown subcommand %q: use up, start, stop, kill or down", cmd)
}

// sidecar says whether an init container runs beside the others
// (restartPolicy Always) rather than to completion.
func sidecar(c corev1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// longRunning are the pod's sidecars, then its containers.
func longRunning(spec corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range spec.InitContainers {
		if sidecar(c) {
			out = append(out, c)
		}
	}
	return append(out, spec.Containers...)
}

// startAll starts what does not run yet of the sidecars and containers
// (up started the sidecars already; start after stop starts them all).
func startAll(ctx context.Context, rt cri.RuntimeServiceClient, p *pod, st *state) error {
	sb := p.sandboxConfig()
	for _, c := range longRunning(p.r.ds.Spec.Template.Spec) {
		if _, running := st.Containers[c.Name]; running {
			if sidecar(c) {
				continue
			}
			return fmt.Errorf("container %s is already running", c.Name)
		}
		cfg, err := p.containerConfig(c)
		if err != nil {
			return err
		}
		id, err := createStart(ctx, rt, st.PodID, sb, cfg)
		if err != nil {
			return err
		}
		st.Containers[c.Name] = id
	}
	return nil
}

func save(path string, st state) error {
	data, _ := json.Marshal(st)
	return os.WriteFile(path, data, 0o644)
}
