package hostprep_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
)

func TestTheRealNvidiaSMIFromTheInstalledDriverRootListsTheProfilesGPUs(t *testing.T) {
	needRoot(t)
	assets := realAssets(t)
	for _, tc := range []struct {
		name    string
		profile string
		gpus    int
	}{
		{"three A100s", "a100", 3},
		{"two H100s", "h100", 2},
		{"one T4", "t4", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			p := testenv.Profile(t, tc.profile, tc.gpus)
			res := install(t, s.options(p, assets))
			smi := filepath.Join(res.Driver, "usr", "bin", "nvidia-smi")
			cmd := exec.Command(smi, "-L")
			cmd.Env = cleanEnv("NVMOCK_DEV_ROOT=" + filepath.Join(res.Driver, "dev"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s -L: %v\n%s", smi, err, out)
			}
			var want strings.Builder
			for _, id := range snapshot.Identities(p, node) {
				want.WriteString("GPU " + itoa(id.Index) + ": " + p.Board.ProductName + " (UUID: " + id.UUID + ")\n")
			}
			if string(out) != want.String() {
				t.Errorf("nvidia-smi -L:\n%s\nwant:\n%s", out, want.String())
			}
		})
	}
}

// cleanEnv drops whatever would point the child at another library,
// snapshot or device set.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_LIBRARY_PATH", "LD_PRELOAD", "NVMOCK_SNAPSHOT", "NVIDIA_VISIBLE_DEVICES", "NVMOCK_DEV_ROOT", "NVMOCK_TRACE":
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestInstallingTheSameInputsTwiceChangesNothing(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	o := s.options(testenv.Profile(t, "a100", 2), testenv.FakeDriverAssets(t))
	first := install(t, o)
	if first.Unchanged {
		t.Fatal("first install says unchanged")
	}
	before := tree(t, s.root, s.cdi, s.nfd)
	time.Sleep(10 * time.Millisecond) // a rewrite would show in mtimes
	second := install(t, o)
	if !second.Unchanged {
		t.Error("second install with the same inputs did not say unchanged")
	}
	if second.Hash != first.Hash {
		t.Errorf("hash changed: %s then %s", first.Hash, second.Hash)
	}
	sameTree(t, before, tree(t, s.root, s.cdi, s.nfd), "appeared")
}

func TestInstallingWithNewInputsReplacesTheOverlay(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	first := install(t, s.options(testenv.Profile(t, "a100", 2), assets))
	for _, tc := range []struct {
		name   string
		change func(o *hostprep.InstallOptions)
		nodes  int
	}{
		{"more GPUs give a new overlay with their nodes", func(o *hostprep.InstallOptions) { o.Render.Profile.GPUs = 3 }, 3},
		{"another node name gives new identities", func(o *hostprep.InstallOptions) { o.Render.NodeName = "other-node" }, 2},
		{"real device numbers give a new overlay", func(o *hostprep.InstallOptions) { o.Render.RealDeviceNumbers = true }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := s.options(testenv.Profile(t, "a100", 2), assets)
			tc.change(&o)
			res := install(t, o)
			if res.Unchanged || res.Hash == first.Hash {
				t.Fatalf("new inputs gave unchanged=%v hash %s (first %s)", res.Unchanged, res.Hash, first.Hash)
			}
			target, err := os.Readlink(filepath.Join(s.root, "driver"))
			if err != nil || target != filepath.Join("overlays", res.Hash, "driver") {
				t.Errorf("driver -> %q (%v), want overlays/%s/driver", target, err, res.Hash)
			}
			ents, _ := os.ReadDir(filepath.Join(s.root, "overlays"))
			if len(ents) != 1 || ents[0].Name() != res.Hash {
				t.Errorf("overlays holds %v, want only %s", names(ents), res.Hash)
			}
			for i := 0; i < tc.nodes; i++ {
				if _, err := os.Stat(filepath.Join(res.Driver, "dev", "nvidia"+itoa(i))); err != nil {
					t.Error(err)
				}
			}
			if _, err := os.Stat(filepath.Join(res.Driver, "dev", "nvidia"+itoa(tc.nodes))); err == nil {
				t.Errorf("nvidia%d exists for a %d-GPU node", tc.nodes, tc.nodes)
			}
		})
	}
}

func TestADamagedOverlayIsRepairedNotCalledUnchanged(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	o := s.options(testenv.Profile(t, "a100", 2), testenv.FakeDriverAssets(t))
	o.Render.MIG = "all-1g.5gb"
	first := install(t, o)
	// The repair keeps the node's live state: one 1g.5gb destroyed since
	// stays destroyed (QA: a repair reset the MIG layout and processes).
	statePath := filepath.Join(s.root, hostprep.StateFile)
	destroyOneGI(t, statePath)
	must(t, os.Remove(filepath.Join(first.Driver, "dev", "nvidia1")))
	res := install(t, o)
	if res.Unchanged {
		t.Fatal("install called a damaged overlay unchanged")
	}
	if n := migCount(t, statePath); n != 6 {
		t.Errorf("%d GPU instances after the repair, want the 6 the node had", n)
	}
	if _, err := os.Stat(filepath.Join(res.Driver, "dev", "nvidia1")); err != nil {
		t.Errorf("not repaired: %v", err)
	}
	if !install(t, o).Unchanged {
		t.Error("third install after the repair is not unchanged")
	}
	// The PCI tree counts too: a GPU's class changed by hand.
	class := filepath.Join(hostprep.SysOf(res.Overlay), "bus", "pci", "devices", "0000:07:00.0", "class")
	must(t, os.Chmod(class, 0o644))
	must(t, os.WriteFile(class, []byte("0x030000\n"), 0o644))
	res = install(t, o)
	if res.Unchanged {
		t.Fatal("install called an overlay with a damaged PCI tree unchanged")
	}
	if b, err := os.ReadFile(filepath.Join(hostprep.SysOf(res.Overlay), "bus", "pci", "devices", "0000:07:00.0", "class")); err != nil || string(b) != "0x030200\n" {
		t.Errorf("PCI tree not repaired: %q, %v", b, err)
	}
}

func TestUninstallRemovesExactlyWhatInstallCreated(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	// What was there before install must stay.
	must(t, os.MkdirAll(s.root, 0o755))
	must(t, os.WriteFile(filepath.Join(s.root, "keep"), []byte("mine\n"), 0o644))
	must(t, os.MkdirAll(s.cdi, 0o755))
	must(t, os.WriteFile(filepath.Join(s.cdi, "vendor.com-other.yaml"), []byte("other\n"), 0o644))
	before := tree(t, filepath.Dir(s.root), s.cdi)
	top := filepath.Dir(filepath.Dir(s.nfd)) // the temp dir: etc/ is install's

	assets := testenv.FakeDriverAssets(t)
	install(t, s.options(testenv.Profile(t, "a100", 2), assets))
	install(t, s.options(testenv.Profile(t, "a100", 3), assets)) // a replaced overlay is covered too
	// What the NRI plugin makes beside the live state: a pid file a runtime
	// hook wrote for it.
	started := hostprep.StartedDir(filepath.Join(s.root, hostprep.StateFile))
	must(t, os.MkdirAll(started, 0o700))
	must(t, os.WriteFile(filepath.Join(started, "c1"), []byte("42\n"), 0o644))
	// And what the chart's xidlog keeps there: its cursor and lock.
	cursor := hostprep.XIDLogCursor(filepath.Join(s.root, hostprep.StateFile))
	must(t, os.WriteFile(cursor, []byte("{}"), 0o644))
	must(t, os.WriteFile(cursor+".lock", nil, 0o644))
	res, err := hostprep.Uninstall(s.root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Nothing || len(res.Removed) == 0 {
		t.Fatalf("uninstall removed nothing: %+v", res)
	}
	after := tree(t, filepath.Dir(s.root), s.cdi)
	for p, v := range before {
		if p == s.root || p == s.cdi { // their mtimes move with entries added and removed
			continue
		}
		if after[p] != v {
			t.Errorf("%s: %s -> %s", p, v, after[p])
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s left behind", p)
		}
	}
	if _, err := os.Stat(filepath.Join(top, "etc")); err == nil {
		t.Errorf("%s/etc, created by install for the NFD dir, left behind", top)
	}
	again, err := hostprep.Uninstall(s.root, nil)
	if err != nil || !again.Nothing {
		t.Errorf("second uninstall: %+v, %v; want nothing to do", again, err)
	}
}

// Uninstall of a root nvmock never installed keeps it, empty or not
// (review: a user's empty directory was removed).
func TestUninstallOfARootNeverInstalledKeepsIt(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	must(t, os.MkdirAll(s.root, 0o700))
	res, err := hostprep.Uninstall(s.root, nil)
	if err != nil || !res.Nothing || len(res.Removed) != 0 {
		t.Errorf("uninstall: %+v, %v; want nothing to do", res, err)
	}
	if fi, err := os.Stat(s.root); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the root after uninstall: %v, %v; want it kept, mode 0700", fi, err)
	}
}

func TestInstallRefusesANodeWithARealDriverUnlessForced(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	for _, tc := range []struct {
		name       string
		realDriver bool
		force      bool
		wantErr    string
	}{
		{"a node without a loaded NVIDIA driver installs", false, false, ""},
		{"a node with a loaded NVIDIA driver is refused", true, false, "a real NVIDIA driver is loaded"},
		{"--force installs over a loaded NVIDIA driver", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			if tc.realDriver {
				must(t, os.MkdirAll(filepath.Join(s.proc, "driver", "nvidia"), 0o755))
			}
			o := s.options(testenv.Profile(t, "a100", 1), assets)
			o.Force = tc.force
			_, err := hostprep.Install(o)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("install: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("install: %v, want an error containing %q", err, tc.wantErr)
			case tc.wantErr != "":
				if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--force") {
					t.Errorf("refusal %q is not one line naming --force", err)
				}
				if _, err := os.Stat(s.root); err == nil {
					t.Errorf("a refused install created %s", s.root)
				}
			}
		})
	}
}

func TestInstallRefusesANodeWhereAnotherDriverHoldsTheIMEXMajors(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	for _, tc := range []struct {
		name, devices, wantErr string
	}{
		{"free majors install", "Character devices:\n  1 mem\n254 gpiochip\n508 trace\n\nBlock devices:\n509 blkext\n", ""},
		{"another driver at 510 is refused", "Character devices:\n  1 mem\n510 mmpmem\n\nBlock devices:\n", "major 510 is mmpmem's"},
		{"another driver at 509 is refused", "Character devices:\n509 gdrdrv\n\nBlock devices:\n", "major 509 is gdrdrv's"},
		// nvidia-uvm's (found in review: only 509 and 510 were checked).
		{"another driver at 511 is refused", "Character devices:\n511 bardrv\n\nBlock devices:\n", "major 511 is bardrv's; the overlay names it for NVIDIA's nvidia-uvm"},
		// Review: NVIDIA's own made --force fail on most real nodes.
		{"NVIDIA's own at their majors install", "Character devices:\n195 nvidia-frontend\n509 nvidia-caps\n510 nvidia-caps-imex-channels\n511 nvidia-uvm\n\nBlock devices:\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			must(t, os.MkdirAll(s.proc, 0o755))
			must(t, os.WriteFile(filepath.Join(s.proc, "devices"), []byte(tc.devices), 0o644))
			_, err := hostprep.Install(s.options(testenv.Profile(t, "a100", 1), assets))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("install: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("install: %v, want an error containing %q", err, tc.wantErr)
			case tc.wantErr != "":
				if _, err := os.Stat(s.root); err == nil {
					t.Errorf("a refused install created %s", s.root)
				}
			}
		})
	}
}

func TestBadInputsLeaveTheOldOverlayIntact(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	noSMI := t.TempDir()
	must(t, os.CopyFS(noSMI, os.DirFS(assets)))
	must(t, os.Remove(filepath.Join(noSMI, "usr", "bin", "nvidia-smi")))
	wrongRPath := t.TempDir()
	must(t, os.CopyFS(wrongRPath, os.DirFS(assets)))
	trueBin, err := exec.LookPath("true")
	must(t, err)
	data, err := os.ReadFile(trueBin) // an ELF binary with no RPATH
	must(t, err)
	must(t, os.WriteFile(filepath.Join(wrongRPath, "usr", "bin", "nvidia-smi"), data, 0o755))

	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, s site, o *hostprep.InstallOptions)
		wantErr string
	}{
		{"zero GPUs", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.Profile.GPUs = 0 }, "gpus"},
		{"a profile without a driver version", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.Profile.Driver.Version = "" }, "driver.version"},
		{"assets without nvidia-smi", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.Assets = noSMI }, "nvidia-smi"},
		{"an nvidia-smi that would not find the library", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.Assets = wrongRPath }, "RPATH"},
		{"no assets at all", func(t *testing.T, s site, o *hostprep.InstallOptions) {
			o.Render.Assets = filepath.Join(t.TempDir(), "none")
		}, "make build"},
		{"a CDI directory that cannot be created", func(t *testing.T, s site, o *hostprep.InstallOptions) {
			f := filepath.Join(t.TempDir(), "file")
			must(t, os.WriteFile(f, nil, 0o644))
			o.CDIDir = filepath.Join(f, "cdi")
		}, "not a directory"},
		{"a MIG layout that does not fit", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.MIG = "1=4g.20gb*2" }, "GPU 1: 2 of 4g.20gb: a GPU holds at most 1"},
		{"a MIG profile the board lacks", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.MIG = "all-2g.5gb" }, "the board's profiles are 1g.5gb,"},
		{"a MIG layout for a GPU the node lacks", func(t *testing.T, s site, o *hostprep.InstallOptions) { o.Render.MIG = "3=all-1g.5gb" }, "GPU 3: the node has GPUs 0 to 2"},
		{"a read-only root", func(t *testing.T, s site, o *hostprep.InstallOptions) {
			readOnly(t, s.root)
		}, "read-only file system"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			good := install(t, s.options(testenv.Profile(t, "a100", 2), assets))
			before := contents(t, s.root, s.cdi, s.nfd)
			o := s.options(testenv.Profile(t, "a100", 3), assets)
			tc.change(t, s, &o)
			_, err := hostprep.Install(o)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("install: %v, want an error containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			sameTree(t, before, contents(t, s.root, s.cdi, s.nfd), "left behind")
			if target, _ := os.Readlink(filepath.Join(s.root, "driver")); target != filepath.Join("overlays", good.Hash, "driver") {
				t.Errorf("driver -> %s, want the old overlay %s", target, good.Hash)
			}
		})
	}
}

// readOnly bind-mounts dir read-only over itself until the test ends.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		testenv.Missing(t, "a bind mount to make %s read-only: %v", dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		testenv.Missing(t, "a read-only remount of %s: %v", dir, err)
	}
}

func TestTheCDISpecValidatesAndNamesEveryGPUByIndexAndUUID(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	p := testenv.Profile(t, "a100", 3)
	res := install(t, s.options(p, testenv.FakeDriverAssets(t)))
	spec, err := cdi.ReadSpec(res.CDIFile, 0)
	if err != nil {
		t.Fatalf("CDI spec does not validate: %v", err)
	}
	if spec.Kind != hostprep.CDIKind {
		t.Errorf("kind %q, want %q", spec.Kind, hostprep.CDIKind)
	}
	var got, want []string
	for _, d := range spec.Devices {
		got = append(got, d.Name)
	}
	for _, id := range snapshot.Identities(p, node) {
		want = append(want, itoa(id.Index))
	}
	for _, id := range snapshot.Identities(p, node) {
		want = append(want, id.UUID)
	}
	want = append(want, "all")
	if !slices.Equal(got, want) {
		t.Errorf("devices %v, want %v", got, want)
	}

	// What a CDI runtime gives a container that asks for one device.
	cache, err := cdi.NewCache(cdi.WithSpecDirs(s.cdi), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ids := snapshot.Identities(p, node)
	control := []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"}
	for _, tc := range []struct {
		name    string
		devices []string
		nodes   []string
	}{
		{"GPU 1 by index brings its node and the control nodes", []string{"nvmock.io/gpu=1"}, append([]string{"/dev/nvidia1"}, control...)},
		{"GPU 2 by UUID brings its node and the control nodes", []string{"nvmock.io/gpu=" + ids[2].UUID}, append([]string{"/dev/nvidia2"}, control...)},
		{"all brings every GPU node and the control nodes", []string{"nvmock.io/gpu=all"}, append([]string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"}, control...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
			if _, err := cache.InjectDevices(o, tc.devices...); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range o.Linux.Devices {
				got = append(got, d.Path)
				if d.Major != 1 || d.Minor != 3 {
					t.Errorf("%s is %d:%d, want the inert 1:3", d.Path, d.Major, d.Minor)
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.nodes))
			if !slices.Equal(got, want) {
				t.Errorf("device nodes %v, want %v", got, want)
			}
			if !slices.Contains(o.Process.Env, "NVIDIA_VISIBLE_DEVICES=void") {
				t.Errorf("env %v lacks NVIDIA_VISIBLE_DEVICES=void", o.Process.Env)
			}
		})
	}
}

func TestTheNFDFileHasTheGPULabels(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name, profile string
		gpus          int
		want          string
	}{
		{"eight A100s", "a100", 8, "nvidia.com/gpu.present=true\nnvidia.com/gpu.product=NVIDIA-A100-SXM4-40GB\nnvidia.com/gpu.count=8\nnvidia.com/gpu.memory=40960\nnvidia.com/gpu.family=ampere\n"},
		{"two H100s", "h100", 2, "nvidia.com/gpu.present=true\nnvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3\nnvidia.com/gpu.count=2\nnvidia.com/gpu.memory=81559\nnvidia.com/gpu.family=hopper\n"},
		{"one L40S", "l40s", 1, "nvidia.com/gpu.present=true\nnvidia.com/gpu.product=NVIDIA-L40S\nnvidia.com/gpu.count=1\nnvidia.com/gpu.memory=46068\nnvidia.com/gpu.family=ada-lovelace\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			res := install(t, s.options(testenv.Profile(t, tc.profile, tc.gpus), testenv.FakeDriverAssets(t)))
			got, err := os.ReadFile(res.NFDFile)
			must(t, err)
			// NFD reads key=value lines; their order carries nothing.
			if g, w := sortedLines(string(got)), sortedLines(tc.want); g != w {
				t.Errorf("NFD file:\n%s\nwant (in any order):\n%s", got, tc.want)
			}
		})
	}
}

func names(ents []os.DirEntry) []string {
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// The CDI and NFD directories are shared with other programs and other
// installs: install replaces only a file this root wrote, unchanged since,
// and uninstall removes only such a file. Found in review.
func TestInstallReplacesOnlyTheFilesItWrote(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	p := testenv.Profile(t, "a100", 2)

	t.Run("a user's file is refused, not replaced", func(t *testing.T) {
		s := newSite(t)
		must(t, os.MkdirAll(s.cdi, 0o755))
		spec := filepath.Join(s.cdi, hostprep.CDIFile)
		must(t, os.WriteFile(spec, []byte("mine\n"), 0o644))
		_, err := hostprep.Install(s.options(p, assets))
		if err == nil || !strings.Contains(err.Error(), spec+" exists and this install did not write it") {
			t.Fatalf("install over a user's CDI spec: %v", err)
		}
		if b, _ := os.ReadFile(spec); string(b) != "mine\n" {
			t.Errorf("the user's spec now holds %q", b)
		}
		if _, err := os.Stat(filepath.Dir(s.root)); err == nil {
			t.Errorf("the refused install left %s", filepath.Dir(s.root))
		}
	})

	t.Run("another root's files are refused", func(t *testing.T) {
		s := newSite(t)
		install(t, s.options(p, assets))
		before := contents(t, s.cdi, s.nfd)
		other := s
		other.root = filepath.Join(t.TempDir(), "other")
		if _, err := hostprep.Install(other.options(p, assets)); err == nil || !strings.Contains(err.Error(), "did not write it") {
			t.Fatalf("a second root over the first one's files: %v", err)
		}
		after := contents(t, s.cdi, s.nfd)
		for f, v := range before {
			if after[f] != v {
				t.Errorf("%s changed", f)
			}
		}
	})

	t.Run("a file changed since is left by uninstall and refused by install", func(t *testing.T) {
		s := newSite(t)
		res := install(t, s.options(p, assets))
		f, err := os.OpenFile(res.CDIFile, os.O_APPEND|os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteString("# my note\n")
		must(t, err)
		must(t, f.Close())
		if _, err := hostprep.Install(s.options(testenv.Profile(t, "a100", 3), assets)); err == nil || !strings.Contains(err.Error(), "was changed since nvmock wrote it") {
			t.Errorf("install over an edited spec: %v", err)
		}
		if _, err := hostprep.Uninstall(s.root, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(res.CDIFile); err != nil {
			t.Errorf("uninstall removed the edited spec: %v", err)
		}
		if _, err := os.Stat(res.NFDFile); err == nil {
			t.Errorf("uninstall left the NFD file, which nobody changed")
		}
	})

	t.Run("a file the manifest has no checksum for is left by uninstall", func(t *testing.T) {
		s := newSite(t)
		install(t, s.options(p, assets))
		mine := filepath.Join(t.TempDir(), "mine.txt")
		must(t, os.WriteFile(mine, []byte("precious\n"), 0o644))
		mf := filepath.Join(s.root, hostprep.ManifestFile)
		b, err := os.ReadFile(mf)
		must(t, err)
		var m map[string]any
		must(t, json.Unmarshal(b, &m))
		m["files"] = append(m["files"].([]any), mine)
		b, err = json.Marshal(m)
		must(t, err)
		must(t, os.WriteFile(mf, b, 0o644))
		var log strings.Builder
		if _, err := hostprep.Uninstall(s.root, &log); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(mine); string(b) != "precious\n" {
			t.Errorf("uninstall took a file the manifest had no checksum for: %q", b)
		}
		if !strings.Contains(log.String(), "left "+mine+": the manifest has no checksum for it") {
			t.Errorf("uninstall said:\n%s", log.String())
		}
	})

	t.Run("a file changed since is left when install moves to another directory", func(t *testing.T) {
		s := newSite(t)
		res := install(t, s.options(p, assets))
		must(t, os.WriteFile(res.CDIFile, []byte("# my spec now\n"), 0o644))
		s.cdi = filepath.Join(t.TempDir(), "cdi2")
		install(t, s.options(p, assets))
		if b, _ := os.ReadFile(res.CDIFile); string(b) != "# my spec now\n" {
			t.Errorf("the edited spec in the old directory: %q", b)
		}
	})
}

// An install that fails after it recorded itself (here the NFD file cannot
// be replaced: chattr +i) leaves a manifest naming both installs' files:
// the next install goes through, and uninstall removes everything.
func TestAnInstallThatFailsLateIsStillUninstalled(t *testing.T) {
	needRoot(t)
	chattr := testenv.Tool(t, "chattr")
	assets := testenv.FakeDriverAssets(t)
	for _, then := range []string{"install again", "uninstall"} {
		t.Run(then, func(t *testing.T) {
			s := newSite(t)
			res := install(t, s.options(testenv.Profile(t, "a100", 2), assets))
			if out, err := exec.Command(chattr, "+i", res.NFDFile).CombinedOutput(); err != nil {
				testenv.Missing(t, "chattr +i on %s: %v: %s", res.NFDFile, err, out)
			}
			_, err := hostprep.Install(s.options(testenv.Profile(t, "a100", 3), assets))
			exec.Command(chattr, "-i", res.NFDFile).Run()
			if err == nil || !strings.Contains(err.Error(), "operation not permitted") {
				t.Fatalf("install over an immutable NFD file: %v", err)
			}
			if then == "install again" {
				install(t, s.options(testenv.Profile(t, "a100", 3), assets))
			}
			if _, err := hostprep.Uninstall(s.root, nil); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{res.CDIFile, res.NFDFile, s.root} {
				if _, err := os.Stat(f); err == nil {
					t.Errorf("%s left behind", f)
				}
			}
		})
	}
}

// A node that moves from pool A to pool B: B's pod installs while A's
// preStop waits to uninstall. A's uninstall, on A's behalf, leaves B's
// install alone; an install that only changes hands is not "unchanged".
// Found in review.
func TestAnUninstallForAnotherOwnerLeavesTheInstall(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	o := s.options(testenv.Profile(t, "a100", 2), assets)
	o.Owner = "nvmock/nvmock-a"
	install(t, o)
	o.Owner = "nvmock/nvmock-b"
	res, err := hostprep.Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unchanged {
		t.Error("an install that changed hands was unchanged: its manifest still names the old owner")
	}
	kept, err := hostprep.UninstallOwned(s.root, "nvmock/nvmock-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if kept.KeptFor != "nvmock/nvmock-b" || len(kept.Removed) != 0 {
		t.Fatalf("uninstall for the old owner: %+v, want it kept for nvmock/nvmock-b", kept)
	}
	if _, err := os.Stat(filepath.Join(s.root, "driver")); err != nil {
		t.Errorf("the new owner's install lost its driver root: %v", err)
	}
	gone, err := hostprep.UninstallOwned(s.root, "nvmock/nvmock-b", nil)
	if err != nil || gone.KeptFor != "" || len(gone.Removed) == 0 {
		t.Errorf("uninstall for the owner: %+v, %v; want it removed", gone, err)
	}
}

// The same overlay installed again for another owner (a pool renamed, a
// node moved to a pool of the same board) keeps the node's live state: its
// MIG instances and loads, as on the GPUs. A new overlay starts afresh.
// Found in review: a renamed pool destroyed the MIG devices of running pods.
func TestAnInstallThatOnlyChangesHandsKeepsTheLiveState(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	o := s.options(testenv.Profile(t, "a100", 2), assets)
	o.Render.MIG = "0=all-1g.5gb"
	o.Owner = "nvmock/nvmock-a"
	install(t, o)
	statePath := filepath.Join(s.root, hostprep.StateFile)
	// One 1g.5gb destroyed by hand, as nvidia-smi mig -dci/-dgi would.
	destroyOneGI(t, statePath)
	if n := migCount(t, statePath); n != 6 {
		t.Fatalf("%d GPU instances before the change of hands, want 6", n)
	}
	o.Owner = "nvmock/nvmock-b"
	install(t, o)
	if n := migCount(t, statePath); n != 6 {
		t.Errorf("after the same overlay changed hands: %d GPU instances, want the 6 the node had", n)
	}
	o.Render.Profile = testenv.Profile(t, "a100", 1)
	o.Render.MIG = "all-1g.5gb"
	install(t, o)
	if n := migCount(t, statePath); n != 7 {
		t.Errorf("a new overlay: %d GPU instances, want the layout's 7", n)
	}
}

// A leaving pod that keeps the install for another pool's DaemonSet hands
// it over, so that the other pool's own leaving removes it even when its
// pod installed first (review).
func TestHandOverGivesTheInstallToTheDaemonSetThatKeepsIt(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	o := s.options(testenv.Profile(t, "a100", 1), testenv.FakeDriverAssets(t))
	o.Owner = "nvmock/nvmock-a"
	install(t, o)
	if ok, err := hostprep.HandOver(s.root, "nvmock/nvmock-a", "nvmock/nvmock-b"); !ok || err != nil {
		t.Fatalf("hand over from the owner: %v, %v", ok, err)
	}
	if ok, err := hostprep.HandOver(s.root, "nvmock/nvmock-a", "nvmock/nvmock-c"); ok || err != nil {
		t.Errorf("hand over from one that no longer owns it: %v, %v", ok, err)
	}
	if res, err := hostprep.UninstallOwned(s.root, "nvmock/nvmock-a", nil); err != nil || res.KeptFor != "nvmock/nvmock-b" {
		t.Errorf("uninstall for the old owner: %+v, %v; want it kept for nvmock/nvmock-b", res, err)
	}
	if res, err := hostprep.UninstallOwned(s.root, "nvmock/nvmock-b", nil); err != nil || res.KeptFor != "" || len(res.Removed) == 0 {
		t.Errorf("uninstall for the new owner: %+v, %v; want it removed", res, err)
	}
	if ok, err := hostprep.HandOver(filepath.Join(t.TempDir(), "none"), "a", "b"); ok || err != nil {
		t.Errorf("nothing installed: %v, %v", ok, err)
	}
}

// migCount is how many GPU instances GPU 0 of the state at path has.
func migCount(t *testing.T, path string) int {
	t.Helper()
	st, err := live.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range st.GPUs[0].GIProfile {
		if p != 0 {
			n++
		}
	}
	return n
}

// An install killed while it reset the live state (after its switch)
// leaves the manifest saying so; the next install resets it again rather
// than call the node unchanged. Found by QA: a killed install left an
// a100 node without its MIG layout, and installing it again said
// "unchanged".
func TestAnInterruptedResetIsRedoneNotCalledUnchanged(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	o := s.options(testenv.Profile(t, "a100", 2), testenv.FakeDriverAssets(t))
	o.Render.MIG = "all-1g.5gb"
	install(t, o)
	statePath := filepath.Join(s.root, hostprep.StateFile)
	if n := migCount(t, statePath); n != 7 {
		t.Fatalf("%d GPU instances after install, want 7", n)
	}
	// What a kill between the reset's steps leaves.
	mpath := filepath.Join(s.root, hostprep.ManifestFile)
	var m hostprep.Manifest
	b, err := os.ReadFile(mpath)
	must(t, err)
	must(t, json.Unmarshal(b, &m))
	m.Resetting = true
	b, err = json.Marshal(m)
	must(t, err)
	must(t, os.WriteFile(mpath, b, 0o644))
	must(t, live.Create(statePath, 2, hostprep.StateSeed(node)))

	if res := install(t, o); res.Unchanged {
		t.Fatal("an install after an interrupted reset said unchanged")
	}
	if n := migCount(t, statePath); n != 7 {
		t.Errorf("%d GPU instances after the repair, want the layout's 7", n)
	}
	if !install(t, o).Unchanged {
		t.Error("the install after the repair is not unchanged")
	}
}

// An install of another overlay that fails after it rendered and recorded
// itself, at its switch (here a directory is where it makes its new
// link), leaves the installed node's live state as it was, and installing
// that node again keeps it: the reset comes after the switch, and what
// the driver link points at is what is installed. The reset came before,
// and a failure there cost the node its MIG layout (QA); then a manifest
// naming the failed install reset it (review).
func TestAFailureAtTheSwitchKeepsTheMIGLayout(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	three := s.options(testenv.Profile(t, "a100", 3), assets)
	h3 := install(t, three).Hash
	o := s.options(testenv.Profile(t, "a100", 2), assets)
	o.Render.MIG = "all-1g.5gb"
	first := install(t, o)
	statePath := filepath.Join(s.root, hostprep.StateFile)
	// One 1g.5gb destroyed since, as nvidia-smi mig -dci/-dgi would: a
	// reset to the layout would bring it back.
	destroyOneGI(t, statePath)
	must(t, os.MkdirAll(filepath.Join(s.root, ".driver-"+h3, "x"), 0o755))
	if _, err := hostprep.Install(three); err == nil {
		t.Fatal("an install whose switch cannot be made went through")
	}
	if n := migCount(t, statePath); n != 6 {
		t.Errorf("%d GPU instances after a failed install of another overlay, want the node's 6", n)
	}
	must(t, os.RemoveAll(filepath.Join(s.root, ".driver-"+h3)))
	if res := install(t, o); res.Hash != first.Hash {
		t.Errorf("the first install again: hash %s, want %s", res.Hash, first.Hash)
	}
	if n := migCount(t, statePath); n != 6 {
		t.Errorf("%d GPU instances after installing the node again, want the 6 it kept", n)
	}
	if !install(t, o).Unchanged {
		t.Error("a third install is not unchanged")
	}
}

// destroyOneGI destroys GPU 0's last 1g.5gb instance (id 13) in the state
// at path, as nvidia-smi mig -dci and -dgi would.
func destroyOneGI(t *testing.T, path string) {
	t.Helper()
	lf, err := live.Open(path)
	must(t, err)
	defer lf.Close()
	must(t, lf.Update(func(st *live.State, _ int64) error {
		st.GPUs[0].GIProfile[13], st.GPUs[0].CISlices[13*live.MaxCIs] = 0, 0
		return nil
	}))
}

// A live state of another layout (an older nvmock's, or one cut short) is
// replaced by a new file, and the overlay's link names the new one: the
// library reads the state through it. QA: after an upgrade the overlay
// still linked the old file, so nvidia-smi saw no MIG layout and ctl's
// changes never reached it.
func TestAStateOfAnotherLayoutIsReplacedAndTheOverlayLinksTheNewOne(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	for _, gpus := range []int{2, 3} {
		t.Run(map[int]string{2: "the same overlay", 3: "a new overlay"}[gpus], func(t *testing.T) {
			s := newSite(t)
			o := s.options(testenv.Profile(t, "a100", 2), assets)
			o.Render.MIG = "all-1g.5gb"
			install(t, o)
			statePath := filepath.Join(s.root, hostprep.StateFile)
			// An older layout's size, in the file both names share.
			must(t, os.Truncate(statePath, 100000))

			o.Render.Profile = testenv.Profile(t, "a100", gpus)
			res := install(t, o)
			link := filepath.Join(res.Overlay, hostprep.StatePath)
			a, err := os.Stat(link)
			must(t, err)
			b, err := os.Stat(statePath)
			must(t, err)
			if !os.SameFile(a, b) {
				t.Fatalf("%s is not %s after the install replaced it", link, statePath)
			}
			if n := migCount(t, link); n != 7 {
				t.Errorf("%d GPU instances through the overlay's link, want the layout's 7", n)
			}
			if !install(t, o).Unchanged {
				t.Error("the next install is not unchanged")
			}
		})
	}
}

// A node installed by an nvmock older than the manifest's checksums is
// upgraded and uninstalled cleanly: its CDI spec and NFD file are known as
// nvmock's by their content. A file there that is not such content stays.
// QA: the new uninstall left both (the node kept its GPU labels), and an
// install for the chart's owner refused them.
func TestAnInstallFromBeforeChecksumsIsUpgradedAndUninstalled(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	legacy := func(t *testing.T, s site) hostprep.InstallOptions {
		o := s.options(testenv.Profile(t, "a100", 2), assets)
		install(t, o)
		mpath := filepath.Join(s.root, hostprep.ManifestFile)
		var m map[string]any
		b, err := os.ReadFile(mpath)
		must(t, err)
		must(t, json.Unmarshal(b, &m))
		delete(m, "sums")
		delete(m, "owner")
		b, err = json.Marshal(m)
		must(t, err)
		must(t, os.WriteFile(mpath, b, 0o644))
		return o
	}
	cdiFile, nfdFile := func(s site) string { return filepath.Join(s.cdi, hostprep.CDIFile) }, func(s site) string { return filepath.Join(s.nfd, hostprep.NFDFile) }

	t.Run("uninstall", func(t *testing.T) {
		s := newSite(t)
		legacy(t, s)
		if _, err := hostprep.Uninstall(s.root, nil); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{cdiFile(s), nfdFile(s)} {
			if _, err := os.Stat(f); err == nil {
				t.Errorf("%s left by uninstall", f)
			}
		}
	})
	t.Run("install for an owner", func(t *testing.T) {
		s := newSite(t)
		o := legacy(t, s)
		o.Owner = "nvmock/nvmock-default"
		install(t, o)
		if b, _ := os.ReadFile(nfdFile(s)); !strings.Contains(string(b), "nvmock/nvmock-default") {
			t.Errorf("NFD file not rewritten for the owner:\n%s", b)
		}
	})
	t.Run("a user's file stays", func(t *testing.T) {
		s := newSite(t)
		legacy(t, s)
		mine := "# my labels\nexample.com/rack=7\n"
		must(t, os.WriteFile(nfdFile(s), []byte(mine), 0o644))
		if _, err := hostprep.Uninstall(s.root, nil); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(nfdFile(s)); string(b) != mine {
			t.Errorf("the user's NFD file now reads %q", b)
		}
	})
}

// Install writes nothing through a symlink planted in the root, and a first
// install empties no tree it did not make (review: both wrote, replaced
// or removed files outside the root or the user's own).
func TestInstallRefusesSymlinksAndTreesItDidNotMake(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	for _, tc := range []struct {
		name  string
		plant func(root, outside string)
		want  string
	}{
		{"live a symlink", func(root, outside string) { must(t, os.Symlink(outside, filepath.Join(root, "live"))) }, "/live is a symlink, not nvmock's"},
		{"the state a symlink", func(root, outside string) {
			must(t, os.MkdirAll(filepath.Join(root, "live"), 0o755))
			must(t, os.WriteFile(filepath.Join(outside, "empty"), nil, 0o644))
			must(t, os.Symlink(filepath.Join(outside, "empty"), filepath.Join(root, "live", "state")))
		}, "/live/state is a symlink, not nvmock's"},
		{"overlays a symlink", func(root, outside string) { must(t, os.Symlink(outside, filepath.Join(root, "overlays"))) }, "/overlays is a symlink"},
		{"the ports a symlink", func(root, outside string) {
			must(t, os.MkdirAll(filepath.Join(root, "live"), 0o755))
			must(t, os.Symlink(outside, filepath.Join(root, "live", "ib")))
		}, "/live/ib is a symlink"},
		{"an overlay nvmock did not make", func(root, _ string) {
			must(t, os.MkdirAll(filepath.Join(root, "overlays", "0123456789abcdef"), 0o755))
		}, "/overlays holds 0123456789abcdef, and no install of nvmock is recorded in"},
		{"ports nvmock did not make", func(root, _ string) {
			must(t, os.MkdirAll(filepath.Join(root, "live", "ib"), 0o755))
			must(t, os.WriteFile(filepath.Join(root, "live", "ib", "notes"), []byte("mine\n"), 0o644))
		}, "/live/ib holds notes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSite(t)
			outside := t.TempDir()
			must(t, os.WriteFile(filepath.Join(outside, "keep"), []byte("mine\n"), 0o644))
			must(t, os.MkdirAll(s.root, 0o755))
			tc.plant(s.root, outside)
			// Without directories' times: a refused first install made and
			// removed its pending manifest.
			before := contents(t, s.root, outside)
			_, err := hostprep.Install(s.options(testenv.Profile(t, "a100", 2), assets))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "move it away") {
				t.Fatalf("install: %v; want an error with %q", err, tc.want)
			}
			sameTree(t, before, contents(t, s.root, outside), "made by a refused install")
		})
	}
}

// Uninstall removes nothing through a symlink planted in the root after
// install (review: it emptied the link's target of started/ and state).
func TestUninstallFollowsNoPlantedSymlink(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	install(t, s.options(testenv.Profile(t, "t4", 1), testenv.FakeDriverAssets(t)))
	outside := t.TempDir()
	for _, d := range []string{"started", "overlays/0123456789abcdef"} {
		must(t, os.MkdirAll(filepath.Join(outside, d), 0o755))
		must(t, os.WriteFile(filepath.Join(outside, d, "mine"), []byte("mine\n"), 0o644))
	}
	must(t, os.WriteFile(filepath.Join(outside, "state"), []byte("mine\n"), 0o644))
	for _, name := range []string{"live", "overlays"} {
		must(t, os.RemoveAll(filepath.Join(s.root, name)))
	}
	must(t, os.Symlink(outside, filepath.Join(s.root, "live")))
	must(t, os.Symlink(filepath.Join(outside, "overlays"), filepath.Join(s.root, "overlays")))
	before := tree(t, outside)
	if _, err := hostprep.Uninstall(s.root, nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, before, tree(t, outside), "made by uninstall")
}
