//go:build integration

package gonvml

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

var (
	bbxDurationTag = regexp.MustCompile(`<inforom_bbx_flush>\s*<latest_timestamp>[^<]*</latest_timestamp>\s*<latest_duration>([^<]*)</latest_duration>`)
	memoryPowerTag = regexp.MustCompile(`<gpu_memory_power_readings>\s*<average_power_draw>([^<]*)</average_power_draw>`)
)

// captured is the first GPU's text in a capture for a pattern's group.
func captured(t *testing.T, board string, re *regexp.Regexp) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.Root(), "libnvml", "smi", "testdata", "hardware", "qx-"+board+".xml"))
	if err != nil {
		t.Fatal(err)
	}
	m := re.FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("capture of %s: no match for %s", board, re)
	}
	return m[1]
}

// bootTimeUs is the node's boot in microseconds since the epoch, as the
// kernel gives it.
func bootTimeUs(t *testing.T) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if s, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return sec * 1_000_000
		}
	}
	t.Fatal("/proc/stat has no btime")
	return 0
}

// The BBX object's last flush is the capture's where the board reports one
// (nvidia-smi 535 on prints it: H100, GB200, GB300), made at driver load:
// the node's boot, each GPU after the one before. Boards whose captures
// print N/A answer NOT_SUPPORTED.
func TestBBXFlushIsTheCaptures(t *testing.T) {
	boot := bootTimeUs(t)
	for _, board := range profile.Builtins() {
		t.Run(board, func(t *testing.T) {
			text := captured(t, board, bbxDurationTag)
			lib, _ := startProfile(t, "base: "+board+"\nname: "+board+"\ngpus: 2\n")
			at0, us0, ret0 := deviceAt(t, lib, 0).GetLastBBXFlushTime()
			at1, us1, ret1 := deviceAt(t, lib, 1).GetLastBBXFlushTime()
			if text == "N/A" {
				if ret0 != nvml.ERROR_NOT_SUPPORTED || ret1 != nvml.ERROR_NOT_SUPPORTED {
					t.Errorf("GetLastBBXFlushTime: %v, %v; want NOT_SUPPORTED as the capture's N/A", ret0, ret1)
				}
				return
			}
			want, err := strconv.ParseUint(strings.TrimSuffix(text, " us"), 10, 64)
			if err != nil {
				t.Fatalf("capture's duration %q: %v", text, err)
			}
			if ret0 != nvml.SUCCESS || ret1 != nvml.SUCCESS {
				t.Fatalf("GetLastBBXFlushTime: %v, %v", ret0, ret1)
			}
			if uint64(us0) != want || uint64(us1) != want {
				t.Errorf("durations %d, %d us; want the capture's %d", us0, us1, want)
			}
			// btime and the library each round the boot down to a second
			// from two clocks: they may differ by that second.
			if d := int64(at0) - int64(boot); d < -1_000_000 || d > 1_000_000 {
				t.Errorf("GPU 0 flushed at %d us, %d us from the boot (%d)", at0, d, boot)
			}
			if at1 != at0+uint64(us0) {
				t.Errorf("GPU 1 flushed at %d us, want GPU 0's end %d", at1, at0+uint64(us0))
			}
		})
	}
}

// The GPU memory's power is the capture's average on the HBM boards that
// report it (nvidia-smi 550's "GPU Memory Power Readings"); no board reports
// an instant reading for it, nor any board without it an average.
func TestMemoryPowerIsTheCaptures(t *testing.T) {
	memory := uint32(nvml.POWER_SCOPE_MEMORY)
	for _, board := range profile.Builtins() {
		t.Run(board, func(t *testing.T) {
			text := captured(t, board, memoryPowerTag)
			lib, _ := startProfile(t, "base: "+board+"\nname: "+board+"\n")
			values := []nvml.FieldValue{
				{FieldId: nvml.FI_DEV_POWER_AVERAGE, ScopeId: memory},
				{FieldId: nvml.FI_DEV_POWER_INSTANT, ScopeId: memory},
			}
			if ret := deviceAt(t, lib, 0).GetFieldValues(values); ret != nvml.SUCCESS {
				t.Fatalf("GetFieldValues: %v", ret)
			}
			if r := nvml.Return(values[1].NvmlReturn); r != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("instant memory power: %v, want NOT_SUPPORTED as every capture's N/A", r)
			}
			r := nvml.Return(values[0].NvmlReturn)
			if text == "N/A" {
				if r != nvml.ERROR_NOT_SUPPORTED {
					t.Errorf("average memory power: %v, want NOT_SUPPORTED as the capture's N/A", r)
				}
				return
			}
			w, err := strconv.ParseFloat(strings.TrimSuffix(text, " W"), 64)
			if err != nil {
				t.Fatalf("capture's power %q: %v", text, err)
			}
			got := binary.LittleEndian.Uint32(values[0].Value[:4])
			if want := uint32(math.Round(w * 1000)); r != nvml.SUCCESS || got != want {
				t.Errorf("average memory power %d mW (%v), want the capture's %d", got, r, want)
			}
		})
	}
}
