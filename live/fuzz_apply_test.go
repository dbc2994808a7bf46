package live

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"
)

// FuzzApply feeds nvmock ctl apply files (and the chart's live values) to
// ReadSpec and Spec.Apply on a node with content: whatever a file holds,
// it is refused in one line, the reader's naming the file, or applied
// into a state every reader takes.
func FuzzApply(f *testing.F) {
	for _, s := range []string{
		"loads:\n  - gpus: all\n    percent: 30\n    jitter: 5\nfaults:\n  - gpus: \"3\"\n    kind: ecc_uncorrectable\n    in: 10m\n  - gpus: 0-1\n    kind: xid\n    xid: 13\n    probability: 0.001\n",
		"live:\n  loads:\n    - gpus: all\n      percent: 40\n",
		"live:\n  loads: []\n  faults: []\n",
		"faults:\n  - &f\n    gpus: \"0\"\n    kind: thermal\n  - <<: *f\n    gpus: \"1\"\n",
		"faults:\n  - {gpus: all, kind: nvlink_down, link: 3, at: 2026-12-01T20:00:00Z}\n",
		"faults:\n  - {gpus: \"0\", kind: ecc_correctable, count: 99999999999999}\n",
		"loads:\n  - {gpus: all, percent: .nan}\n", "loads: []\nloads: []\n", "null\n", "",
		"faults:\n" + strings.Repeat("  - {gpus: all, kind: lost, afterCalls: 3}\n", 9),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		devs, base := fuzzBase()
		path := filepath.Join(t.TempDir(), "live.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sp, err := ReadSpec(path)
		if err != nil {
			oneLine(t, path, err)
			return
		}
		sp.NeedsBoards()
		s := *(*State)(unsafe.Pointer(&base[0]))
		boards := make([]Board, len(devs))
		for i := range devs {
			boards[i] = BoardOf(&devs[i])
		}
		if err := sp.Apply(&s, boards, 1_800_000_000_000_000_000); err != nil {
			oneLine(t, "", err)
			return
		}
		if err := checkHeader(path, &s.Header); err != nil {
			t.Fatal(err)
		}
		readAll(t, &s, devs)
	})
}
