package snapshot

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/nvmock/nvmock/profile"
)

// The generated C header asserts the same sizes and offsets at compile time,
// so C and Go agree on every field.
func TestGoLayoutMatchesSchema(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      any
		size   int
		layout []FieldOffset
	}{
		{"header", Header{}, HeaderSize, HeaderLayout},
		{"device", Device{}, DeviceSize, DeviceLayout},
		{"nic", NIC{}, NICSize, NICLayout},
	} {
		if got := binary.Size(c.v); got != c.size {
			t.Errorf("%s: binary size %d, schema says %d", c.name, got, c.size)
		}
		if got := int(reflect.TypeOf(c.v).Size()); got != c.size {
			t.Errorf("%s: in-memory size %d, schema says %d", c.name, got, c.size)
		}
		typ := reflect.TypeOf(c.v)
		for _, f := range c.layout {
			sf, ok := typ.FieldByName(f.Go)
			if !ok {
				t.Errorf("%s: no Go field %s", c.name, f.Go)
				continue
			}
			if sf.Offset != f.Offset {
				t.Errorf("%s.%s: Go offset %d, schema %d", c.name, f.C, sf.Offset, f.Offset)
			}
		}
	}
}

// Pinned: a change here means old snapshot files no longer load; bump
// SnapshotVersion in libnvml/gen/schema.go with it.
func TestLayoutIsPinned(t *testing.T) {
	if Version != 13 || HeaderSize != 272 || DeviceSize != 2496 || NICSize != 24 {
		t.Errorf("layout v%d header %d device %d NIC %d changed; bump the version and update this test", Version, HeaderSize, DeviceSize, NICSize)
	}
}

// What a valid profile may hold fits the snapshot's room: Compile copies
// without checking again.
func TestProfileBoundsFitTheLayout(t *testing.T) {
	for _, c := range []struct {
		what              string
		profile, snapshot int
	}{
		{"memory clocks", profile.MaxMemClocks, MaxMemClocks},
		{"MIG profiles", profile.MIGMaxProfiles, MaxMIGProfiles},
		{"NVLink firmware images", profile.MaxNVLinkFirmware, MaxNVLinkFirmware},
	} {
		if c.profile != c.snapshot {
			t.Errorf("%s: a profile may hold %d, the snapshot %d", c.what, c.profile, c.snapshot)
		}
	}
}
