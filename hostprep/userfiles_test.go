package hostprep_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// An install of another layout that fails (here it cannot render: the
// overlays directory is immutable) leaves the installed node's live state
// as it was: the installed overlay links to it. Review: it was reset to
// the new layout first, and the node it left showed idle GPUs of another
// count ("the snapshot has 1 GPUs; reinstall").
func TestAFailedInstallLeavesTheNodesLiveState(t *testing.T) {
	needRoot(t)
	chattr := testenv.Tool(t, "chattr")
	assets := testenv.FakeDriverAssets(t)
	s := newSite(t)
	install(t, s.options(testenv.Profile(t, "a100", 2), assets))
	state := filepath.Join(s.root, hostprep.StateFile)
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	must(t, f.Update(func(st *live.State, _ int64) error { st.GPUs[1].PowerLimitMW = 250000; return nil }))
	overlays := filepath.Join(s.root, "overlays")
	if out, err := exec.Command(chattr, "+i", overlays).CombinedOutput(); err != nil {
		testenv.Missing(t, "chattr +i on %s: %v: %s", overlays, err, out)
	}
	_, err = hostprep.Install(s.options(testenv.Profile(t, "a100", 3), assets))
	exec.Command(chattr, "-i", overlays).Run()
	if err == nil {
		t.Fatal("an install into an immutable overlays directory went through")
	}
	if h := f.Read(); h.Header.Gpus != 2 || h.GPUs[1].PowerLimitMW != 250000 {
		t.Errorf("after the failed install the state has %d GPUs, GPU 1's power limit %d mW; want 2 and 250000 as before", h.Header.Gpus, h.GPUs[1].PowerLimitMW)
	}
}

// What a user had at nvmock's paths in the root stays: a file at the live
// state's path is refused, not taken; a file of theirs in the live
// state's directory keeps the directory at uninstall, which succeeds.
func TestInstallAndUninstallKeepAUsersFilesInTheRoot(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	s := newSite(t)
	state := filepath.Join(s.root, hostprep.StateFile)
	must(t, os.MkdirAll(filepath.Dir(state), 0o755))
	must(t, os.WriteFile(state, []byte("precious\n"), 0o644))
	_, err := hostprep.Install(s.options(testenv.Profile(t, "a100", 2), assets))
	if err == nil || !strings.Contains(err.Error(), state+" exists and is not nvmock's live state; move it away") {
		t.Errorf("install over a user's file at the state's path: %v", err)
	}
	if b, _ := os.ReadFile(state); string(b) != "precious\n" {
		t.Errorf("the user's file became %q", b)
	}

	must(t, os.Remove(state))
	mine := filepath.Join(filepath.Dir(state), "mine")
	must(t, os.WriteFile(mine, []byte("x"), 0o644))
	install(t, s.options(testenv.Profile(t, "a100", 2), assets))
	if _, err := hostprep.Uninstall(s.root, nil); err != nil {
		t.Fatalf("uninstall with a user's file in the state's directory: %v", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("the user's file: %v", err)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the live state stayed: %v", err)
	}
	if res, err := hostprep.Uninstall(s.root, nil); err != nil {
		t.Errorf("uninstall again: %v, %+v", err, res)
	}
}

// A node moved from a board with InfiniBand to one without keeps no empty
// socket directory of the fabric daemon.
func TestABoardWithoutInfiniBandLeavesNoSocketDirectory(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	s := newSite(t)
	install(t, s.options(testenv.Profile(t, "h100", 2), assets))
	dir := filepath.Dir(filepath.Join(s.root, hostprep.IBSocket))
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the h100 node's socket directory: %v", err)
	}
	install(t, s.options(testenv.Profile(t, "t4", 1), assets))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the t4 node kept %s: %v", dir, err)
	}
}

// A symlink of the user's where install's driver link goes is refused,
// as a file or directory there is, and uninstall leaves one it finds.
func TestAUsersDriverSymlinkIsRefusedAndLeft(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	s := newSite(t)
	link := filepath.Join(s.root, "driver")
	must(t, os.MkdirAll(s.root, 0o755))
	must(t, os.Symlink("/opt/my-real-driver", link))
	_, err := hostprep.Install(s.options(testenv.Profile(t, "a100", 1), assets))
	if err == nil || !strings.Contains(err.Error(), link+" exists and is not nvmock's symlink; move it away") {
		t.Errorf("install over a user's symlink: %v", err)
	}
	// One put there after an install is left by uninstall.
	must(t, os.Remove(link))
	install(t, s.options(testenv.Profile(t, "a100", 1), assets))
	must(t, os.Remove(link))
	must(t, os.Symlink("/opt/my-real-driver", link))
	if _, err := hostprep.Uninstall(s.root, nil); err != nil {
		t.Errorf("uninstall: %v", err)
	}
	if got, err := os.Readlink(link); err != nil || got != "/opt/my-real-driver" {
		t.Errorf("the user's symlink: %q, %v", got, err)
	}
}

// An install that waited for an uninstall, which removed the root, makes
// the root again and records it (QA: it failed writing its manifest into
// the removed root, or left the root out of the manifest).
func TestAnInstallAfterAnUninstallThatRemovedTheRoot(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	s := newSite(t)
	o := s.options(testenv.Profile(t, "a100", 1), assets)
	for i := 0; i < 5; i++ {
		install(t, o)
		done := make(chan error, 1)
		go func() { _, err := hostprep.Uninstall(s.root, nil); done <- err }()
		if _, err := hostprep.Install(o); err != nil {
			t.Fatalf("round %d: install beside an uninstall: %v", i, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: uninstall beside an install: %v", i, err)
		}
		// Whichever went last, an uninstall now leaves nothing.
		if _, err := hostprep.Uninstall(s.root, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.root); !os.IsNotExist(err) {
			t.Fatalf("round %d: the root stayed after the last uninstall: %v", i, err)
		}
	}
}

// An install that would change nothing works on a read-only root, and an
// uninstall there names only what it could not remove.
func TestAReadOnlyRoot(t *testing.T) {
	needRoot(t)
	assets := testenv.FakeDriverAssets(t)
	s := newSite(t)
	must(t, os.MkdirAll(s.root, 0o755))
	if err := syscall.Mount("tmpfs", s.root, "tmpfs", 0, "size=64m"); err != nil {
		testenv.Missing(t, "a tmpfs at %s: %v", s.root, err)
	}
	defer syscall.Unmount(s.root, syscall.MNT_DETACH)
	o := s.options(testenv.Profile(t, "a100", 1), assets)
	install(t, o)
	must(t, syscall.Mount("", s.root, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""))
	if res, err := hostprep.Install(o); err != nil || !res.Unchanged {
		t.Errorf("the same install on the read-only root: %+v, %v; want unchanged", res, err)
	}
	_, err := hostprep.Uninstall(s.root, nil)
	if err == nil {
		t.Fatal("uninstall on a read-only root succeeded")
	}
	for _, never := range []string{"xidlog", "ibd.sock", "overlays-in-use"} {
		if strings.Contains(err.Error(), never) {
			t.Errorf("uninstall's error names %s, which was never there: %v", never, err)
		}
	}
}

// The filesystem's root is never nvmock's root: install would replace its
// driver, overlays and live directories (review: it was accepted).
func TestTheRootIsNeverSlash(t *testing.T) {
	d := t.TempDir()
	err := hostprep.CheckDirs("/", filepath.Join(d, "cdi"), filepath.Join(d, "nfd"))
	if err == nil || !strings.Contains(err.Error(), "the root is /; give a directory of nvmock's own") {
		t.Errorf("CheckDirs(/): %v", err)
	}
}
