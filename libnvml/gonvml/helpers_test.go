//go:build integration

package gonvml

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// The library reads its environment at nvmlInit when it is not initialised,
// so each test sets the environment with t.Setenv and inits go-nvml after.
// go-nvml keeps one refcount per nvml.New instance over the single
// process-wide library; every test shuts its instances down before it ends.

// unsetenv removes key for the rest of the test (t.Setenv restores it).
func unsetenv(t testing.TB, key string) {
	t.Helper()
	t.Setenv(key, "")
	os.Unsetenv(key)
}

// cleanEnv points the library at snapshotPath (unset when empty) with an
// empty dev root, so the host's /dev cannot filter, and no
// NVIDIA_VISIBLE_DEVICES or NVMOCK_VISIBLE_DEVICES. It returns the dev root.
func cleanEnv(t testing.TB, snapshotPath string) string {
	t.Helper()
	if snapshotPath == "" {
		unsetenv(t, "NVMOCK_SNAPSHOT")
	} else {
		t.Setenv("NVMOCK_SNAPSHOT", snapshotPath)
	}
	root := t.TempDir()
	t.Setenv("NVMOCK_DEV_ROOT", root)
	unsetenv(t, "NVIDIA_VISIBLE_DEVICES")
	unsetenv(t, "NVMOCK_VISIBLE_DEVICES")
	unsetenv(t, "NVMOCK_TRACE")
	return root
}

// newLib is a fresh go-nvml instance on the built mock.
func newLib(t testing.TB) nvml.Interface {
	t.Helper()
	return nvml.New(nvml.WithLibraryPath(testenv.Lib(t)))
}

// start inits lib and shuts it down when the test ends.
func start(t testing.TB, lib nvml.Interface) {
	t.Helper()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			t.Errorf("Shutdown: %v", ret)
		}
	})
}

// startSnapshot compiles the a100 profile with n GPUs (0: the profile's
// count), inits a fresh go-nvml on it, and returns the profile.
func startSnapshot(t testing.TB, n int) (nvml.Interface, *profile.Profile) {
	t.Helper()
	path, p := testenv.Snapshot(t, "a100", n)
	cleanEnv(t, path)
	lib := newLib(t)
	start(t, lib)
	return lib, p
}

func cstr(b []int8) string {
	var s []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// check expects SUCCESS and want.
func check[T comparable](t *testing.T, what string, got T, ret nvml.Return, want T) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Errorf("%s: %v, want %v", what, ret, want)
	} else if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// checkOpt expects want, or NOT_SUPPORTED where the profile says N/A (nil).
func checkOpt[T comparable](t *testing.T, what string, got T, ret nvml.Return, want *T) {
	t.Helper()
	if want == nil {
		checkRet(t, what, ret, nvml.ERROR_NOT_SUPPORTED)
		return
	}
	check(t, what, got, ret, *want)
}

func checkRet(t *testing.T, what string, got, want nvml.Return) {
	t.Helper()
	if got != want {
		t.Errorf("%s: returned %v (%d), want %v (%d)", what, got, int32(got), want, int32(want))
	}
}

// optStr is nil for a string the profile leaves out (N/A).
func optStr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// milliwatts is how the snapshot compiler turns the profile's watts into NVML's mW.
func milliwatts(w *float64) *uint32 {
	if w == nil {
		return nil
	}
	v := uint32(math.Round(*w * 1000))
	return &v
}

func clockOf(c profile.ClockSet, ct nvml.ClockType) *uint32 {
	switch ct {
	case nvml.CLOCK_GRAPHICS:
		return c.Graphics
	case nvml.CLOCK_SM:
		return c.SM
	case nvml.CLOCK_MEM:
		return c.Memory
	case nvml.CLOCK_VIDEO:
		return c.Video
	}
	panic(fmt.Sprintf("clock type %d", ct))
}

// graphicsClocks lists the graphics clocks the profile allows at one memory
// clock: explicit, or a range expanded from max down to min by step.
func graphicsClocks(s profile.SupportedClocks) []uint32 {
	if len(s.Graphics) > 0 {
		return s.Graphics
	}
	var out []uint32
	for f := s.Max; f >= s.Min && f > 0; f -= s.Step {
		out = append(out, f)
		if f < s.Step {
			break
		}
	}
	return out
}

func enableState(b bool) nvml.EnableState {
	if b {
		return nvml.FEATURE_ENABLED
	}
	return nvml.FEATURE_DISABLED
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

var clockTypes = []nvml.ClockType{nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM, nvml.CLOCK_MEM, nvml.CLOCK_VIDEO}
