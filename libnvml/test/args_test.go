//go:build integration

package test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// Arguments go-nvml never sends, through the C ABI, answered as nvml.h
// says, and NVLinks past a board's as a B200 and a GB200 answer them
// (NVIDIA/TensorRT-LLM #17060, #19210).
func TestArgumentsAreAnsweredAsNVMLSays(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "args")
	gcc(t, "-O1", "-I"+testenv.NVMLHeaderDir(t), "-o", bin, filepath.Join(testDir(), "args.c"),
		"-L"+testenv.LibDir(t), "-l:libnvidia-ml.so.1")
	p, err := profile.Builtin("h100")
	if err != nil {
		t.Fatal(err)
	}
	p.GPUs = 3
	// Given NVLink firmware images, so that a v1 caller's struct is one the
	// library could overrun.
	p.Board.NVLink.Firmware = []profile.NVLinkFirmware{{Ucode: "MSE", Version: "1.2.3"}, {Ucode: "NETIR", Version: "4.5.6"}}
	snap := testenv.SnapshotOf(t, p)
	out, code := run(t, time.Minute, testenv.Env(t, snap), bin)
	want := `handle by domain:bus:device: Success, GPU 0
nearest GPUs: a count with no array: Invalid Argument
nearest GPUs: level 35: Invalid Argument
nearest GPUs: the size: Success, 2
nearest GPUs: an array too small: Success, 1
GPU set: a count with no array: Invalid Argument
GPU set: a count of 0 with an array: Success, 3
GPU set: an array too small: Success, 1
compute processes: a count with no array: Invalid Argument
graphics processes v1: a count with no array: Invalid Argument
MPS processes: the size: Success, 0
inforom DRAM encryption object: Not Supported
inforom object past the enum: Invalid Argument
unit 0 of none: Invalid Argument
unit information of no unit: Invalid Argument
retired pages: a count with no array: Invalid Argument
threshold past the enum: Invalid Argument
threshold acoustic max: Not Supported
versioned temperature of a later version: Argument version mismatch
versioned temperature past the sensors: Invalid Argument
PDI of version 0: Argument version mismatch
repair status of version 0: Argument version mismatch
unrepairable memory flag with no struct: Invalid Argument
BBX flush time with no duration: Invalid Argument
memory power limit: Not Supported
NVLink information v1: Success, nothing written past it
NVLink information of a later version: Argument version mismatch
NVLink information v2: Success, 2 images
processes' utilization of a later version: Argument version mismatch
processes' utilization, none running: Not Found
process detail list of version 0: Invalid Argument
process detail list of mode max: Invalid Argument
process detail list, none running: Success, 0
process detail list: a count with no array: Invalid Argument
HIC versions with no array: Invalid Argument
violation of policy 6, none in the enum: Invalid Argument
handle by an empty UUID: Invalid Argument
state of the last link: Success
state past the links: Invalid Argument
state past NVML_NVLINK_MAX_LINKS: Invalid Argument
P2P capability past the links: Success, 1
capability past NVML_NVLINK_MAX_LINKS: Invalid Argument
`
	if code != 0 || out != want {
		t.Errorf("args exited %d:\n%s", code, testenv.FirstDiff(want, out))
	}
}
