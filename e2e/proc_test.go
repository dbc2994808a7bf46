//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A container of an opted-in namespace sees the driver's procfs files at
// /proc/driver, as the kernel module shows them to every container of a
// real node: the driver's version, each GPU's information, the MIG
// capabilities and mig-minors that NVIDIA's DRA driver and device plugin
// read, and NVIDIA's majors in /proc/devices. A container the plugin
// leaves alone keeps the kernel's own.
func TestAContainerSeesTheDriversProcfs(t *testing.T) {
	n := theNode
	host := filepath.Join(n.env["OVERLAY_ROOT"], "driver", "proc", "driver")
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(host, name))
		if err != nil {
			t.Fatalf("the overlay's procfs: %v", err)
		}
		return string(b)
	}
	gpus, err := os.ReadDir(filepath.Join(host, "nvidia", "gpus"))
	if err != nil || len(gpus) != len(n.gpus) {
		t.Fatalf("the overlay's /proc/driver/nvidia/gpus: %v, %d entries, want %d", err, len(gpus), len(n.gpus))
	}
	access := "nvidia/capabilities/gpu0/mig/gi1/access"
	script := "cd /proc/driver && cat nvidia/version nvidia-caps/mig-minors " + access + " nvidia/gpus/*/information && grep -c . /proc/devices && grep nvidia /proc/devices"
	want := read("nvidia/version") + read("nvidia-caps/mig-minors") + read(access)
	for _, g := range gpus {
		want += read(filepath.Join("nvidia", "gpus", g.Name(), "information"))
	}
	// /proc/devices: the kernel's lines and NVIDIA's majors, as hostprep
	// renders them (no NVIDIA module on this host).
	kernel, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	ours, err := os.ReadFile(filepath.Join(host, "..", "devices"))
	if err != nil {
		t.Fatal(err)
	}
	var nv []string
	for _, l := range strings.Split(string(ours), "\n") {
		if strings.Contains(l, "nvidia") {
			nv = append(nv, l)
		}
	}
	want += fmt.Sprintf("%d\n%s\n", strings.Count(string(kernel), "\n")-1+len(nv), strings.Join(nv, "\n"))
	for _, c := range []struct {
		name, ns string
		env      map[string]string
	}{
		{"given GPUs", optedIn, nil},
		{"given no GPU (void), as a DRA driver's plugin", optedIn, map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := n.runPod(t, c.ns, nil)
			r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", script}, env: c.env})
			if r.code != 0 || r.out != want {
				t.Errorf("exit %d:\n%s\nwant the overlay's files:\n%s", r.code, r.out, want)
			}
		})
	}
	p := n.runPod(t, plain, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", "ls -A /proc/driver"}})
	if r.code != 0 || strings.Contains(r.out, "nvidia") {
		t.Errorf("a container the plugin leaves alone: exit %d, /proc/driver holds:\n%s", r.code, r.out)
	}
}
