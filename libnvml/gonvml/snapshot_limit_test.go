//go:build integration

package gonvml

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// A file over snapshot.MaxBytes is refused before it is mapped, with one
// stderr line naming it, as a corrupt snapshot is.
func TestASnapshotOverTheLimitFailsInit(t *testing.T) {
	goodPath, _ := testenv.Snapshot(t, "a100", 0)
	good, err := os.ReadFile(goodPath)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "snapshot")
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, snapshot.MaxBytes+1); err != nil { // sparse: a valid start, then zeros
		t.Fatal(err)
	}
	r := runHelper(t, path)
	checkRet(t, "Init", r.init, nvml.ERROR_UNKNOWN)
	want := fmt.Sprintf("nvmock: snapshot %s: %d bytes, over the limit of %d; recompile it with nvmock profile compile\n", path, snapshot.MaxBytes+1, snapshot.MaxBytes)
	if r.stderr != want {
		t.Errorf("stderr:\n%q\nwant one line:\n%q", r.stderr, want)
	}
	if len(r.uuids) > 0 || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("init went on: %d GPUs, stderr %q", len(r.uuids), r.stderr)
	}
}
