//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// specOf creates (without starting) a container and returns its OCI spec
// with its ID replaced by a placeholder, then removes it.
func specOf(t *testing.T, p *pod, c ctr) []byte {
	t.Helper()
	n := theNode
	id := n.create(t, p, c)
	s := n.spec(t, id)
	if _, err := n.rt.RemoveContainer(ctx(t), &cri.RemoveContainerRequest{ContainerId: id}); err != nil {
		t.Fatalf("remove %s: %v", id, err)
	}
	return bytes.ReplaceAll(s, []byte(id), []byte("<container-id>"))
}

// A namespace that did not opt in gets the very spec it would get without
// the plugin, byte for byte; the same container in an opted-in namespace
// gets a different one (so the comparison can fail).
func TestNamespaceNotOptedInIsByteForByteUntouched(t *testing.T) {
	n := theNode
	n.pluginRunning(t)
	c := ctr{image: "glibc", cmd: []string{"sleep", "1"}, name: "same"}
	p := n.runPod(t, plain, nil)
	withPlugin := specOf(t, p, c)

	n.script(t, "plugin", "stop")
	withoutPlugin := specOf(t, p, c)
	n.script(t, "plugin", "start")

	if !bytes.Equal(withPlugin, withoutPlugin) {
		t.Errorf("namespace %s: the spec differs with the plugin running:\n%s\nwithout:\n%s", plain, withPlugin, withoutPlugin)
	}
	q := n.runPod(t, optedIn, nil)
	if injected := specOf(t, q, c); !bytes.Contains(injected, []byte("/usr/bin/nvidia-smi")) {
		t.Errorf("namespace %s: no nvidia-smi mount in the spec; the comparison above proves nothing:\n%s", optedIn, injected)
	}
	if bytes.Contains(withPlugin, []byte("nvidia")) {
		t.Errorf("namespace %s: the spec names nvidia:\n%s", plain, withPlugin)
	}
}

func TestOptOutAnnotationLeavesThePodAlone(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, map[string]string{"nvmock.io/inject": "false"})
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "ls /dev; command -v nvidia-smi || echo no-nvidia-smi"}})
	if !strings.Contains(r.out, "no-nvidia-smi") || strings.Contains(r.out, "nvidiactl") {
		t.Errorf("the opted-out pod sees the mock (want no nvidia-smi, no /dev/nvidiactl):\n%s", r.out)
	}
}

// A busybox image (static, no glibc) runs its own command unharmed when
// injected: the one LD_* variable is the umad shim's preload (the a100
// node has InfiniBand), which a static program ignores.
func TestBusyboxImageRunsItsOwnCommandWhenInjected(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "busybox", cmd: []string{"sh", "-c", "echo hello from busybox; ls /dev/nvidia0 /dev/nvidiactl; env | grep ^LD_ || true"}})
	want := "hello from busybox\n/dev/nvidia0\n/dev/nvidiactl\nLD_PRELOAD=/usr/lib/nvmock/libnvmock-umad.so\n"
	if r.code != 0 || r.out != want {
		t.Errorf("busybox exited %d and printed:\n%s\nwant:\n%s", r.code, r.out, want)
	}
}

func TestStaticGoImageRunsItsOwnEntrypointWhenInjected(t *testing.T) {
	n := theNode
	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "static"})
	var got struct {
		Args        []string `json:"args"`
		Visible     string   `json:"visible_devices"`
		Nodes       []string `json:"device_nodes"`
		SMI         bool     `json:"has_nvidia_smi"`
		Lib         bool     `json:"has_library"`
		Preload     string   `json:"ld_preload"`
		LibraryPath string   `json:"ld_library_path"`
	}
	if err := json.Unmarshal([]byte(r.out), &got); err != nil || r.code != 0 {
		t.Fatalf("the static probe exited %d, printed no JSON (%v):\n%s", r.code, err, r.out)
	}
	// The umad shim's preload is set (the node has InfiniBand); a static
	// program runs without loading it.
	if len(got.Args) != 1 || got.Args[0] != "/probe" || got.Preload != "/usr/lib/nvmock/libnvmock-umad.so" || got.LibraryPath != "" {
		t.Errorf("entrypoint ran as %v with LD_PRELOAD=%q LD_LIBRARY_PATH=%q; want /probe, only the shim preloaded", got.Args, got.Preload, got.LibraryPath)
	}
	if !got.SMI || !got.Lib || len(got.Nodes) != len(n.gpus)+4 || strings.Count(got.Visible, "GPU-") != len(n.gpus) {
		t.Errorf("injected static container: %+v; want nvidia-smi, the library, %d GPU nodes + 4 control nodes, %d UUIDs", got, len(n.gpus), len(n.gpus))
	}
}
