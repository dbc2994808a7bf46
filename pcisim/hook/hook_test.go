//go:build integration

// Package hook holds the runtime hook's tests; the hook itself is C
// (hook.c, built by make cli). They run the built hook as runc does, on a
// fake container's root file system in a private mount namespace, and read
// what the container's /sys then shows.
package hook

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/ibshim/fabric"
	"github.com/nvmock/nvmock/ibshim/sysfs"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/pcisim"
	"github.com/nvmock/nvmock/profile"
)

// How the hook finds the container: runc runs it in the root file system
// (the bundle's config.json confirms it); other runtimes give it the state
// on stdin.
const (
	inRootfs = "in the root file system, as runc runs it"
	onStdin  = "with the state on stdin, as other runtimes run it"
)

// node is the h100 node the trees are rendered for.
func node(t *testing.T) *profile.Node {
	t.Helper()
	return testenv.Node(t, "h100", 8)
}

// tree renders the node's PCI tree, with its InfiniBand classes when ib,
// plus extra files, into a new directory.
func tree(t *testing.T, n *profile.Node, ib bool, extra ...pcisim.File) string {
	t.Helper()
	files := pciFiles(t, n)
	if ib {
		f, err := fabric.Build(n, "node-a", 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, sysfs.Files(n, f)...)
	}
	dir := filepath.Join(t.TempDir(), "sys")
	if err := pcisim.Write(append(files, extra...), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// builtHook is the hook make cli built, with what running it needs.
func builtHook(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root (the hook mounts, in a mount namespace of its own)")
	}
	testenv.Tool(t, "unshare")
	hook := filepath.Join(testenv.BuildDir(), "bin", "nvmock-hook")
	if _, err := os.Stat(hook); err != nil {
		testenv.Missing(t, "%s (run make cli)", hook)
	}
	return hook
}

// kernels are the hook as run on this kernel, and as on a kernel older
// than 5.6, without openat2 (testdata/noopenat2.c), by name.
func kernels(t *testing.T) map[string]string {
	t.Helper()
	hook := builtHook(t)
	d := t.TempDir()
	filter := filepath.Join(d, "noopenat2")
	src := filepath.Join(testenv.Root(), "pcisim", "hook", "testdata", "noopenat2.c")
	if out, err := exec.Command(testenv.Tool(t, "gcc"), "-O2", "-o", filter, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	old := filepath.Join(d, "hook-without-openat2")
	if err := os.WriteFile(old, []byte("#!/bin/sh\nexec "+filter+" "+hook+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"this kernel": hook, "a kernel without openat2": old}
}

// inContainer makes a bundle whose rootfs has sysfs at rootfs/sys (a plain
// directory when !withSysfs), in a private mount namespace runs the hook
// on tr as how says, then the shell script check in the bundle directory,
// and returns check's output. The mounts end with the namespace.
func inContainer(t *testing.T, hook, tr, how string, withSysfs bool, check string) string {
	t.Helper()
	return inContainerWithProc(t, hook, tr, "", how, withSysfs, check)
}

// inContainerWithProc is inContainer with procfs at rootfs/proc, and the
// hook given proc as the overlay's proc/driver, unless proc is "".
func inContainerWithProc(t *testing.T, hook, tr, proc, how string, withSysfs bool, check string) string {
	t.Helper()
	bundle := t.TempDir()
	for _, d := range []string{"sys", "proc"} {
		if err := os.MkdirAll(filepath.Join(bundle, "rootfs", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// containerd writes root.path relative to the bundle; other runtimes
	// may write it absolute.
	root := "rootfs"
	if how == onStdin {
		root = filepath.Join(bundle, "rootfs")
	}
	config := fmt.Sprintf(`{"ociVersion":"1.2.0","root":{"path":%q,"readonly":true},"hooks":{}}`, root)
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
b=$1 hook=$2 tree=$3 how=$4 sysfs=$5 proc=$6
[ "$sysfs" = no ] || mount -t sysfs sysfs "$b/rootfs/sys"
[ -z "$proc" ] || mount -t proc proc "$b/rootfs/proc"
if [ "$how" = rootfs ]; then
	# No state on stdin: the hook must not need it.
	(cd "$b/rootfs" && "$hook" pcisim "$tree" $proc </dev/null)
else
	(cd / && printf '{"ociVersion":"1.2.0","id":"c","status":"creating","pid":%d,"bundle":"%s"}' $$ "$b" | "$hook" pcisim "$tree" $proc)
fi
cd "$b"
set +e
` + check
	how, sysfs := "rootfs", "yes"
	if how == onStdin {
		how = "stdin"
	}
	if !withSysfs {
		sysfs = "no"
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", bundle, hook, tr, how, sysfs, proc)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hook and check: %v\n%s", err, out)
	}
	return string(out)
}

// plainConfig is a bundle's config.json with its root file system at rootfs.
const plainConfig = `{"ociVersion":"1.2.0","root":{"path":"rootfs"},"hooks":{}}`

// bareBundle makes bundle d for a test's own script: rootfs/sys and
// rootfs/proc (empty: the script mounts what it wants there), config.json,
// and the directories dirs.
func bareBundle(t *testing.T, d, config string, dirs ...string) {
	t.Helper()
	for _, p := range append(dirs, filepath.Join(d, "rootfs", "sys"), filepath.Join(d, "rootfs", "proc")) {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "config.json"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
}

// sections splits out at the script's "--" lines into want parts.
func sections(t *testing.T, out string, want int) []string {
	t.Helper()
	parts := strings.Split(out, "--\n")
	if len(parts) != want {
		t.Fatalf("want %d sections, got %d:\n%s", want, len(parts), out)
	}
	return parts
}

// names lists a directory, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// union is the sorted names of a and b, each once.
func union(a, b []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(a), b...))))
}

// The tree's classes, its InfiniBand ones and pci_bus, are in the
// container's sys/class, read-only, beside the host's others, whose links
// still resolve; whichever way the runtime runs the hook. A class no
// kernel has makes it cover sys/class whether or not this host has RDMA.
func TestTheContainersSysClassHoldsTheTreesInfiniBandClassesBesideTheHosts(t *testing.T) {
	hook := builtHook(t)
	n := node(t)
	tr := tree(t, n, true, pcisim.File{Path: "class/nvmock_only/x", Data: []byte("x\n")})
	classes := names(t, filepath.Join(tr, "class"))
	ibClasses := slices.DeleteFunc(slices.Clone(classes), func(c string) bool { return !strings.HasPrefix(c, "infiniband") })
	if !slices.Equal(ibClasses, []string{"infiniband", "infiniband_mad", "infiniband_verbs"}) || !slices.Contains(classes, "pci_bus") {
		t.Fatalf("the tree's classes: %v", classes)
	}
	guid, err := os.ReadFile(filepath.Join(tr, "class", "infiniband", "mlx5_0", "node_guid"))
	if err != nil {
		t.Fatal(err)
	}
	host := names(t, "/sys/class")
	for _, how := range []string{inRootfs, onStdin} {
		t.Run(how, func(t *testing.T) {
			out := inContainer(t, hook, tr, how, true, `c=rootfs/sys/class
cat $c/infiniband/mlx5_0/node_guid; echo --
ls -1 $c; echo --
for d in infiniband infiniband_mad infiniband_verbs; do ls -1 $c/$d; done; echo --
ls -1 $c/net; echo --
cat $c/net/lo/ifindex; echo --
stat -f -c %T $c $c/net $c/infiniband; echo --
touch $c/new 2>&1; mkdir $c/infiniband/new 2>&1; touch $c/infiniband_verbs/abi_version 2>&1; echo --
ls rootfs/sys/bus/pci/devices | wc -l`)
			p := sections(t, out, 8)
			if p[0] != string(guid) {
				t.Errorf("mlx5_0's node_guid reads %q, the tree's %q", p[0], guid)
			}
			if got, want := testenv.Lines(p[1]), union(host, classes); !slices.Equal(got, want) {
				t.Errorf("sys/class lists %v; want the host's and the tree's: %v", got, want)
			}
			var want []string
			for _, c := range ibClasses {
				want = append(want, names(t, filepath.Join(tr, "class", c))...)
			}
			if got := testenv.Lines(p[2]); !slices.Equal(got, want) {
				t.Errorf("the InfiniBand classes list %v, the tree's %v", got, want)
			}
			// Not the whole list: the host's veths come and go.
			if got := testenv.Lines(p[3]); !slices.Contains(got, "lo") {
				t.Errorf("sys/class/net lists %v, want the host's, lo among them", got)
			}
			// The host's class links still resolve, through sys/devices.
			if p[4] != "1\n" {
				t.Errorf("sys/class/net/lo/ifindex reads %q, want 1", p[4])
			}
			if got := testenv.Lines(p[5]); len(got) != 3 || got[0] != "tmpfs" || got[1] != "sysfs" || got[2] == "sysfs" {
				t.Errorf("file systems of sys/class, its net and infiniband: %v, want tmpfs, sysfs and the tree's", got)
			}
			if got := testenv.Lines(p[6]); len(got) != 3 || !all(got, "Read-only file system") {
				t.Errorf("writing to sys/class and the tree's classes:\n%s\nwant three read-only errors", p[6])
			}
			if got, want := strings.TrimSpace(p[7]), fmt.Sprint(len(pcisim.Devices(n))); got != want {
				t.Errorf("sys/bus/pci/devices lists %s devices, the tree %s", got, want)
			}
		})
	}
}

// all says whether every line contains sub.
func all(lines []string, sub string) bool {
	for _, l := range lines {
		if !strings.Contains(l, sub) {
			return false
		}
	}
	return true
}

// A host with HCAs of its own (a class/infiniband) shows the tree's only.
func TestATreesClassReplacesTheHostsOfTheSameName(t *testing.T) {
	hook := builtHook(t)
	host := names(t, "/sys/class")
	if len(host) == 0 {
		t.Fatal("the host's /sys/class is empty")
	}
	// Stand-in for the host's own infiniband: one of its classes, which
	// the tree renders too.
	name := host[0]
	if slices.Contains(host, "mem") {
		name = "mem"
	}
	n := node(t)
	tr := tree(t, n, true, pcisim.File{Path: "class/" + name + "/nvmock", Data: []byte("the tree's\n")})
	out := inContainer(t, hook, tr, inRootfs, true, "ls -1 rootfs/sys/class/"+name+"; echo --; ls -1 rootfs/sys/class")
	p := sections(t, out, 2)
	if p[0] != "nvmock\n" {
		t.Errorf("sys/class/%s lists\n%swant the tree's alone: nvmock", name, p[0])
	}
	if got, want := testenv.Lines(p[1]), union(host, names(t, filepath.Join(tr, "class"))); !slices.Equal(got, want) {
		t.Errorf("sys/class lists %v, want %v", got, want)
	}
}

// A tree without InfiniBand classes has only classes the kernel has
// (pci_bus): each is bound over the host's, and sys/class stays the host's
// sysfs, with no cover to make.
func TestATreeOfKernelClassesIsBoundOverTheHostsOwn(t *testing.T) {
	hook := builtHook(t)
	n := node(t)
	tr := tree(t, n, false)
	out := inContainer(t, hook, tr, inRootfs, true, `stat -f -c %T rootfs/sys/class rootfs/sys/devices; echo --
grep " $PWD/rootfs/sys/class" /proc/self/mountinfo | cut -d' ' -f5; echo --
ls -1 rootfs/sys/class; echo --
ls rootfs/sys/bus/pci/devices | wc -l; echo --
ls rootfs/sys/class/pci_bus`)
	p := sections(t, out, 5)
	if got := testenv.Lines(p[0]); !slices.Equal(got, []string{"sysfs", "tmpfs"}) {
		t.Errorf("file systems of sys/class and sys/devices: %v, want sysfs (untouched) and tmpfs (covered)", got)
	}
	if got := testenv.Lines(p[1]); len(got) != 1 || !strings.HasSuffix(got[0], "/rootfs/sys/class/pci_bus") {
		t.Errorf("mounts at or below sys/class: %v, want sys/class/pci_bus alone", got)
	}
	if got, want := testenv.Lines(p[4]), names(t, filepath.Join(tr, "class", "pci_bus")); !slices.Equal(got, want) {
		t.Errorf("sys/class/pci_bus lists %v, the tree's %v", got, want)
	}
	if got, want := testenv.Lines(p[2]), names(t, "/sys/class"); !slices.Equal(got, want) {
		t.Errorf("sys/class lists %v, the host's %v", got, want)
	}
	if got, want := strings.TrimSpace(p[3]), fmt.Sprint(len(pcisim.Devices(n))); got != want {
		t.Errorf("sys/bus/pci/devices lists %s devices, the tree %s", got, want)
	}
}

// Debian's ibstat, reading /sys/class/infiniband, lists the tree's HCAs
// in the container's /sys.
func TestIbstatListsTheTreesHCAs(t *testing.T) {
	hook := builtHook(t)
	ibstat := testenv.Tool(t, "ibstat")
	n := node(t)
	tr := tree(t, n, true)
	out := inContainer(t, hook, tr, inRootfs, true, "mount --rbind rootfs/sys /sys && "+ibstat+" -l")
	if got, want := slices.Sorted(slices.Values(testenv.Lines(out))), names(t, filepath.Join(tr, "class", "infiniband")); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("ibstat -l:\n%swant %v", out, want)
	}
}

// A container without sysfs at /sys sees no PCI devices on a real node
// either: the hook leaves it alone.
func TestAContainerWithoutSysfsIsLeftAlone(t *testing.T) {
	hook := builtHook(t)
	tr := tree(t, node(t), true)
	out := inContainer(t, hook, tr, onStdin, false, `ls -A rootfs/sys; grep -c " $PWD/rootfs" /proc/self/mountinfo; true`)
	if out != "0\n" {
		t.Errorf("rootfs/sys's entries and the mounts below rootfs:\n%swant none", out)
	}
}

// procDriver renders an overlay's proc as hostprep does, in short: the
// driver's version, a GPU's information and a MIG capability,
// nvidia-caps/mig-minors, and the majors of NVIDIA's modules.
func procDriver(t *testing.T) string {
	t.Helper()
	top := filepath.Join(t.TempDir(), "proc")
	dir := filepath.Join(top, "driver")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "devices"), []byte(ourDevices), 0o444); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"nvidia/version":                          "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.105.08\n",
		"nvidia/gpus/0000:1b:00.0/information":    "Model: \t\t NVIDIA H100 80GB HBM3\n",
		"nvidia/capabilities/gpu0/mig/gi2/access": "DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
		"nvidia-caps/mig-minors":                  "config 1\nmonitor 2\ngpu0/gi0/access 3\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return top
}

const ourDevices = "Character devices:\n195 nvidia-frontend\n509 nvidia-caps\n\nBlock devices:\n"

// withOurs is the kernel's /proc/devices with ourDevices' lines in its
// character section, by major.
func withOurs(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/devices")
	if err != nil {
		t.Fatal(err)
	}
	chars, blocks, ok := strings.Cut(string(b), "\n\n")
	if !ok {
		t.Fatalf("/proc/devices:\n%s", b)
	}
	lines := strings.Split(chars, "\n")
	type dev struct {
		major int
		name  string
	}
	var devs []dev
	for _, l := range append(lines[1:], "195 nvidia-frontend", "509 nvidia-caps") {
		var d dev
		if _, err := fmt.Sscanf(l, "%d %s", &d.major, &d.name); err != nil {
			t.Fatalf("/proc/devices line %q", l)
		}
		devs = append(devs, d)
	}
	slices.SortStableFunc(devs, func(a, b dev) int { return a.major - b.major })
	out := lines[0] + "\n"
	for _, d := range devs {
		out += fmt.Sprintf("%3d %s\n", d.major, d.name)
	}
	return out + "\n" + blocks
}

// The container's /proc/driver holds the overlay's nvidia and nvidia-caps
// beside the kernel's own entries, read-only, as the kernel module's
// procfs does in a container of a real node (the DRA driver reads MIG
// capabilities there); the namespace's own /proc keeps its driver
// directory as it was.
func TestTheContainersProcDriverHoldsTheOverlaysFiles(t *testing.T) {
	hook := builtHook(t)
	tr := tree(t, node(t), false)
	proc := procDriver(t)
	for _, how := range []string{inRootfs, onStdin} {
		t.Run(how, func(t *testing.T) {
			out := inContainerWithProc(t, hook, tr, proc, how, true, `d=rootfs/proc/driver
ls -1 $d; echo --
ls -1 /proc/driver; echo --
cat $d/nvidia/version $d/nvidia-caps/mig-minors $d/nvidia/capabilities/gpu0/mig/gi2/access; echo --
ls $d/nvidia/gpus; echo --
touch $d/nvidia/new $d/x 2>&1 | wc -l; echo --
stat -f -c %T rootfs/proc; ls rootfs/proc/self/status; echo --
cat rootfs/proc/devices; echo --
cat /proc/devices; echo --
ls -A $d | grep -c devices; echo --
stat -c %a $d; true`)
			s := sections(t, out, 10)
			host := names(t, "/proc/driver")
			if got, want := strings.Fields(s[0]), union(host, []string{"nvidia", "nvidia-caps"}); !slices.Equal(got, want) {
				t.Errorf("container's /proc/driver: %v, want %v", got, want)
			}
			if got := strings.Fields(s[1]); !slices.Equal(got, host) && !(len(got) == 0 && len(host) == 0) {
				t.Errorf("the namespace's own /proc/driver became %v, was %v", got, host)
			}
			want := "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.105.08\nconfig 1\nmonitor 2\ngpu0/gi0/access 3\nDeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
			if s[2] != want {
				t.Errorf("the overlay's files in the container:\n%swant\n%s", s[2], want)
			}
			if s[9] != "555\n" {
				t.Errorf("the container's /proc/driver has mode %s, want procfs's 555 (as nvmock exec shows it)", strings.TrimSpace(s[9]))
			}
			if s[3] != "0000:1b:00.0\n" {
				t.Errorf("/proc/driver/nvidia/gpus: %q", s[3])
			}
			if s[4] != "2\n" {
				t.Errorf("writes into /proc/driver were not both refused (%s lines of errors)", strings.TrimSpace(s[4]))
			}
			if !strings.HasPrefix(s[5], "proc\n") || !strings.Contains(s[5], "rootfs/proc/self/status") {
				t.Errorf("the rest of the container's procfs:\n%s", s[5])
			}
			kernel, err := os.ReadFile("/proc/devices")
			if err != nil {
				t.Fatal(err)
			}
			if want := withOurs(t); s[6] != want {
				t.Errorf("the container's /proc/devices:\n%swant the kernel's with NVIDIA's majors:\n%s", s[6], want)
			}
			if s[7] != string(kernel) {
				t.Errorf("the namespace's own /proc/devices changed:\n%s", s[7])
			}
			if s[8] != "0\n" {
				t.Errorf("the merged devices file is left in /proc/driver")
			}
		})
	}
}

// A container without procfs at /proc has no driver files on a real node
// either: the hook leaves its /proc alone.
func TestAContainerWithoutProcfsKeepsItsProc(t *testing.T) {
	hook := builtHook(t)
	tr := tree(t, node(t), false)
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	for _, d := range []string{"sys", "proc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"rootfs"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", `cd "$1/rootfs" && "$2" pcisim "$3" "$4" </dev/null && ls -A proc`, "sh", bundle, hook, tr, procDriver(t))
	got, err := cmd.CombinedOutput()
	if err != nil || len(got) != 0 {
		t.Errorf("hook on a container whose /proc is not procfs: %v\n%s", err, got)
	}
}

// BenchmarkHook is the hook's time for one container: h100's tree at
// /sys, with and without the driver's procfs files at /proc, and, as the
// baseline, on a container with neither (its start, exec included, and
// finding the root file system). Each run is in a fresh mount namespace;
// hook-ms is the hook's time alone, measured around it in there.
func BenchmarkHook(b *testing.B) {
	hook := filepath.Join(testenv.BuildDir(), "bin", "nvmock-hook")
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	if _, err := os.Stat(hook); err != nil {
		b.Skipf("%s (run make cli)", hook)
	}
	n := testenv.Node(b, "h100", 8)
	dir := b.TempDir()
	tr := filepath.Join(dir, "sys")
	if err := pcisim.Write(pciFiles(b, n), tr); err != nil {
		b.Fatal(err)
	}
	proc := filepath.Join(dir, "proc")
	if err := os.MkdirAll(filepath.Join(proc, "driver", "nvidia-caps"), 0o755); err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string]string{"devices": ourDevices, "driver/nvidia/version": "NVRM version\n", "driver/nvidia-caps/mig-minors": "config 1\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(proc, name)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, name), []byte(data), 0o444); err != nil {
			b.Fatal(err)
		}
	}
	// The same tree with h100's HCAs, and their live ports (nvmock ctl ib).
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		b.Fatal(err)
	}
	trIB, live := filepath.Join(dir, "sys-ib"), filepath.Join(dir, "ib")
	if err := pcisim.Write(append(pciFiles(b, n), sysfs.Files(n, f)...), trIB); err != nil {
		b.Fatal(err)
	}
	if err := pcisim.Write(sysfs.LivePorts(n, f, true), live); err != nil {
		b.Fatal(err)
	}
	bundle := filepath.Join(dir, "bundle")
	for _, d := range []string{"rootfs/sys", "rootfs/proc"} {
		if err := os.MkdirAll(filepath.Join(bundle, d), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"rootfs"}}`), 0o644); err != nil {
		b.Fatal(err)
	}
	// bash's EPOCHREALTIME: no process to fork for the clock.
	script := `if [ "$5" = mount ]; then mount -t sysfs sysfs "$1/rootfs/sys" && mount -t proc proc "$1/rootfs/proc"; fi && cd "$1/rootfs" &&
s=${EPOCHREALTIME/./} && "$2" pcisim "$3" $4 </dev/null && echo $(( ${EPOCHREALTIME/./} - s ))`
	for _, c := range []struct{ name, tree, proc, mount string }{
		{"nothing", tr, "", "no"}, {"sys", tr, "", "mount"}, {"sys+proc", tr, proc, "mount"},
		{"sys+proc+ib", trIB, proc, "mount"}, {"sys+proc+ib+live", trIB, proc + " " + live, "mount"},
	} {
		b.Run(c.name, func(b *testing.B) {
			var total float64
			for b.Loop() {
				out, err := exec.Command("unshare", "-m", "--propagation", "private", "bash", "-c", script, "bash", bundle, hook, c.tree, c.proc, c.mount).CombinedOutput()
				var us float64
				if _, serr := fmt.Sscan(string(out), &us); err != nil || serr != nil {
					b.Fatalf("%v %v: %s", err, serr, out)
				}
				total += us
			}
			b.ReportMetric(total/float64(b.N)/1e3, "hook-ms")
		})
	}
}

// The node's live InfiniBand ports show over the tree's, read-only, and a
// file replaced there while the container runs (nvmock ctl ib) shows at
// once; a container without sysfs is still left alone.
func TestLiveInfiniBandPortsShowOverTheTreesPorts(t *testing.T) {
	hook := builtHook(t)
	n := node(t)
	tr := tree(t, n, true)
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(t.TempDir(), "ib")
	if err := pcisim.Write(sysfs.LivePorts(n, f, true), live); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(live, "mlx5_0", "ports", "1", "state")
	out := inContainerWithProc(t, hook, tr, "- "+live, inRootfs, true, fmt.Sprintf(`p=rootfs/sys/class/infiniband/mlx5_0/ports/1
cat $p/state; echo --
printf '1: DOWN\n' > %[1]s.new && mv %[1]s.new %[1]s && cat $p/state; echo --
echo x 2>/dev/null > $p/state || echo refused; echo --
ls $p/pkeys | wc -l`, state))
	parts := sections(t, out, 4)
	if got := strings.TrimSpace(parts[0]); got != "4: ACTIVE" {
		t.Errorf("state before: %q", got)
	}
	if got := strings.TrimSpace(parts[1]); got != "1: DOWN" {
		t.Errorf("state after the live file was replaced: %q, want 1: DOWN", got)
	}
	if got := strings.TrimSpace(parts[2]); got != "refused" {
		t.Errorf("a write to the container's port state: %q, want it refused", got)
	}
	if got := strings.TrimSpace(parts[3]); got != "128" {
		t.Errorf("the live ports show %s P_Keys, want the 128 of an InfiniBand port", got)
	}
	out = inContainerWithProc(t, hook, tr, "- "+live, onStdin, false, `grep -c " $PWD/rootfs/sys" /proc/self/mountinfo; true`)
	if strings.TrimSpace(out) != "0" {
		t.Errorf("a container without sysfs got mounts: %s", out)
	}
}

// Asked to, the hook writes its parent's pid as the node numbers it: runc's
// init, which becomes the container's process, runs it in the container's
// own pid namespace (where it is 1) while /proc is still the node's. A pid
// file it cannot write only warns: the container still starts.
func TestTheHookReportsTheContainersPidOnTheNode(t *testing.T) {
	hook := builtHook(t)
	tr := tree(t, node(t), false)
	bundle := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs", "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"root":{"path":"rootfs"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(t.TempDir(), "started")
	if err := os.Mkdir(started, 0o700); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(started, "c1")
	script := `read -r me _ < /proc/self/stat
echo "$$ $me"
cd "$1/rootfs" && "$2" pcisim "$3" - - "$4" </dev/null || exit 1
cd "$1/rootfs" && "$2" pcisim "$3" - - "$4.gone/c2" </dev/null || exit 2
:`
	cmd := exec.Command("unshare", "-m", "-p", "-f", "--propagation", "private", "bash", "-c", script, "bash", bundle, hook, tr, pidFile)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr.String())
	}
	var inNS, onNode string
	fmt.Sscan(string(out), &inNS, &onNode)
	got, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if inNS != "1" || strings.TrimSpace(string(got)) != onNode || onNode == "1" {
		t.Errorf("the hook wrote %q for a parent that is %s on the node (%s in its namespace)", got, onNode, inNS)
	}
	if ents, _ := os.ReadDir(started); len(ents) != 1 {
		t.Errorf("%s holds %d files, want the pid file alone", started, len(ents))
	}
	want := "nvmock-hook: warning: write " + pidFile + ".gone/c2: No such file or directory; the container's GPU process is not shown\n"
	if stderr.String() != want {
		t.Errorf("an unwritable pid file: stderr %q, want %q", stderr.String(), want)
	}
}

// A pod's own volume at /sys/devices (an emptyDir another container
// filled) may hold symlinks, which a bind before pivot_root follows to
// the host: the hook refuses such a directory rather than cover it.
// Found in review: a link to a host file was bound in read-write.
func TestAVolumeOverSysDevicesIsNotCovered(t *testing.T) {
	for name, hook := range kernels(t) {
		t.Run(name, func(t *testing.T) { aVolumeIsNotCovered(t, hook) })
	}
}

func aVolumeIsNotCovered(t *testing.T, hook string) {
	tr := tree(t, node(t), true)
	d := t.TempDir()
	secret := filepath.Join(d, "host-secret")
	if err := os.WriteFile(secret, []byte("host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(d, "volume")
	bareBundle(t, d, plainConfig, vol)
	if err := os.Symlink(secret, filepath.Join(vol, "shadow")); err != nil {
		t.Fatal(err)
	}
	out := hookOverVolume(t, hook, tr, d, "devices", `echo "binds of the link: $(grep -c shadow /proc/self/mountinfo)"`)
	if !strings.Contains(out, "is not the kernel's sysfs or procfs") || strings.Contains(out, "hook exit 0") ||
		!strings.Contains(out, "binds of the link: 0") {
		t.Errorf("the hook over a volume at /sys/devices:\n%s", out)
	}
}

// hookOverVolume runs the hook on tree in bundle dir d, whose sysfs has
// d/volume bound at sys/rel as a pod's volume would be, then the shell
// line check; it returns the hook's words, its exit and check's output.
func hookOverVolume(t *testing.T, hook, tree, d, rel, check string) string {
	t.Helper()
	script := `d=$1 hook=$2 tree=$3
mount -t sysfs sysfs "$d/rootfs/sys" || exit 9
mount --bind "$d/volume" "$d/rootfs/sys/` + rel + `" || exit 9
cd "$d/rootfs" && "$hook" pcisim "$tree" </dev/null
echo "hook exit $?"
` + check + `
true`
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d, hook, tree).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return string(out)
}

// A pod's own volume at /sys/class shows nothing of the node's: the hook
// leaves it, says so, and the container runs; the tree's classes are not
// shown there (review: a board without HCAs had left /sys/class alone,
// and its pci_bus made the hook refuse such a pod).
func TestAVolumeAtSysClassIsLeftAlone(t *testing.T) {
	for name, hook := range kernels(t) {
		t.Run(name, func(t *testing.T) {
			for _, ib := range []bool{false, true} {
				tr := tree(t, node(t), ib)
				d := t.TempDir()
				vol := filepath.Join(d, "volume")
				bareBundle(t, d, plainConfig, vol)
				if err := os.WriteFile(filepath.Join(vol, "pods-own"), []byte("x\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				out := hookOverVolume(t, hook, tr, d, "class", `ls "$d/rootfs/sys/class"`)
				if !strings.Contains(out, "hook exit 0\npods-own\n") || !strings.Contains(out, "/sys/class/pci_bus: a volume or link there") {
					t.Errorf("the hook over a volume at /sys/class (HCAs %v):\n%s", ib, out)
				}
			}
		})
	}
}

// A config.json cut off inside a \u escape is refused without reading past
// its end (an AddressSanitizer build). Found in review.
func TestATruncatedEscapeInConfigIsNotOverRead(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hook-asan")
	src := filepath.Join(testenv.Root(), "pcisim", "hook", "hook.c")
	if out, err := exec.Command(testenv.Tool(t, "gcc"), "-g", "-fsanitize=address", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	b := t.TempDir()
	if err := os.MkdirAll(filepath.Join(b, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Its end at the end of the hook's first read buffer (64 KiB).
	end := `{"root":{"path":"\u4`
	if err := os.WriteFile(filepath.Join(b, "config.json"), []byte(strings.Repeat(" ", 65535-len(end))+end), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "pcisim", "/nonexistent")
	cmd.Dir = filepath.Join(b, "rootfs")
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "AddressSanitizer") {
		t.Errorf("the hook read past the config:\n%s", out)
	}
}

// In a container with Bidirectional volumes (a shared root, as the CRI
// sets it), what the hook mounts stays in the container, and a volume below
// /sys keeps its propagation: a mount the container makes in it reaches
// the node. "host" stands for the node's shared mount holding the tree.
func TestMountsStayInTheContainerAndVolumesKeepTheirPropagation(t *testing.T) {
	for name, hook := range kernels(t) {
		t.Run(name, func(t *testing.T) { mountsStayInTheContainer(t, hook) })
	}
}

func mountsStayInTheContainer(t *testing.T, hook string) {
	n := node(t)
	d := t.TempDir()
	h := filepath.Join(d, "host")
	if err := os.MkdirAll(h, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fabric.Build(n, "node-a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := pcisim.Write(append(pciFiles(t, n), sysfs.Files(n, f)...), filepath.Join(h, "tree")); err != nil {
		t.Fatal(err)
	}
	if err := pcisim.Write(sysfs.LivePorts(n, f, true), filepath.Join(h, "ib")); err != nil {
		t.Fatal(err)
	}
	bareBundle(t, d, plainConfig, filepath.Join(h, "vol", "sub"))
	script := `set -e
d=$1 hook=$2 h=$1/host
mount --bind "$h" "$h"
mount --make-shared "$h"
unshare -m --propagation unchanged sh -ec '
d=$1 hook=$2 h=$1/host
mount -t sysfs sysfs "$d/rootfs/sys"
mount -t proc proc "$d/rootfs/proc"
mount --bind "$h/vol" "$d/rootfs/sys/fs/bpf"
(cd "$d/rootfs" && "$hook" pcisim "$h/tree" - "$h/ib" </dev/null)
mount -t tmpfs from-the-container "$d/rootfs/sys/fs/bpf/sub"
cat "$d/rootfs/sys/class/infiniband/mlx5_0/ports/1/state"' sh "$d" "$hook"
echo --
grep -c from-the-container /proc/self/mountinfo || true
echo --
awk -v h="$h/" 'index($5, h) == 1 && $9 != "tmpfs"' /proc/self/mountinfo`
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d, hook).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	parts := sections(t, string(out), 3)
	if got := strings.TrimSpace(parts[0]); got != "4: ACTIVE" {
		t.Errorf("the container's port state: %q", got)
	}
	if got := strings.TrimSpace(parts[1]); got != "1" {
		t.Errorf("a mount in the container's Bidirectional volume below /sys reached the node %s times, want once", got)
	}
	if got := strings.TrimSpace(parts[2]); got != "" {
		t.Errorf("the hook's mounts reached the node:\n%s", got)
	}
}

// A pod's volume at /sys/bus holding a link named pci: the hook refuses to
// mount through it, which would land, before pivot_root, on the node.
func TestALinkInAVolumeBelowSysIsNotFollowed(t *testing.T) {
	for name, hook := range kernels(t) {
		t.Run(name, func(t *testing.T) { aLinkIsNotFollowed(t, hook) })
	}
}

func aLinkIsNotFollowed(t *testing.T, hook string) {
	tr := tree(t, node(t), false)
	d := t.TempDir()
	bareBundle(t, d, plainConfig, filepath.Join(d, "volume"), filepath.Join(d, "target"))
	if err := os.Symlink(filepath.Join(d, "target"), filepath.Join(d, "volume", "pci")); err != nil {
		t.Fatal(err)
	}
	script := `d=$1 hook=$2 tree=$3
mount -t sysfs sysfs "$d/rootfs/sys" || exit 9
mount --bind "$d/volume" "$d/rootfs/sys/bus" || exit 9
cd "$d/rootfs" && "$hook" pcisim "$tree" </dev/null
echo "hook exit $?"
echo "mounts at the target: $(grep -c " $d/target " /proc/self/mountinfo)"
true`
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d, hook, tr).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(string(out), "/sys/bus/pci: ") || strings.Contains(string(out), "hook exit 0") ||
		!strings.Contains(string(out), "mounts at the target: 0") {
		t.Errorf("the hook with a link at /sys/bus/pci:\n%s", out)
	}
}

// A config.json of megabytes (a pod's large env) is read whole.
func TestALargeConfigIsRead(t *testing.T) {
	hook := builtHook(t)
	tr := tree(t, node(t), false)
	d := t.TempDir()
	bareBundle(t, d, `{"ociVersion":"1.2.0","process":{"env":["BIG=`+strings.Repeat("x", 6<<20)+`"]},"root":{"path":"rootfs"},"hooks":{}}`)
	script := `d=$1 hook=$2 tree=$3
mount -t sysfs sysfs "$d/rootfs/sys" || exit 9
cd "$d/rootfs" && "$hook" pcisim "$tree" </dev/null || exit 1
ls "$d/rootfs/sys/bus/pci/devices" | wc -l`
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d, hook, tr).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.TrimSpace(string(out)) == "0" {
		t.Errorf("no PCI devices shown:\n%s", out)
	}
}

// A bind of the node's own sysfs below the container's /sys (a hostPath
// volume, in a pod on the node's network, where both are one sysfs) is a
// pod volume like any other, also without openat2, and the container is
// refused. Review: the fallback compared devices, which a bind of the same
// sysfs shares, and mounted the tree over the node's /sys/bus.
func TestABindOfTheNodesSysfsBelowSysIsRefused(t *testing.T) {
	for name, hook := range kernels(t) {
		t.Run(name, func(t *testing.T) {
			tr := tree(t, node(t), false)
			d := t.TempDir()
			bareBundle(t, d, plainConfig, filepath.Join(d, "nodesys"))
			script := `d=$1 hook=$2 tree=$3
mount -t sysfs sysfs "$d/nodesys" || exit 9
mount -t sysfs sysfs "$d/rootfs/sys" || exit 9
mount --bind "$d/nodesys/bus" "$d/rootfs/sys/bus" || exit 9
cd "$d/rootfs" && "$hook" pcisim "$tree" </dev/null
echo "hook exit $?"
echo "the node's PCI devices: $(ls "$d/nodesys/bus/pci/devices" | wc -l), the tree's: $(ls "$tree/bus/pci/devices" | wc -l)"
true`
			out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d, hook, tr).CombinedOutput()
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			host, _ := os.ReadDir("/sys/bus/pci/devices")
			if !strings.Contains(string(out), "the container is refused") || strings.Contains(string(out), "hook exit 0") ||
				!strings.Contains(string(out), fmt.Sprintf("the node's PCI devices: %d,", len(host))) {
				t.Errorf("the hook with the node's sysfs bound at /sys/bus:\n%s", out)
			}
		})
	}
}

// The state's and config's own members are read, not a pod's annotations
// of the same name, whatever their order. Review: the first "bundle"
// anywhere was taken.
func TestAnAnnotationNamedBundleOrRootIsNotTaken(t *testing.T) {
	hook := builtHook(t)
	tr := tree(t, node(t), false)
	d, evil := t.TempDir(), t.TempDir()
	// Escaped quotes, braces and backslashes in strings before it (e2e:
	// an env value with a quote ended the string early).
	bareBundle(t, d, `{"ociVersion":"1.2.0","process":{"env":["Q=\"}{[\\","R=\\\"root\":"]},"annotations":{"root":{"path":"`+evil+`"}},"root":{"path":"rootfs"},"hooks":{}}`)
	bareBundle(t, evil, plainConfig)
	script := `d=$1 hook=$2 tree=$3 evil=$4
mount -t sysfs sysfs "$d/rootfs/sys" || exit 9
mount -t sysfs sysfs "$evil/rootfs/sys" || exit 9
(cd / && printf '{"ociVersion":"1.2.0","id":"c","status":"creating","annotations":{"bundle":"%s"},"pid":1,"bundle":"%s"}' "$evil" "$d" | "$hook" pcisim "$tree") || exit 1
echo "container: $(ls "$d/rootfs/sys/bus/pci/devices" | wc -l), other: $(grep -c " $evil/" /proc/self/mountinfo)"`
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", d, hook, tr, evil).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := fmt.Sprintf("container: %d, other: 1", len(names(t, filepath.Join(tr, "bus", "pci", "devices"))))
	if strings.TrimSpace(string(out)) != want {
		t.Errorf("got %q, want %q (the tree in the container's /sys, only the test's own sysfs mount in the other)", out, want)
	}
}

// pciFiles is the node's PCI tree, which the tests' nodes always fit.
func pciFiles(t testing.TB, n *profile.Node) []pcisim.File {
	t.Helper()
	fs, err := pcisim.Files(n)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// refuse fails the container's start with the plugin's reason, which runc
// prints after the hook's name, as NVIDIA's runtime fails a request the
// node cannot meet.
func TestRefuseFailsWithTheReason(t *testing.T) {
	cmd := exec.Command(builtHook(t), "refuse", `nvmock: pod ml/p container c: env NVIDIA_VISIBLE_DEVICES="9" names index "9"`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || stderr.String() != "nvmock: pod ml/p container c: env NVIDIA_VISIBLE_DEVICES=\"9\" names index \"9\"\n" {
		t.Errorf("nvmock-hook refuse: %v, stderr %q; want exit 1 and the reason", err, stderr.String())
	}
}
