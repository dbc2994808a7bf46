package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ParseSpec decodes an OCI runtime spec; a spec without process or linux
// section fails the test (every container spec here has both).
func ParseSpec(t testing.TB, b []byte) *specs.Spec {
	t.Helper()
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("OCI spec: %v", err)
	}
	if s.Process == nil || s.Linux == nil {
		t.Fatalf("OCI spec without process or linux section:\n%s", b)
	}
	return &s
}

// BundleSpec is the spec runc ran for a running container of containerd's
// k8s.io namespace: NVIDIA's runtime edits the bundle's config.json after
// containerd and NRI made it, so its edits show only there.
func BundleSpec(t testing.TB, stateDir, id string) *specs.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "io.containerd.runtime.v2.task", "k8s.io", id, "config.json"))
	if err != nil {
		t.Fatalf("the bundle's spec: %v", err)
	}
	return ParseSpec(t, b)
}

// Edits counts a spec's mounts by destination and device nodes by path, to
// check that each edit is there once.
func Edits(s *specs.Spec) map[string]int {
	n := map[string]int{}
	for _, m := range s.Mounts {
		n[m.Destination]++
	}
	for _, d := range s.Linux.Devices {
		n[d.Path]++
	}
	return n
}

// NvidiaCTKSpec runs NVIDIA's nvidia-ctk cdi generate against a driver root
// into the file out, with devices by index and by UUID (the names device
// plugins put in NVIDIA_VISIBLE_DEVICES), and removes the file when the test
// ends. It returns the spec's device names.
func NvidiaCTKSpec(t testing.TB, driverRoot, out string) []string {
	t.Helper()
	ctk, err := filepath.Abs(filepath.Join(CacheDir(), "bin", "nvidia-ctk"))
	if err == nil {
		_, err = os.Stat(ctk)
	}
	if err != nil {
		Missing(t, "nvidia-ctk in %s (run make deps)", filepath.Dir(ctk))
	}
	// nvidia-ctk resolves the libraries' links and drops any that end
	// outside the root it is given: give it the resolved root.
	root, err := filepath.EvalSymlinks(driverRoot)
	if err != nil {
		t.Fatal(err)
	}
	// The spec's hooks run nvidia-ctk itself (nvidia-ctk hook ...).
	args := []string{ctk, "cdi", "generate", "--driver-root", root, "--dev-root", root,
		"--nvidia-cdi-hook-path", ctk, "--device-name-strategy", "index", "--device-name-strategy", "uuid",
		"--output", out}
	// nvidia-ctk reads the MIG minors at /proc/driver/nvidia-caps, where a
	// kernel module puts them: in a mount namespace of its own, the
	// overlay's are there.
	if caps := filepath.Join(root, "proc", "driver", "nvidia-caps"); exists(caps) {
		args = append([]string{"unshare", "-m", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs -o mode=0755 tmpfs /proc/driver && mkdir /proc/driver/nvidia-caps && mount --bind "$0" /proc/driver/nvidia-caps && exec "$@"`, caps}, args...)
	}
	b, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-ctk cdi generate: %v\n%s", err, b)
	}
	t.Cleanup(func() { os.Remove(out) })
	spec, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("nvidia-ctk wrote no spec: %v\n%s", err, b)
	}
	var names []string
	for _, l := range strings.Split(string(spec), "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(l), "- name: "); ok {
			names = append(names, n)
		}
	}
	return names
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
