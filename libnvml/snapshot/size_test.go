package snapshot

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/profile"
)

func TestSizeIsTheCompiledLength(t *testing.T) {
	for _, name := range profile.Builtins() {
		p, err := profile.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		data, err := Compile(p, Options{Seed: "s"})
		if err != nil {
			t.Fatal(err)
		}
		boards, _ := p.Boards()
		node, err := p.Node()
		if err != nil {
			t.Fatal(err)
		}
		if got := Size(boards, len(node.PCIe.NICs())); got != uint64(len(data)) {
			t.Errorf("%s: Size says %d bytes, Compile wrote %d", name, got, len(data))
		}
	}
}

// The profile bounds keep every valid profile's snapshot under the limit;
// this fails if the device record grows past what MaxBytes allows for.
func TestTheLargestValidProfileFitsTheLimit(t *testing.T) {
	var b strings.Builder
	fmt.Fprintf(&b, "base: a100\nname: largest\ngpus: %d\nboard:\n  clocks:\n    supported:\n", profile.MaxGPUs)
	for k := 0; k < profile.MaxMemClocks; k++ {
		fmt.Fprintf(&b, "      - {memory: %d, max: %d, min: 1, step: 1}\n", 1000+k, profile.MaxGraphicsClocks)
	}
	p, err := profile.Parse("largest.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	data, err := Compile(p, Options{Seed: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest valid snapshot: %d bytes (limit %d)", len(data), MaxBytes)
	if len(data) > MaxBytes {
		t.Errorf("%d bytes, over MaxBytes %d", len(data), MaxBytes)
	}
}

func TestASnapshotOverTheLimitIsRefusedInOneLine(t *testing.T) {
	if err := checkSize("big", MaxBytes); err != nil {
		t.Errorf("at the limit: %v", err)
	}
	want := "profile big: the snapshot would be 8388609 bytes, over the limit of 8388608 (8 MiB) the library maps; use fewer GPUs or shorter board.clocks.supported lists"
	if err := checkSize("big", MaxBytes+1); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// Before the bounds, a 3,000,000-entry range compiled into 24 MB for 2 GPUs.
func TestCompileRefusesAHugeClockRange(t *testing.T) {
	p := a100(t, 2)
	p.Board.Clocks.Supported = []profile.SupportedClocks{{Memory: 1215, Max: 3000000, Min: 1, Step: 1}}
	_, err := Compile(p, Options{Seed: "s"})
	want := "profile a100: board.clocks.supported[0]: range 3000000 MHz down to 1 by 1 gives 3000000 clocks; at most 1024"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}
