//go:build integration

package test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
)

// nvidia-smi 555 sets persistence through export-table entry 0x7d8 and
// reads back from its third argument, which it leaves uninitialized,
// whether a daemon took the setting: the entry writes 0, as no daemon
// runs (review: a test through nvidia-smi passed whatever the stack held).
func TestThePersistenceEntrySaysNoDaemon(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "persistence")
	gcc(t, "-O1", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "persistence.c"),
		"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1")
	snap, _ := testenv.Snapshot(t, "a100", 1)
	testenv.LiveState(t, snap, 1, time.Time{})
	out, code := run(t, time.Minute, append(testenv.Env(t, snap), "NVMOCK_SMI_TABLE=generic"), bin)
	if want := "persistence 1: Success, daemon 0\npersistence 0: Success, daemon 0\n"; code != 0 || out != want {
		t.Errorf("persistence exited %d:\n%s\nwant:\n%s", code, out, want)
	}
}
