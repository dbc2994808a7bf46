//go:build e2e

package e2e

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// smi runs the node's nvidia-smi on the host, as an operator would.
func (n *node) smi(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(n.env["NVIDIA_SMI"], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nvidia-smi %s on the node: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// partition makes GPU instances of the profiles (ids) on a GPU of the node
// with nvidia-smi, each with its whole compute instance, and undoes it all
// when the test ends.
func (n *node) partition(t *testing.T, gpu, profiles string) {
	t.Helper()
	n.smi(t, "-i", gpu, "-mig", "1")
	t.Cleanup(func() {
		n.smi(t, "mig", "-i", gpu, "-dci")
		n.smi(t, "mig", "-i", gpu, "-dgi")
		n.smi(t, "-i", gpu, "-mig", "0")
	})
	n.smi(t, "mig", "-i", gpu, "-cgi", profiles, "-C")
}

// MIG devices made on the node with nvidia-smi reach containers: one given
// a MIG UUID (as NVIDIA's device plugin sets it) or asking for a profile
// sees its GPU with exactly that MIG device, as on a real node; one given
// the GPU whole sees none, unless it has the monitor capability or all.
func TestAContainerGivenAMIGDeviceSeesExactlyThatDevice(t *testing.T) {
	n := theNode
	n.partition(t, "2", "9,19,19")
	list := n.smi(t, "-L")
	m := regexp.MustCompile(`(?m)^GPU 2: (.*) \(UUID: (GPU-[0-9a-f-]+)\)\n  MIG 3g.20gb\s+Device  0: \(UUID: (MIG-[0-9a-f-]+)\)\n  MIG 1g.5gb\s+Device  1: \(UUID: (MIG-[0-9a-f-]+)\)\n  MIG 1g.5gb\s+Device  2: \(UUID: (MIG-[0-9a-f-]+)\)\n`).FindStringSubmatch(list)
	if m == nil {
		t.Fatalf("nvidia-smi -L on the node:\n%s", list)
	}
	name, gpu, three, one := m[1], m[2], m[3], m[4]

	p := n.runPod(t, optedIn, nil)
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}, env: map[string]string{"NVIDIA_VISIBLE_DEVICES": one}})
	want := "GPU 0: " + name + " (UUID: " + gpu + ")\n  MIG 1g.5gb      Device  0: (UUID: " + one + ")\n"
	if r.code != 0 || r.out != want {
		t.Errorf("nvidia-smi -L given %s: exit %d\n%s\nwant\n%s", one, r.code, r.out, want)
	}

	// The GPU named whole: no MIG device (no capability node), as with
	// NVIDIA's runtime; with the monitor capability, or all GPUs, all three.
	for _, c := range []struct {
		name string
		env  map[string]string
		migs int
	}{
		{"GPU 2 whole", map[string]string{"NVIDIA_VISIBLE_DEVICES": gpu}, 0},
		{"GPU 2 and the MIG monitor capability", map[string]string{"NVIDIA_VISIBLE_DEVICES": gpu, "NVIDIA_MIG_MONITOR_DEVICES": "all"}, 3},
		{"all GPUs", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, 3},
	} {
		r := n.run(t, p, ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}, env: c.env})
		if r.code != 0 || strings.Count(r.out, "  MIG ") != c.migs || !strings.Contains(r.out, "(UUID: "+gpu+")\n") {
			t.Errorf("%s: exit %d\n%s\nwant GPU 2 with %d MIG devices", c.name, r.code, r.out, c.migs)
		}
	}

	ann := n.runPod(t, optedIn, map[string]string{"nvmock.io/gpus": "mig-3g.20gb"})
	r = n.run(t, ann, ctr{image: "glibc", cmd: []string{"/bin/sh", "-c", "nvidia-smi -L; echo $NVIDIA_VISIBLE_DEVICES; ls /dev/nvidia-caps"}})
	if r.code != 0 || !strings.Contains(r.out, "  MIG 3g.20gb     Device  0: (UUID: "+three+")\n"+three+"\n") || strings.Count(r.out, "MIG ") != 1 ||
		len(strings.Fields(r.out[strings.LastIndex(r.out, three+"\n")+len(three)+1:])) != 2 {
		t.Errorf("a pod asking for mig-3g.20gb: exit %d\n%s\nwant the 3g.20gb %s alone, and its two capability nodes", r.code, r.out, three)
	}
}

// nvidia-ctk's spec of a partitioned node lists its MIG devices; asked for
// by CDI name (GPU:index), containerd gives a container the MIG device's
// nodes from the spec, and the container sees that MIG device alone.
func TestAnNvidiaCTKSpecGivesAMIGDeviceByCDIName(t *testing.T) {
	n := theNode
	n.partition(t, "3", "14,19")
	m := regexp.MustCompile(`(?m)^GPU 3: (.*) \(UUID: (GPU-[0-9a-f-]+)\)\n  MIG 2g.10gb\s+Device  0: \(UUID: (MIG-[0-9a-f-]+)\)\n  MIG 1g.5gb\s+Device  1: \(UUID: (MIG-[0-9a-f-]+)\)\n`).FindStringSubmatch(n.smi(t, "-L"))
	if m == nil {
		t.Fatal("nvidia-smi -L on the node lacks GPU 3's two MIG devices")
	}
	nvidiaCTKSpec(t)
	c := ctr{image: "glibc", cmd: []string{"nvidia-smi", "-L"}, cdi: []string{"nvidia.com/gpu=3:1"}}
	p := n.runPod(t, optedIn, nil)
	waitForCDI(t, p, c)
	r := n.run(t, p, c)
	want := "GPU 0: " + m[1] + " (UUID: " + m[2] + ")\n  MIG 1g.5gb      Device  0: (UUID: " + m[4] + ")\n"
	if r.code != 0 || r.out != want {
		t.Errorf("CDI nvidia.com/gpu=3:1: exit %d\n%s\nwant\n%s", r.code, r.out, want)
	}
}

// Only a privileged container asking for the MIG config capability
// (NVIDIA_MIG_CONFIG_DEVICES=all, as mig-manager and the DRA driver's
// kubelet plugin do) changes the node's layout with the real nvidia-smi;
// the node sees the change. Another container is refused, as an
// unprivileged process is on a real node, and so is an unprivileged one
// asking for it, which NVIDIA's runtime refuses the capability.
func TestOnlyAMIGConfigContainerChangesTheLayout(t *testing.T) {
	n := theNode
	t.Cleanup(func() {
		exec.Command(n.env["NVIDIA_SMI"], "mig", "-i", "4", "-dci").Run()
		exec.Command(n.env["NVIDIA_SMI"], "mig", "-i", "4", "-dgi").Run()
		exec.Command(n.env["NVIDIA_SMI"], "-i", "4", "-mig", "0").Run()
	})
	p := n.runPod(t, optedIn, nil)
	script := "nvidia-smi -i 4 -mig 1 && nvidia-smi mig -i 4 -cgi 19 -C"
	r := n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", script}})
	if r.code == 0 || !strings.Contains(r.out, "Insufficient Permissions") {
		t.Errorf("a container without the MIG config capability: exit %d\n%s\nwant Insufficient Permissions", r.code, r.out)
	}
	if mode := n.smi(t, "-i", "4", "--query-gpu=mig.mode.current", "--format=csv,noheader"); mode != "Disabled\n" {
		t.Errorf("after the refused container, GPU 4's MIG mode is %q", mode)
	}
	config := map[string]string{"NVIDIA_MIG_CONFIG_DEVICES": "all"}
	r = n.run(t, p, ctr{image: "glibc", cmd: []string{"sh", "-c", script}, env: config})
	if r.code == 0 || !strings.Contains(r.out, "Insufficient Permissions") {
		t.Errorf("an unprivileged container asking for the MIG config capability: exit %d\n%s\nwant Insufficient Permissions", r.code, r.out)
	}
	priv := n.runPrivilegedPod(t, optedIn)
	r = n.run(t, priv, ctr{image: "glibc", cmd: []string{"sh", "-c", script}, env: config, privileged: true})
	if r.code != 0 || !strings.Contains(r.out, "Successfully created compute instance") {
		t.Fatalf("a container with the MIG config capability: exit %d\n%s", r.code, r.out)
	}
	if !regexp.MustCompile(`(?m)^GPU 4: .*\n  MIG 1g.5gb\s+Device  0: \(UUID: MIG-`).MatchString(n.smi(t, "-L")) {
		t.Errorf("the node does not see the 1g.5gb the container made:\n%s", n.smi(t, "-L"))
	}
}

// A pod on a MIG device that asks to show a process shows it on the node
// as a real one does: under its GPU and compute instance, with its memory
// in its MIG device's. The container itself sees that memory in its MIG
// device's row, but not its GPU's processes, which need the MIG monitor
// capability. The compute instance it runs on cannot be destroyed until
// it stops.
func TestAPodOnAMIGDeviceShowsItsProcessUnderItsInstances(t *testing.T) {
	n := theNode
	n.partition(t, "5", "19,19")
	p := n.runPod(t, optedIn, map[string]string{"nvmock.io/gpus": "mig-1g.5gb", "nvmock.io/gpu-memory": "1GiB"})
	id := n.start(t, p, ctr{image: "glibc", cmd: []string{"/bin/sh", "-c",
		"while true; do nvidia-smi; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; sleep 0.2; done"}})
	n.waitOutput(t, id, "1024MiB /")
	n.waitOutput(t, id, "[Insufficient Permissions], [Insufficient Permissions]")
	pid := strconv.Itoa(int(n.pid(t, id)))
	out := n.smi(t)
	m := regexp.MustCompile(`(?m)^\|\s+5\s+(\d+)\s+0\s+` + pid + `\s+C\s+/bin/sh\s+1024MiB\s+\|$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("nvidia-smi on the node lacks pid %s on GPU 5 under a GPU instance, compute instance 0:\n%s", pid, out)
	}
	gi := m[1]
	if !regexp.MustCompile(`(?m)^\|\s+5\s+` + gi + `\s+0\s+\d+\s+\|\s+1024MiB /`).MatchString(out) {
		t.Errorf("its MIG device (GPU 5, GI %s) does not show the 1024 MiB used:\n%s", gi, out)
	}
	dci, err := exec.Command(n.env["NVIDIA_SMI"], "mig", "-i", "5", "-gi", gi, "-ci", "0", "-dci").CombinedOutput()
	if err == nil || !strings.Contains(string(dci), "In use by another client") {
		t.Errorf("destroying the compute instance the pod runs on: %v\n%s", err, dci)
	}
	if _, err := n.rt.StopContainer(ctx(t), &cri.StopContainerRequest{ContainerId: id, Timeout: 1}); err != nil {
		t.Fatal(err)
	}
	if out := n.smi(t); strings.Contains(out, " "+pid+" ") {
		t.Errorf("after the container stopped, nvidia-smi on the node still shows pid %s:\n%s", pid, out)
	}
}
