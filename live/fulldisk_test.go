package live_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// A state made on a disk with too little room for it is an error, not a
// SIGBUS at the first store through the map (QA: install on a nearly full
// disk crashed).
func TestCreateOnAFullDiskIsAnError(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		testenv.Missing(t, "a tmpfs at %s: %v", dir, err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, 32<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	err := live.Create(filepath.Join(dir, "state"), 2, 1)
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("a state on a full disk: %v; want no space left on device", err)
	}
}
