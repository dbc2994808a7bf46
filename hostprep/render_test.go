package hostprep_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/internal/testenv"
)

func TestTheRenderedTreeMatchesTheGoldenFiles(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	res := install(t, s.options(testenv.Profile(t, "a100", 2), testenv.FakeDriverAssets(t)))
	proc := filepath.Join(res.Driver, "proc", "driver", "nvidia")
	for _, tc := range []struct {
		name, file, golden string
	}{
		{"the driver version reads as the proprietary module's", filepath.Join(proc, "version"), "proc-version.golden"},
		{"GPU 0's information reads as the kernel module's", filepath.Join(proc, "gpus", "0000:07:00.0", "information"), "proc-information-0.golden"},
		{"GPU 1's information has its own UUID, bus and minor", filepath.Join(proc, "gpus", "0000:0f:00.0", "information"), "proc-information-1.golden"},
		{"proc/devices lists the majors of NVIDIA's modules", filepath.Join(res.Driver, "proc", "devices"), "proc-devices.golden"},
		{"the fabric-imex-mgmt capability reads as the kernel module's", filepath.Join(proc, "capabilities", "fabric-imex-mgmt"), "proc-capability-fabric-imex-mgmt.golden"},
		{"the CDI spec names each GPU by index and UUID", res.CDIFile, "cdi-a100-2.golden"},
		{"the NFD file carries the GPU labels", res.NFDFile, "nfd-a100-2.golden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			must(t, err)
			golden(t, tc.golden, []byte(strings.ReplaceAll(string(b), s.root, "ROOT")))
		})
	}
}

func TestDeviceNodesAreInertUnlessRealNumbersAreAsked(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	for _, tc := range []struct {
		name string
		real bool
		want map[string][2]uint32
	}{
		{"by default every node is /dev/null's 1:3", false, map[string][2]uint32{
			"nvidia0": {1, 3}, "nvidia1": {1, 3}, "nvidiactl": {1, 3}, "nvidia-uvm": {1, 3}, "nvidia-uvm-tools": {1, 3}, "nvidia-modeset": {1, 3},
		}},
		{"with real numbers the nodes take NVIDIA's majors", true, map[string][2]uint32{
			"nvidia0": {195, 0}, "nvidia1": {195, 1}, "nvidiactl": {195, 255}, "nvidia-uvm": {511, 0}, "nvidia-uvm-tools": {511, 1}, "nvidia-modeset": {195, 254},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ov, err := hostprep.Render(filepath.Join(t.TempDir(), "ov"), hostprep.Options{
				Profile: testenv.Profile(t, "a100", 2), NodeName: node, Assets: assets, RealDeviceNumbers: tc.real,
			})
			if err != nil {
				t.Fatal(err)
			}
			// The InfiniBand nodes are inert either way: nothing answers
			// their ioctls but the shim and the provider.
			for i := 0; i < 12; i++ {
				for _, n := range []string{"umad", "issm", "uverbs"} {
					tc.want[fmt.Sprintf("infiniband/%s%d", n, i)] = [2]uint32{1, 3}
				}
			}
			tc.want["infiniband/rdma_cm"] = [2]uint32{1, 3}
			// MIG capabilities: config, monitor, and those of the
			// instances an A100 can make: gi 0 is 7g, 1 4g or 3g, 2 3g,
			// 3-5 2g or 1g.10gb, 6 1g.10gb, 7-13 1g; a gi of c compute
			// slices holds c cis.
			capNode := func(minor int) [2]uint32 {
				if tc.real {
					return [2]uint32{509, uint32(minor)}
				}
				return [2]uint32{1, 3}
			}
			for _, m := range []int{1, 2} {
				tc.want[fmt.Sprintf("nvidia-caps/nvidia-cap%d", m)] = capNode(m)
			}
			for g := range 2 {
				for gi, cis := range []int{7, 4, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1} {
					for ci := -1; ci < cis; ci++ {
						m := hostprep.MIGCapMinor(g, gi, ci)
						tc.want[fmt.Sprintf("nvidia-caps/nvidia-cap%d", m)] = capNode(m)
					}
				}
			}
			dev := filepath.Join(ov.Driver(), "dev")
			got := map[string][2]uint32{}
			must(t, filepath.WalkDir(dev, func(p string, e fs.DirEntry, err error) error {
				if err != nil || e.IsDir() {
					return err
				}
				name, _ := filepath.Rel(dev, p)
				var st syscall.Stat_t
				must(t, syscall.Lstat(p, &st))
				if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Mode&0o777 != 0o666 {
					t.Errorf("%s: mode %o, want a character device rw for all", name, st.Mode)
				}
				got[name] = [2]uint32{uint32((st.Rdev >> 8) & 0xfff), uint32(st.Rdev&0xff | (st.Rdev>>12)&^0xff)}
				return nil
			}))
			if len(got) != len(tc.want) {
				t.Errorf("nodes %v, want %v", got, tc.want)
			}
			for n, w := range tc.want {
				if got[n] != w {
					t.Errorf("%s is %d:%d, want %d:%d", n, got[n][0], got[n][1], w[0], w[1])
				}
			}
		})
	}
}

func TestRenderWithPlainDevFilesNeedsNoPrivilege(t *testing.T) {
	ov, err := hostprep.Render(filepath.Join(t.TempDir(), "ov"), hostprep.Options{
		Profile: testenv.Profile(t, "t4", 1), NodeName: node, Assets: testenv.FakeDriverAssets(t), PlainDevFiles: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nvidia0", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"} {
		fi, err := os.Lstat(filepath.Join(ov.Driver(), "dev", n))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want an empty regular file", n, fi, err)
		}
	}
	for _, l := range []struct{ name, target string }{
		{"libnvidia-ml.so.1", "libnvidia-ml.so.595.91.07"}, // the t4 profile's driver
		{"libnvidia-ml.so", "libnvidia-ml.so.1"},
	} {
		if got, err := os.Readlink(filepath.Join(ov.Driver(), "usr", "lib64", l.name)); err != nil || got != l.target {
			t.Errorf("%s -> %q (%v), want %q", l.name, got, err, l.target)
		}
	}
	if _, err := os.Stat(filepath.Join(ov.Driver(), "etc", "nvmock", "snapshot")); err != nil {
		t.Error(err)
	}
}

func TestRenderRefusesADirectoryThatIsNotEmpty(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "x"), nil, 0o644))
	_, err := hostprep.Render(dir, hostprep.Options{Profile: testenv.Profile(t, "t4", 1), NodeName: node, Assets: testenv.FakeDriverAssets(t), PlainDevFiles: true})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("render into a non-empty dir: %v, want a refusal", err)
	}
}

// A node's port faults are part of its overlay: the sysfs tree shows them
// and the fabric the plugin's daemon loads from the overlay has them.
// Another node's are only checked, and a profile without InfiniBand
// refuses its own.
func TestRenderGivesTheNodeItsPortFaults(t *testing.T) {
	faults := []fabric.Fault{{HCA: "mlx5_3", Down: true}, {Node: "other", HCA: "mlx5_0", Down: true}}
	ov, err := hostprep.Render(filepath.Join(t.TempDir(), "ov"), hostprep.Options{
		Profile: testenv.Profile(t, "h100", 8), NodeName: node, Assets: testenv.FakeDriverAssets(t), PlainDevFiles: true, IBFaults: faults,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, f, err := hostprep.LoadFabric(ov.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Find("mlx5_3").Ports[1].Down() || f.Find("mlx5_0").Ports[1].Down() {
		t.Errorf("the loaded fabric: mlx5_3 down %v, mlx5_0 down %v; want only this node's fault", f.Find("mlx5_3").Ports[1].Down(), f.Find("mlx5_0").Ports[1].Down())
	}
	b, err := os.ReadFile(filepath.Join(hostprep.SysOf(ov.Dir), "class", "infiniband", "mlx5_3", "ports", "1", "state"))
	if err != nil || string(b) != "1: DOWN\n" {
		t.Errorf("sysfs state of mlx5_3: %q, %v", b, err)
	}
	_, err = hostprep.Render(filepath.Join(t.TempDir(), "ov"), hostprep.Options{
		Profile: testenv.Profile(t, "l40s", 1), NodeName: node, Assets: testenv.FakeDriverAssets(t), PlainDevFiles: true,
		IBFaults: []fabric.Fault{{HCA: "mlx5_0", Down: true}},
	})
	if err == nil || !strings.Contains(err.Error(), "mlx5_0=down: profile l40s has no InfiniBand") {
		t.Errorf("a fault on a node without InfiniBand: %v, want it refused", err)
	}
}

// nvmock exec shows the MIG capability files (and, as root, nodes) from a
// rendering of its cache: with RenderMIGCaps' files, an overlay rendered
// without them is the whole overlay, file for file and node for node, and
// nothing else is left out.
func TestSharedMIGLeavesOutWhatRenderMIGCapsWrites(t *testing.T) {
	p := testenv.Profile(t, "a100", 2)
	for _, nodes := range []bool{false, true} {
		if nodes {
			needRoot(t)
		}
		render := func(shared bool) map[string]string {
			t.Helper()
			ov, err := hostprep.Render(filepath.Join(t.TempDir(), "ov"), hostprep.Options{
				Profile: p, NodeName: node, Assets: testenv.FakeDriverAssets(t), PlainDevFiles: !nodes, NoPCI: true,
				SharedMIGProc: shared, SharedMIGNodes: shared && nodes,
			})
			if err != nil {
				t.Fatal(err)
			}
			return files(t, ov.Driver())
		}
		whole, shared := render(false), render(true)
		dir := t.TempDir()
		if err := hostprep.RenderMIGCaps(dir, p, nodes); err != nil {
			t.Fatal(err)
		}
		cached := files(t, dir)
		if inst := 2 * 42; !nodes && len(cached) != inst+4 || nodes && len(cached) != 2*inst+6 {
			t.Fatalf("nodes %v: RenderMIGCaps wrote %d entries, want those of two A100s' instances", nodes, len(cached))
		}
		for name, data := range whole {
			if got, ok := shared[name]; ok && !strings.HasPrefix(name, "proc/driver/nvidia/capabilities/") {
				if got != data {
					t.Errorf("nodes %v: %s differs in the overlay without MIG's", nodes, name)
				}
				continue
			}
			if got, ok := cached[name]; !ok || got != data {
				t.Errorf("nodes %v: %s: left out of the overlay and not RenderMIGCaps' (or not the same)", nodes, name)
			}
		}
		for name := range cached {
			if _, ok := whole[name]; !ok {
				t.Errorf("nodes %v: RenderMIGCaps wrote %s, which the overlay does not have", nodes, name)
			}
		}
		for name := range shared {
			if _, ok := whole[name]; !ok {
				t.Errorf("nodes %v: %s: only in the overlay without MIG's", nodes, name)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "proc", "driver", "nvidia-caps", "mig-minors")); err != nil {
			t.Error(err)
		}
	}
	if err := hostprep.RenderMIGCaps(t.TempDir(), testenv.Profile(t, "t4", 1), false); err == nil || !strings.Contains(err.Error(), "no MIG") {
		t.Errorf("RenderMIGCaps of a board without MIG: %v, want refused", err)
	}
}

// files maps the paths of the regular files below dir, and of its device
// nodes and links, to their contents and modes.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data := ""
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			data = string(b)
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode()&fs.ModeDevice != 0 {
			data = fmt.Sprintf("%d:%d", st.Rdev>>8&0xfff, st.Rdev&0xff|st.Rdev>>12&0xfff00)
		}
		out[rel] = fmt.Sprintf("%v %q", fi.Mode(), data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
