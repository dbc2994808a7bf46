//go:build integration

package hostprep_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

const noexecCaseEnv = "NVMOCK_TEST_NOEXEC_ASSETS"

// An asset on a noexec mount is copied all the same: bound, it would keep
// the flag and not run. The mount is made in a private mount namespace
// (the test re-executes itself there).
func TestAssetsOnANoexecMountAreCopied(t *testing.T) {
	if os.Getenv(noexecCaseEnv) != "" {
		noexecAssets(t)
		return
	}
	needRoot(t)
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		testenv.Missing(t, "mount namespaces (%v)", err)
	}
	inMountNamespace(t, hostNS, noexecCaseEnv+"=1")
}

func noexecAssets(t *testing.T) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if host := os.Getenv(hostMountNSEnv); err != nil || host == "" || self == host {
		t.Fatalf("refusing to mount outside a private mount namespace (self %q, parent %q, %v)", self, host, err)
	}
	noexec := t.TempDir()
	must(t, syscall.Mount("tmpfs", noexec, "tmpfs", syscall.MS_NOEXEC, "size=4m"))
	t.Cleanup(func() { syscall.Unmount(noexec, syscall.MNT_DETACH) })
	render := func(t *testing.T, assets string) *hostprep.Overlay {
		ov, err := hostprep.Render(filepath.Join(t.TempDir(), "ov"), hostprep.Options{
			Profile: testenv.Profile(t, "t4", 1), NodeName: node, Assets: assets, PlainDevFiles: true, NoPCI: true, BindAssets: true,
		})
		must(t, err)
		return ov
	}
	copied := func(t *testing.T, ov *hostprep.Overlay, rel string) {
		if b, err := os.ReadFile(filepath.Join(ov.Driver(), rel)); err != nil || len(b) == 0 {
			t.Errorf("%s not copied: %q, %v", rel, b, err)
		}
	}
	t.Run("assets on the mount", func(t *testing.T) {
		assets := filepath.Join(noexec, "assets")
		must(t, os.CopyFS(assets, os.DirFS(testenv.FakeDriverAssets(t))))
		ov := render(t, assets)
		if ov.Bound != nil {
			t.Errorf("bound %v from a noexec mount", ov.Bound)
		}
		copied(t, ov, "usr/bin/nvidia-smi")
	})
	// Review: the directory was checked, not the files its links lead to.
	t.Run("nvidia-smi a link to the mount", func(t *testing.T) {
		assets := testenv.FakeDriverAssets(t)
		smi := filepath.Join(assets, "usr/bin/nvidia-smi")
		target := filepath.Join(noexec, "nvidia-smi")
		b, err := os.ReadFile(smi)
		must(t, err)
		must(t, os.WriteFile(target, b, 0o755))
		must(t, os.Remove(smi))
		must(t, os.Symlink(target, smi))
		ov := render(t, assets)
		if len(ov.Bound) != 1 || filepath.Base(ov.Bound[0].Dst) == "nvidia-smi" {
			t.Errorf("bound %v; want the library alone", ov.Bound)
		}
		copied(t, ov, "usr/bin/nvidia-smi")
	})
}
