package hostprep_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

// Found on the real Kubernetes node: a helm upgrade that made a new overlay
// removed the old one, and running pods' bind mounts of it (the PCI tree,
// /proc/driver, /dev/infiniband) went empty, while nvidia-smi still worked.
// An overlay the plugin lists as in use stays until an install finds it
// unused.
func TestAnInstallKeepsTheOverlaysRunningContainersUse(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	state := filepath.Join(s.root, hostprep.StateFile)
	overlays := func() []string {
		ents, _ := os.ReadDir(filepath.Join(s.root, "overlays"))
		return names(ents)
	}
	first := install(t, s.options(testenv.Profile(t, "a100", 2), assets))
	if err := hostprep.WriteInUse(state, []string{first.Hash}); err != nil {
		t.Fatal(err)
	}
	second := install(t, s.options(testenv.Profile(t, "a100", 3), assets))
	if got := overlays(); !slices.Equal(got, sorted(first.Hash, second.Hash)) {
		t.Fatalf("after a new overlay with the first in use: overlays %v, want both", got)
	}
	if _, err := os.Stat(filepath.Join(s.root, "overlays", first.Hash, "driver", "dev", "nvidia1")); err != nil {
		t.Errorf("the kept overlay lost its files: %v", err)
	}
	// No container uses it now: the next install removes it, even one of
	// the same inputs (a pod restart), which changes nothing else.
	if err := hostprep.WriteInUse(state, nil); err != nil {
		t.Fatal(err)
	}
	again := install(t, s.options(testenv.Profile(t, "a100", 3), assets))
	if got := overlays(); !again.Unchanged || !slices.Equal(got, []string{second.Hash}) {
		t.Errorf("the same inputs again, none in use: unchanged %v, overlays %v, want only %s", again.Unchanged, got, second.Hash)
	}
	if err := hostprep.WriteInUse(state, []string{second.Hash}); err != nil {
		t.Fatal(err)
	}
	third := install(t, s.options(testenv.Profile(t, "a100", 4), assets))
	if got := overlays(); !slices.Equal(got, sorted(second.Hash, third.Hash)) {
		t.Errorf("with the second in use: overlays %v, want it and the third", got)
	}
	// Uninstall leaves no list behind.
	if _, err := hostprep.Uninstall(s.root, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(hostprep.InUseFile(state)); err == nil {
		t.Errorf("uninstall left %s", hostprep.InUseFile(state))
	}
}

// A new overlay writes the live InfiniBand state over the old in place:
// running containers bind-mount each HCA's ports directory, which must
// stay the one they mounted (before, it was replaced, and they saw it
// empty).
func TestANewOverlayKeepsTheLivePortDirectoriesContainersMount(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	install(t, s.options(testenv.Profile(t, "h100", 8), assets))
	ports := filepath.Join(hostprep.IBLiveDir(filepath.Join(s.root, hostprep.StateFile)), "mlx5_0", "ports")
	before, err := os.Stat(ports)
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(ports) // as a bind mount holds it
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	install(t, s.options(testenv.Profile(t, "h100", 4), assets))
	after, err := os.Stat(ports)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("%s is another directory after a new overlay (%v)", ports, err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), "1/state", &st, 0); err != nil {
		t.Errorf("through the directory held open, 1/state: %v", err)
	}
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}

// A helm upgrade that moves the overlay root runs the new pod beside the
// old one (the DaemonSet surges): the new root's install takes over the
// CDI spec and NFD file the same DaemonSet's install wrote at the old
// root, and the old pod's uninstall leaves them, and the node's labels, to
// it. Another owner's files are still refused. CI found the move stuck:
// the new pod's install refused the old root's CDI spec, and the old pod
// waited for the new one to become ready.
func TestAMovedRootTakesOverTheSameOwnersFiles(t *testing.T) {
	needRoot(t)
	s := newSite(t)
	assets := testenv.FakeDriverAssets(t)
	const owner = "nvmock/nvmock-default"
	o := s.options(testenv.Profile(t, "a100", 2), assets)
	o.Owner = owner
	install(t, o)
	moved := o
	moved.Root = s.root + "-moved"
	res := install(t, moved)
	cdi, _ := os.ReadFile(res.CDIFile)
	if !strings.Contains(string(cdi), moved.Root) {
		t.Errorf("the CDI spec after the move names no driver root in %s:\n%.300s", moved.Root, cdi)
	}
	un, err := hostprep.UninstallOwned(s.root, owner, nil)
	if err != nil {
		t.Fatal(err)
	}
	if un.TakenOver != moved.Root {
		t.Errorf("the old root's uninstall: taken over by %q, want %s", un.TakenOver, moved.Root)
	}
	for _, f := range []string{res.CDIFile, res.NFDFile} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the old root's uninstall removed %s, which the new root's install owns", f)
		}
	}
	other := o
	other.Root, other.Owner = s.root+"-other", "elsewhere/nvmock-default"
	if _, err := hostprep.Install(other); err == nil || !strings.Contains(err.Error(), "this install did not write it") {
		t.Errorf("another owner's install at a third root: %v, want the CDI spec refused", err)
	}
}
