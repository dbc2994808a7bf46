package inject

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

const probeNode = "inject-probe-node"

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (CAP_MKNOD) to install an overlay with device nodes")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// installOverlay runs hostprep.Install into a temporary root and returns it.
func installOverlay(t *testing.T, p *profile.Profile, assets string, realNumbers bool) string {
	t.Helper()
	d := t.TempDir()
	root := filepath.Join(d, "var", "lib", "nvmock")
	_, err := hostprep.Install(hostprep.InstallOptions{
		Render:   hostprep.Options{Profile: p, NodeName: probeNode, Assets: assets, RealDeviceNumbers: realNumbers},
		Root:     root,
		CDIDir:   filepath.Join(d, "run", "cdi"),
		NFDDir:   filepath.Join(d, "etc", "features.d"),
		ProcRoot: filepath.Join(d, "proc"),
	})
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	return root
}

func TestNodeStateFromOverlayReadsAnInstalledOverlay(t *testing.T) {
	needRoot(t)
	for _, c := range []struct {
		name string
		real bool
	}{
		{"an inert overlay gives /dev/null's numbers", false},
		{"an overlay with real device numbers gives NVIDIA's", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := testenv.Profile(t, "h100", 3)
			p.Board.Modes.MIG.Layout = "0=all-balanced"
			root := installOverlay(t, p, testenv.FakeDriverAssets(t), c.real)
			got, err := NodeStateFromOverlay(root)
			if err != nil {
				t.Fatal(err)
			}
			driver := filepath.Join(root, "driver")
			resolved, err := filepath.EvalSymlinks(driver)
			must(t, err)
			want := NodeState{
				DriverRoot: driver,
				Overlay:    resolved,
				Library:    driver + "/usr/lib64/libnvidia-ml.so.1",
				NvidiaSMI:  driver + "/usr/bin/nvidia-smi",
				Snapshot:   driver + "/etc/nvmock/snapshot",
				State:      filepath.Join(root, hostprep.StateFile),
				RealDriver: RealDriverLoaded("/proc"),
			}
			nums := hostprep.DevNodes(3, c.real)
			node := func(n hostprep.DevNode) DeviceNode {
				return DeviceNode{Path: "/dev/" + n.Name, Type: "c", Major: int64(n.Major), Minor: int64(n.Minor), FileMode: 0o666}
			}
			for _, id := range snapshot.Identities(p, probeNode) {
				want.GPUs = append(want.GPUs, GPU{Index: id.Index, UUID: id.UUID, Node: node(nums[id.Index])})
			}
			want.Control = []DeviceNode{node(nums[3]), node(nums[4]), node(nums[5]), node(nums[6])}
			// GPU 0's MIG devices, by GPU instance: 3g at slices 4-7 (2), 2g
			// at 0-1 (3), 1g at 2 (9) and 3 (10), as mig-parted's balanced
			// layout sits on a real A100. Three writes: the state made for
			// the overlay to link to, reset, partitioned.
			for k, m := range []struct {
				gi      int
				profile string
			}{{2, "3g.40gb"}, {3, "2g.20gb"}, {9, "1g.10gb"}, {10, "1g.10gb"}} {
				caps := [2]DeviceNode{}
				for i, ci := range []int{-1, 0} {
					minor := hostprep.MIGCapMinor(0, m.gi, ci)
					caps[i] = DeviceNode{Path: fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", minor), Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
					if c.real {
						caps[i].Major, caps[i].Minor = 509, int64(minor)
					}
				}
				want.MIG = append(want.MIG, MIGDevice{GPU: 0, Index: k, UUID: live.MIGUUID(want.GPUs[0].UUID, m.gi, 0), Profile: m.profile, GI: m.gi, Caps: caps})
			}
			want.MIGGen = 3
			want.MIGOn = []bool{true, false, false} // the layout's GPU 0 alone
			monitor := DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap2", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
			if c.real {
				monitor.Major, monitor.Minor = 509, 2
			}
			want.MIGMonitor = &monitor
			config := DeviceNode{Path: "/dev/nvidia-caps/nvidia-cap1", Type: "c", Major: 1, Minor: 3, FileMode: 0o666}
			if c.real {
				config.Major, config.Minor = 509, 1
			}
			want.MIGConfig = &config
			// h100's HCAs, inert whatever the GPUs' numbers.
			ov := filepath.Dir(resolved)
			want.IB = &IBNode{DevDir: filepath.Join(driver, "dev", "infiniband"), Shim: filepath.Join(ov, hostprep.UmadShimPath),
				Provider: filepath.Join(ov, hostprep.ProviderPath), SocketDir: filepath.Join(root, "ib")}
			if d := diff(got, want); d != "" {
				t.Errorf("node state differs:\n%s", d)
			}

			// The probed state injects, and every mount source is a file.
			got.OptedIn = map[string]bool{"ml": true}
			adj, ok, err := Decide(Config{Extensions: []Extension{InfiniBand}}, got, pod("ml"), ctr)
			if err != nil || !ok {
				t.Fatalf("Decide on the probed state: ok %v, err %v", ok, err)
			}
			for _, m := range adj.Mounts {
				if m.Source == got.IB.SocketDir || m.Source == got.IB.DevDir {
					if fi, err := os.Stat(m.Source); err != nil || !fi.IsDir() {
						t.Errorf("directory %s is not there to mount: %v", m.Source, err)
					}
					continue
				}
				if fi, err := os.Stat(m.Source); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("mount source %s is not a file: %v", m.Source, err)
				}
			}
		})
	}
}

func TestNodeStateFromOverlayRefusesWhatIsNotAnOverlay(t *testing.T) {
	needRoot(t)
	p := testenv.Profile(t, "a100", 2)
	assets := testenv.FakeDriverAssets(t)
	for _, c := range []struct {
		name    string
		breakIt func(root string)
		want    string
	}{
		{"a root without a manifest was never installed", func(root string) { os.Remove(filepath.Join(root, hostprep.ManifestFile)) },
			"no hostprep.json (run nvmock hostprep install)"},
		{"a missing GPU node is named", func(root string) { os.Remove(filepath.Join(root, "driver", "dev", "nvidia1")) },
			"GPU 1: device node " + "ROOT/driver/dev/nvidia1"},
		{"a plain file for a control node is refused", func(root string) {
			p := filepath.Join(root, "driver", "dev", "nvidia-uvm")
			os.Remove(p)
			os.WriteFile(p, nil, 0o666)
		}, "nvidia-uvm: not a character device"},
		{"a corrupt snapshot is refused", func(root string) {
			os.WriteFile(filepath.Join(root, "driver", "etc", "nvmock", "snapshot"), []byte("garbage"), 0o644)
		}, "7 bytes, shorter than a header"},
		{"a missing library is named", func(root string) { os.Remove(filepath.Join(root, "driver", "usr", "lib64", "libnvidia-ml.so.1")) },
			"libnvidia-ml.so.1 is missing or not a file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := installOverlay(t, p, assets, false)
			c.breakIt(root)
			_, err := NodeStateFromOverlay(root)
			want := strings.ReplaceAll(c.want, "ROOT", root)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want one containing %q", err, want)
			}
		})
	}
}

func TestDecodeGPUs(t *testing.T) {
	p := testenv.Profile(t, "a100", 4)
	data, err := snapshot.Compile(p, snapshot.Options{Seed: probeNode})
	must(t, err)
	got, err := DecodeGPUs(data)
	must(t, err)
	var want []GPU
	for i, id := range snapshot.Identities(p, probeNode) {
		want = append(want, GPU{Index: i, UUID: id.UUID, Node: DeviceNode{Minor: int64(i)}})
	}
	if d := diff(got, want); d != "" {
		t.Errorf("decoded GPUs differ:\n%s", d)
	}

	unseeded, err := snapshot.Compile(p, snapshot.Options{Unseeded: true})
	must(t, err)
	newer := append([]byte(nil), data...)
	binary.LittleEndian.PutUint32(newer[8:], snapshot.Version+1)
	magic := append([]byte(nil), data...)
	copy(magic, "NOTMOCKS")
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"a truncated device table is refused", data[:snapshot.HeaderSize+snapshot.DeviceSize], "file size does not match its header"},
		{"a short file is refused", data[:10], "shorter than a header"},
		{"another magic is refused", magic, "not an nvmock snapshot"},
		{"another layout version is refused", newer, "layout version " + strconv.Itoa(snapshot.Version+1)},
		{"an unseeded snapshot has no UUIDs to read", unseeded, "unseeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := DecodeGPUs(c.data); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestRealDriverLoaded(t *testing.T) {
	proc := t.TempDir()
	if RealDriverLoaded(proc) {
		t.Error("an empty proc shows a driver")
	}
	must(t, os.MkdirAll(filepath.Join(proc, "driver", "nvidia"), 0o755))
	if !RealDriverLoaded(proc) {
		t.Error("proc/driver/nvidia does not show a driver")
	}
}

// A snapshot the library would refuse to map is refused before it is read
// whole, with the limit named.
func TestReadSnapshotRefusesOneOverTheLimit(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	must(t, os.WriteFile(big, make([]byte, snapshot.MaxBytes+1), 0o644))
	if _, err := readSnapshot(big); err == nil || !strings.Contains(err.Error(), "over the limit of "+strconv.Itoa(snapshot.MaxBytes)) {
		t.Errorf("readSnapshot of %d bytes: %v", snapshot.MaxBytes+1, err)
	}
	ok := filepath.Join(dir, "ok")
	must(t, os.WriteFile(ok, make([]byte, snapshot.MaxBytes), 0o644))
	if data, err := readSnapshot(ok); err != nil || len(data) != snapshot.MaxBytes {
		t.Errorf("readSnapshot at the limit: %d bytes, %v", len(data), err)
	}
}
