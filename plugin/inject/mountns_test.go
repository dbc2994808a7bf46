package inject

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// TestTheRealNvidiaSMIInAContainerMadeFromTheAdjustmentSeesItsGPUs applies
// an Adjustment as a runtime would (bind mounts, device nodes, environment)
// to a root file system made of the host's /usr and /etc under overlayfs,
// in a private mount namespace, and runs the real nvidia-smi in it with and
// without the environment: the library must be found by name and must find
// the node's snapshot (an H100 profile, not its built-in A100s) through its
// mount path alone, and show exactly the GPUs given.
func TestTheRealNvidiaSMIInAContainerMadeFromTheAdjustmentSeesItsGPUs(t *testing.T) {
	needRoot(t)
	assets := filepath.Join(testenv.BuildDir(), "driver")
	if _, err := os.Stat(filepath.Join(assets, "usr", "bin", "nvidia-smi")); err != nil {
		testenv.Missing(t, "%s/usr/bin/nvidia-smi (run make build)", assets)
	}
	for _, tool := range []string{"unshare", "chroot", "mount", "mknod"} {
		testenv.Tool(t, tool)
	}
	if fi, err := os.Lstat("/lib64"); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		testenv.Missing(t, "a merged-/usr host (/lib64 a symlink), to build a root file system from /usr")
	}
	p := testenv.Profile(t, "h100", 4)
	root := installOverlay(t, p, assets, false)
	node, err := NodeStateFromOverlay(root)
	if err != nil {
		t.Fatal(err)
	}
	node.OptedIn = map[string]bool{"ml": true}
	ids := snapshot.Identities(p, probeNode)

	for _, c := range []struct {
		name string
		libs []string
	}{
		{"with the default library paths", nil},
		// nvidia-smi's RPATH ($ORIGIN/../lib64) then misses: the loader's
		// default directories must find the library.
		{"with the Debian library directory only", []string{"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			adj, ok, err := Decide(Config{LibraryPaths: c.libs}, node, pod("ml", GPUsAnnotation, "0,2"), ctr)
			if err != nil || !ok {
				t.Fatalf("Decide: ok %v, err %v", ok, err)
			}
			want := fmt.Sprintf("GPU 0: %s (UUID: %s)\nGPU 1: %s (UUID: %s)\n", p.Board.ProductName, ids[0].UUID, p.Board.ProductName, ids[2].UUID)
			for _, env := range []bool{true, false} {
				out := runInRootfs(t, adj, env, "/usr/bin/nvidia-smi", "-L")
				if out != want {
					t.Errorf("nvidia-smi -L (environment set: %v):\n%s\nwant:\n%s", env, out, want)
				}
			}
		})
	}

	// The driver alone ("none"): the library loads and finds no GPU. The
	// real nvidia-smi then fails with exit 6; with -L it words it otherwise
	// and succeeds.
	adj, ok, err := Decide(Config{}, node, pod("ml", GPUsAnnotation, "none"), ctr)
	if err != nil || !ok {
		t.Fatalf("Decide for none: ok %v, err %v", ok, err)
	}
	if out := runInRootfs(t, adj, true, "/bin/sh", "-c", "/usr/bin/nvidia-smi; echo exit $?; /usr/bin/nvidia-smi -L"); out != "No devices were found\nexit 6\nNo devices found.\n" {
		t.Errorf("nvidia-smi and nvidia-smi -L given the driver alone:\n%s", out)
	}

	// The check above can fail: without the snapshot mount the library
	// falls back to its built-in A100s.
	adj, _, _ = Decide(Config{}, node, pod("ml", GPUsAnnotation, "0,2"), ctr)
	var noSnap []Mount
	for _, m := range adj.Mounts {
		if m.Source != node.Snapshot {
			noSnap = append(noSnap, m)
		}
	}
	adj.Mounts = noSnap
	// It says so (bf4362d).
	if out := runInRootfs(t, adj, false, "/bin/sh", "-c", "/usr/bin/nvidia-smi -L 2>&1"); strings.Contains(out, p.Board.ProductName) || !strings.Contains(out, "A100") ||
		!strings.Contains(out, "nvmock: no snapshot at /etc/nvmock/snapshot: showing the built-in a100 board") {
		t.Errorf("without the snapshot mount nvidia-smi -L still shows the profile, or says nothing of it:\n%s", out)
	}
}

// TestAStaticImageIsUnharmed gives GPUs to a container whose image is one
// static busybox, with no glibc and no /usr/lib: the added files and nodes
// appear, the environment holds nothing that changes how its programs load,
// and its programs run as before.
func TestAStaticImageIsUnharmed(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"unshare", "chroot", "mount", "mknod", "busybox"} {
		testenv.Tool(t, tool)
	}
	busybox, _ := exec.LookPath("busybox")
	if out, err := exec.Command("file", "-L", busybox).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		testenv.Missing(t, "a static busybox (Debian's busybox-static) at %s: %s", busybox, out)
	}
	p := testenv.Profile(t, "h100", 2)
	node, err := NodeStateFromOverlay(installOverlay(t, p, testenv.FakeDriverAssets(t), false))
	if err != nil {
		t.Fatal(err)
	}
	node.OptedIn = map[string]bool{"ml": true}
	adj, ok, err := Decide(Config{}, node, pod("ml", GPUsAnnotation, "all"), ctr)
	if err != nil || !ok {
		t.Fatalf("Decide: ok %v, err %v", ok, err)
	}
	static := func(line func(string, ...any), q func(string) string, r string) {
		line("mkdir -p %s && cp %s %s", q(r+"/bin"), q(busybox), q(r+"/bin/busybox"))
		line("chroot %s /bin/busybox --install -s /bin", q(r)) // env, ls, grep...
	}
	check := `set -e; echo loads; ls /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl >/dev/null; ` +
		`test -f /usr/bin/nvidia-smi; env | grep -c '^LD_' || true; env | grep '^NVIDIA_VISIBLE_DEVICES=GPU-' >/dev/null; echo done`
	out := runIn(t, static, adj, true, "/bin/busybox", "sh", "-c", check)
	if out != "loads\n0\ndone\n" {
		t.Errorf("in the static image:\n%s", out)
	}
}

// runInRootfs builds a root file system of the host's /usr and /etc,
// applies adj and runs argv in it.
func runInRootfs(t *testing.T, adj Adjustment, withEnv bool, argv ...string) string {
	t.Helper()
	hostUsr := func(line func(string, ...any), q func(string) string, r string) {
		tmp := filepath.Dir(r)
		for _, d := range []string{"usr", "etc"} {
			line("mkdir -p %s %s %s", q(filepath.Join(r, d)), q(filepath.Join(tmp, "up", d)), q(filepath.Join(tmp, "work", d)))
			line("mount -t overlay overlay -o lowerdir=/%s,upperdir=%s,workdir=%s %s", d, filepath.Join(tmp, "up", d), filepath.Join(tmp, "work", d), q(filepath.Join(r, d)))
		}
		for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
			line("ln -s usr/%s %s", l, q(filepath.Join(r, l)))
		}
	}
	return runIn(t, hostUsr, adj, withEnv, argv...)
}

// runIn lays the image with base, applies adj as a runtime would (bind
// mounts, device nodes, environment) in a private mount namespace, and runs
// argv in it.
func runIn(t *testing.T, base func(line func(string, ...any), q func(string) string, r string), adj Adjustment, withEnv bool, argv ...string) string {
	t.Helper()
	tmp := t.TempDir()
	r := filepath.Join(tmp, "rootfs")
	var s strings.Builder
	q := func(p string) string { return "'" + p + "'" }
	line := func(format string, args ...any) { fmt.Fprintf(&s, format+"\n", args...) }
	line("set -e")
	base(line, q, r)
	line("mkdir -p %s %s %s", q(r+"/dev"), q(r+"/proc"), q(r+"/tmp"))
	line("mount -t tmpfs tmpfs %s", q(r+"/dev"))
	line("mount --rbind /proc %s", q(r+"/proc"))
	for _, m := range adj.Mounts {
		dst := r + m.Destination
		line("mkdir -p %s && touch %s", q(filepath.Dir(dst)), q(dst))
		line("mount --bind %s %s && mount -o remount,bind,ro %s", q(m.Source), q(dst), q(dst))
	}
	for _, d := range adj.Devices {
		line("mknod -m %o %s %s %d %d", d.FileMode, q(r+d.Path), d.Type, d.Major, d.Minor)
	}
	run := "chroot " + q(r) + " env -i"
	if withEnv {
		for _, e := range adj.Env {
			run += " " + q(e.Key+"="+e.Value)
		}
	}
	for _, a := range argv {
		run += " " + q(a)
	}
	line("exec %s", run)
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", s.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run %v in the root file system: %v\n%s\nscript:\n%s", argv, err, stderr.String(), s.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
	return string(out)
}
