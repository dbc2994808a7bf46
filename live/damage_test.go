package live

import (
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/nvmock/nvmock/libnvml/snapshot"
)

// A damaged header is refused by every reader and writer in one line
// naming the file and what is wrong, as the library refuses it.
func TestADamagedHeaderIsOneLineNamingTheFile(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(h *Header)
		want   string
	}{
		{"too many GPUs", func(h *Header) { h.Gpus = 1000 }, "damaged header: 1000 GPUs, at most 64"},
		{"a record size of another layout", func(h *Header) { h.GPUSize = 8 }, "damaged header: record sizes 80/8/40/184"},
		{"another version", func(h *Header) { h.Version = 99 }, "not initialised by this nvmock"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newState(t, 8)
			c.damage(&f.state().Header)
			_, err1 := Open(f.Path)
			_, err2 := ReadFile(f.Path)
			err3 := f.Update(func(*State, int64) error { return nil })
			for _, err := range []error{err1, err2, err3} {
				if err == nil || !strings.Contains(err.Error(), f.Path) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
					t.Errorf("%v, want one line naming %s and %q", err, f.Path, c.want)
				}
			}
		})
	}
}

// Readers and writers drop the MIG instances a board could not have, as
// libnvml/mig.c nvmock_mig_clean does, so Go and the library list the
// same MIG devices. GPU 0 of the fuzz node holds seven 1g.5gb instances.
func TestImpossibleMIGInstancesAreDropped(t *testing.T) {
	devs, base := fuzzBase()
	for _, c := range []struct {
		name   string
		damage func(g *GPU)
		want   int // MIG devices listed
		kept   int // compute instances in the record after a write
	}{
		{"an intact layout keeps all", func(g *GPU) {}, 7, 7},
		{"a profile row past the board's table", func(g *GPU) { g.GIProfile[7] = 99 }, 6, 6},
		{"a start off its profile's placements", func(g *GPU) { g.GIStart[8] = 40 }, 6, 6},
		{"a compute instance past its GPU instance", func(g *GPU) { g.CIStart[8*MaxCIs] = 5 }, 6, 6},
		{"a compute instance of a size its profile lacks", func(g *GPU) { g.CISlices[9*MaxCIs] = 33 }, 6, 6},
		{"a mode neither on nor off takes the snapshot's", func(g *GPU) { g.MIGPending = 7 }, 0, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := *(*State)(unsafe.Pointer(&base[0]))
			c.damage(&s.GPUs[0])
			if got := len(s.MIGDevices(0, &devs[0])); got != c.want {
				t.Errorf("%d MIG devices, want %d", got, c.want)
			}
			// A writer cleans the record it publishes (this one fails:
			// GPU instance 7 is full).
			s.CreateComputeInstance(0, 7, &devs[0], 1)
			n := 0
			for _, sl := range s.GPUs[0].CISlices {
				if sl != 0 {
					n++
				}
			}
			if n != c.kept {
				t.Errorf("after a write the record holds %d compute instances, want %d", n, c.kept)
			}
		})
	}
}

// The board bounds what the library's handles by index give: no more MIG
// devices than its maximum, none on a board without MIG, whatever the
// state holds (libnvml/mig_device.c).
func TestMIGDevicesKeepToTheBoard(t *testing.T) {
	devs, base := fuzzBase()
	s := *(*State)(unsafe.Pointer(&base[0]))
	for _, c := range []struct {
		name  string
		board func(d *snapshot.Device)
		want  int
	}{
		{"the board's maximum", func(d *snapshot.Device) {}, 7},
		{"a maximum of 3", func(d *snapshot.Device) { d.MaxMIGDevices = 3 }, 3},
		{"a maximum of 0", func(d *snapshot.Device) { d.MaxMIGDevices = 0 }, 0},
		{"a board without MIG", func(d *snapshot.Device) { d.MIGCurrent = snapshot.NA }, 0},
	} {
		d := devs[0]
		c.board(&d)
		if got := len(s.MIGDevices(0, &d)); got != c.want {
			t.Errorf("%s: %d MIG devices, want %d", c.name, got, c.want)
		}
	}
}

// Profile names are read as the library reads them (nvmock_mig_name): one
// per row of the board's table, each to a newline or NUL.
func TestMIGNamesAreTheLibrarys(t *testing.T) {
	for _, c := range []struct {
		names string
		count uint32
		want  []string
	}{
		{"1g.5gb\n2g.10gb\n", 2, []string{"1g.5gb", "2g.10gb"}},
		{"1g.5gb\n", 3, []string{"1g.5gb", "", ""}},
		{"1g.5gb\x00junk\n2g.10gb\n", 2, []string{"1g.5gb", "2g.10gb"}},
		{"1g.5gb\n\x00\n3g\n", 3, []string{"1g.5gb", "", "3g"}},
		{"a\nb\nc\n", 1, []string{"a"}},
	} {
		var d snapshot.Device
		copy(d.MIGGINames[:], c.names)
		d.MIGGICount = c.count
		if got := MIGNames(&d); !slices.Equal(got, c.want) {
			t.Errorf("%q, %d rows: %q, want %q", c.names, c.count, got, c.want)
		}
	}
}
