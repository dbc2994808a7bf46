package hostprep

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// A root makeRoot made is on record from the start: an install killed
// right after (before it recorded what it was about to do) leaves nothing
// uninstall misses, the parents it made included (review: such a root was
// left, empty, as if a user's).
func TestARootIsMadeOnRecord(t *testing.T) {
	d := t.TempDir()
	root := filepath.Join(d, "var", "lib", "nvmock")
	created, err := makeRoot(root, "nvmock/nvmock-default")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(d, "var"), filepath.Join(d, "var", "lib"), root}; !slices.Equal(created, want) {
		t.Errorf("made %q, want %q", created, want)
	}
	m, err := readManifest(root)
	if err != nil || m == nil || !m.rootOnly() || !slices.Equal(m.Dirs, created) || m.Owner != "nvmock/nvmock-default" {
		t.Fatalf("the root's manifest %+v (%v), want one of its directories alone", m, err)
	}
	// The install is killed here; uninstall then.
	if _, err := Uninstall(root, nil); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(d); len(left) != 0 {
		t.Errorf("left %v in %s", left, d)
	}
	// A root there already is not made again.
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if created, err := makeRoot(root, ""); err != nil || created != nil {
		t.Errorf("over an existing root: made %q (%v)", created, err)
	}
}

// What a killed install was making beside the root, before renaming it
// into place, goes at the next uninstall with the parents it made; one
// whose install still runs stays.
func TestRootsKilledInstallsWereMakingAreSwept(t *testing.T) {
	d := t.TempDir()
	parent := filepath.Join(d, "var", "lib")
	root := filepath.Join(parent, "nvmock")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	gone, running := newRootTemp(root, dead.Process.Pid), newRootTemp(root, os.Getppid())
	m := Manifest{Version: 1, Dirs: []string{filepath.Join(d, "var"), parent, root}}
	made := func(p string) {
		t.Helper()
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := m.write(p); err != nil {
			t.Fatal(err)
		}
	}
	made(gone)
	made(running)
	if _, err := Uninstall(root, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Errorf("%s of an ended install is still there (%v)", gone, err)
	}
	if _, err := os.Stat(running); err != nil {
		t.Errorf("%s of a running install was removed: %v", running, err)
	}
	// Alone, the ended one's parents go with it.
	if err := os.RemoveAll(running); err != nil {
		t.Fatal(err)
	}
	made(gone)
	if _, err := Uninstall(root, nil); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(d); len(left) != 0 {
		t.Errorf("left %v: the parents a killed install made", left)
	}
}
