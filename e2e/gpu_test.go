//go:build e2e

package e2e

import (
	"encoding/json"
	"encoding/xml"
	"os/exec"
	"slices"
	"strings"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nvmock/nvmock/internal/testenv"
)

// Namespaces of the node: the plugin injects the first (hack/e2e-node.sh
// allowlists it), never the second.
const (
	optedIn = "nvmock-e2e"
	plain   = "nvmock-e2e-plain"
)

func TestUnmodifiedGlibcContainerListsTheNodesGPUs(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}})
	if r.code != 0 {
		t.Fatalf("nvidia-smi -L exited %d:\n%s", r.code, r.out)
	}
	if got := testenv.Lines(r.out); !slices.Equal(got, n.smiL) {
		t.Errorf("nvidia-smi -L in the container:\n%s\nwant what the node shows:\n%s", r.out, strings.Join(n.smiL, "\n"))
	}
}

// smiLog is the part of nvidia-smi -q -x the tests read.
type smiLog struct {
	Driver string `xml:"driver_version"`
	Count  int    `xml:"attached_gpus"`
	GPUs   []struct {
		ID      string `xml:"id,attr"`
		Product string `xml:"product_name"`
		UUID    string `xml:"uuid"`
		Minor   string `xml:"minor_number"`
	} `xml:"gpu"`
}

func TestUnmodifiedGlibcContainerQueriesEveryGPU(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-q", "-x"}})
	if r.code != 0 {
		t.Fatalf("nvidia-smi -q -x exited %d:\n%s", r.code, r.out)
	}
	var log smiLog
	if err := xml.Unmarshal([]byte(r.out), &log); err != nil {
		t.Fatalf("nvidia-smi -q -x printed no XML: %v\n%s", err, r.out)
	}
	if want := n.driverVersion(t); log.Driver != want || log.Count != len(n.gpus) || len(log.GPUs) != len(n.gpus) {
		t.Fatalf("driver %q, attached_gpus %d, %d <gpu> elements; want %s and %d GPUs", log.Driver, log.Count, len(log.GPUs), want, len(n.gpus))
	}
	for i, g := range log.GPUs {
		if g.UUID != n.uuid(i) || !strings.Contains(n.smiL[i], g.Product) || g.Minor != itoa(i) {
			t.Errorf("GPU %d: uuid %s, product %q, minor %s; want %s, the product in %q, minor %d", i, g.UUID, g.Product, g.Minor, n.uuid(i), n.smiL[i], i)
		}
	}
}

// probe is what e2e/images/nvmlprobe prints.
type probe struct {
	Driver string `json:"driver"`
	Count  int    `json:"count"`
	GPUs   []struct {
		Index int    `json:"index"`
		UUID  string `json:"uuid"`
		Name  string `json:"name"`
		Minor int    `json:"minor"`
	} `json:"gpus"`
}

func runProbe(t *testing.T, p *pod, cmd []string) probe {
	t.Helper()
	r := theNode.run(t, p, ctr{image: "gonvml", cmd: cmd})
	if r.code != 0 {
		t.Fatalf("the go-nvml probe exited %d:\n%s", r.code, r.out)
	}
	var pr probe
	if err := json.Unmarshal([]byte(r.out), &pr); err != nil {
		t.Fatalf("the go-nvml probe printed no JSON: %v\n%s", err, r.out)
	}
	return pr
}

func TestGoNVMLProgramInAnotherContainerSeesTheSameGPUs(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	pr := runProbe(t, p, nil) // the image's own entrypoint
	if want := n.driverVersion(t); pr.Driver != want || pr.Count != len(n.gpus) {
		t.Fatalf("driver %q, %d GPUs; want %s and %d", pr.Driver, pr.Count, want, len(n.gpus))
	}
	for i, g := range pr.GPUs {
		if g.UUID != n.uuid(i) || g.Minor != i || !strings.Contains(n.smiL[i], g.Name) {
			t.Errorf("GPU %d: %+v; want UUID %s, minor %d, the name in %q", i, g, n.uuid(i), i, n.smiL[i])
		}
	}
}

func TestVisibleDevicesUUIDShowsExactlyThatGPUAsIndexZero(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"},
		env: map[string]string{"NVIDIA_VISIBLE_DEVICES": n.uuid(3)}})
	if want := n.smiLine(3, 0); strings.TrimSpace(r.out) != want || r.code != 0 {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=<GPU 3's UUID>: nvidia-smi -L exited %d and printed:\n%s\nwant only:\n%s", r.code, r.out, want)
	}
}

// A pod with a user namespace of its own (hostUsers: false) runs
// nvidia-smi on the GPU it was given. runc cannot make device nodes there
// and binds each from the same path on the host, where a mock node has
// none (review: such a container was never created); the plugin binds the
// overlay's.
func TestAUserNamespacedPodRunsNvidiaSMI(t *testing.T) {
	n := theNode
	p := n.runUserNSPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "cat /proc/self/uid_map; nvidia-smi -L"},
		env: map[string]string{"NVIDIA_VISIBLE_DEVICES": n.uuid(2)}})
	lines := testenv.Lines(r.out)
	if r.code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "0 524288 65536" || lines[1] != n.smiLine(2, 0) {
		t.Errorf("a user-namespaced container given GPU 2: exit %d\n%s\nwant its uid map (0 524288 65536), then only:\n%s", r.code, r.out, n.smiLine(2, 0))
	}
}

// NVIDIA's device plugin with deviceListStrategy volume-mounts names the
// GPUs it allocates as /dev/null mounts under
// /var/run/nvidia-container-devices, and NVIDIA_VISIBLE_DEVICES that
// directory: the container gets those GPUs, as from NVIDIA's runtime
// accepting device lists as volume mounts.
func TestADevicePluginsVolumeMountsListGivesItsGPUs(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	var mounts []cri.Mount
	for _, name := range []string{n.uuid(4), "1"} {
		mounts = append(mounts, cri.Mount{HostPath: "/dev/null", ContainerPath: "/var/run/nvidia-container-devices/" + name, Readonly: true})
	}
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}, mounts: mounts,
		env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}})
	if want := n.smiLine(1, 0) + "\n" + n.smiLine(4, 1); strings.TrimSpace(r.out) != want || r.code != 0 {
		t.Errorf("GPUs 4 and 1 as volume mounts: nvidia-smi -L exited %d and printed:\n%s\nwant:\n%s", r.code, r.out, want)
	}
}

// A privileged container given one GPU sees every GPU, as the host's /dev
// shows them to it on a real node; NVIDIA_VISIBLE_DEVICES names its own.
func TestAPrivilegedContainerSeesEveryGPU(t *testing.T) {
	n := theNode
	p := n.runPrivilegedPod(t, optedIn)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "nvidia-smi -L; echo $NVIDIA_VISIBLE_DEVICES"}, privileged: true,
		env: map[string]string{"NVIDIA_VISIBLE_DEVICES": n.uuid(3)}})
	lines := testenv.Lines(r.out)
	if r.code != 0 || len(lines) != len(n.gpus)+1 || len(uuidsListed(r.out)) != len(n.gpus) || lines[len(lines)-1] != n.uuid(3) {
		t.Errorf("a privileged container given GPU 3: exit %d\n%s\nwant all %d GPUs, then GPU 3's UUID", r.code, r.out, len(n.gpus))
	}
}

// uuidsListed are the UUIDs in nvidia-smi -L output, in order.
func uuidsListed(out string) []string {
	var ids []string
	for _, l := range testenv.Lines(out) {
		if _, rest, ok := strings.Cut(l, "(UUID: "); ok {
			ids = append(ids, strings.TrimSuffix(rest, ")"))
		}
	}
	return ids
}

func TestGPUCountAnnotationGivesTwoContainersDisjointGPUs(t *testing.T) {
	n := theNode
	var got [2][]string
	for k := range got {
		p := n.runPod(t, optedIn, map[string]string{"nvmock.io/gpus": "2"})
		id := n.start(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "nvidia-smi -L; echo done; exec sleep 600"}})
		got[k] = uuidsListed(n.waitOutput(t, id, "done\n"))
		if len(got[k]) != 2 {
			t.Fatalf("container %d with nvmock.io/gpus=2 lists %d GPUs: %v", k, len(got[k]), got[k])
		}
	}
	for _, u := range got[0] {
		if slices.Contains(got[1], u) {
			t.Errorf("both running containers got GPU %s: %v and %v", u, got[0], got[1])
		}
	}
}

// A request the node cannot meet fails the container's start with its
// reason, where NVIDIA's runtime fails a device it cannot resolve (runc
// create); in a namespace that did not opt in, the same container runs.
func TestARequestTheNodeCannotMeetFailsTheContainersStart(t *testing.T) {
	n := theNode
	bad := ctr{image: "glibc", cmd: []string{"true"}, env: map[string]string{"NVIDIA_VISIBLE_DEVICES": "99"}}
	id, err := n.tryCreate(t, n.runPod(t, optedIn, nil), bad)
	if err != nil {
		t.Fatalf("NVIDIA_VISIBLE_DEVICES=99: created? %v; want created, then its start failed", err)
	}
	_, err = n.rt.StartContainer(ctx(t), &cri.StartContainerRequest{ContainerId: id})
	if err == nil || !strings.Contains(err.Error(), `nvmock: pod `) || !strings.Contains(err.Error(), `names index "99"; the node has GPUs`) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=99 on a node of %d GPUs: start %v; want it failed with the reason", len(n.gpus), err)
	}
	if _, err := n.tryCreate(t, n.runPod(t, plain, nil), bad); err != nil {
		t.Errorf("the same container where nobody opted in: %v", err)
	}
}

func TestGPUsAnnotationNoneShowsNoDevices(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, map[string]string{"nvmock.io/gpus": "none"})
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi"}})
	if !strings.Contains(r.out, "No devices were found") {
		t.Errorf("nvmock.io/gpus=none: nvidia-smi exited %d and printed:\n%s\nwant \"No devices were found\"", r.code, r.out)
	}
}

// A program that clears its environment still finds nvidia-smi on the
// default PATH and libnvidia-ml.so.1 by name: nothing rests on LD_* or PATH.
func TestClearedEnvironmentStillFindsNvidiaSMIAndTheLibrary(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"env", "-i", "/bin/sh", "-c", "nvidia-smi -L"}})
	if got := testenv.Lines(r.out); r.code != 0 || !slices.Equal(got, n.smiL) {
		t.Errorf("env -i sh -c 'nvidia-smi -L' exited %d:\n%s\nwant:\n%s", r.code, r.out, strings.Join(n.smiL, "\n"))
	}
	pr := runProbe(t, p, []string{"env", "-i", "/usr/local/bin/nvmlprobe"})
	if pr.Count != len(n.gpus) || pr.GPUs[0].UUID != n.uuid(0) {
		t.Errorf("env -i nvmlprobe: %d GPUs, first %+v; want %d, first %s", pr.Count, pr.GPUs, len(n.gpus), n.uuid(0))
	}
}

// Only a privileged container changes the node's settings, as on a real
// node, where the driver asks for CAP_SYS_ADMIN: NVIDIA's MPS daemon sets
// EXCLUSIVE_PROCESS so. Another gets Insufficient Permissions, and the node
// keeps its mode.
func TestOnlyAPrivilegedContainerChangesTheComputeMode(t *testing.T) {
	n := theNode
	t.Cleanup(func() { _ = exec.Command(n.env["NVIDIA_SMI"], "-i", "2", "-c", "DEFAULT").Run() })
	mode := func() string {
		return n.smi(t, "-i", "2", "--query-gpu=compute_mode", "--format=csv,noheader")
	}
	all := map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}
	set := []string{"sh", "-c", "nvidia-smi -i 2 -c EXCLUSIVE_PROCESS"}
	r := n.run(t, n.runPod(t, optedIn, nil), ctr{image: "glibc", cmd: set, env: all})
	if r.code == 0 || !strings.Contains(r.out, "Insufficient Permissions") {
		t.Errorf("a container that is not privileged: exit %d\n%s\nwant Insufficient Permissions", r.code, r.out)
	}
	if m := mode(); m != "Default\n" {
		t.Errorf("after the refused container, GPU 2's compute mode is %q", m)
	}
	r = n.run(t, n.runPrivilegedPod(t, optedIn), ctr{image: "glibc", cmd: set, env: all, privileged: true})
	if r.code != 0 || !strings.Contains(r.out, "Set compute mode to EXCLUSIVE_PROCESS") {
		t.Errorf("a privileged container: exit %d\n%s", r.code, r.out)
	}
	if m := mode(); m != "Exclusive_Process\n" {
		t.Errorf("after the privileged container, GPU 2's compute mode is %q, want Exclusive_Process", m)
	}
}

// A privileged container resets a GPU as NVIDIA's fault remediation does
// (persistence off, then nvidia-smi -r); another container is refused with
// Insufficient Permissions, as the driver refuses one without
// CAP_SYS_ADMIN.
func TestOnlyAPrivilegedContainerResetsAGPU(t *testing.T) {
	n := theNode
	t.Cleanup(func() { _ = exec.Command(n.env["NVIDIA_SMI"], "-i", "6", "-pm", "1").Run() })
	all := map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}
	reset := []string{"sh", "-c", "nvidia-smi -i 6 -pm 0 >/dev/null; nvidia-smi -r -i 6"}
	r := n.run(t, n.runPod(t, optedIn, nil), ctr{image: "glibc", cmd: reset, env: all})
	if r.code != 255 || !strings.Contains(r.out, "Insufficient Permissions") {
		t.Errorf("a container that is not privileged: exit %d\n%s\nwant exit 255 and Insufficient Permissions", r.code, r.out)
	}
	r = n.run(t, n.runPrivilegedPod(t, optedIn), ctr{image: "glibc", cmd: reset, env: all, privileged: true})
	if r.code != 0 || !strings.Contains(r.out, "was successfully reset.") {
		t.Errorf("a privileged container: exit %d\n%s", r.code, r.out)
	}
}
