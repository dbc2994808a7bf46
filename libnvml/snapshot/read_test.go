package snapshot

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/libnvml/gen"
)

// Read checks the char arrays the library checks: those the schema makes
// strings (snap_device_strings), found in Go as Device's [N]byte fields.
func TestReadChecksTheLibrarysStrings(t *testing.T) {
	goName := map[string]string{}
	for _, f := range DeviceLayout {
		goName[f.C] = f.Go
	}
	var want, got []string
	for _, f := range gen.Schema[1].Fields {
		if f.Kind == gen.Str {
			want = append(want, goName[f.Name])
		}
	}
	for _, i := range stringFields {
		got = append(got, reflect.TypeOf(Device{}).Field(i).Name)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Read checks %v, the library %v", got, want)
	}
}

// A snapshot the library would not map (libnvml/snapshot.c snap_check) is
// refused by Read, with the library's reason; a sound one is read.
func TestReadRefusesWhatTheLibraryRefuses(t *testing.T) {
	data, err := Compile(a100(t, 2), Options{Seed: "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, devs, err := Read(data); err != nil || len(devs) != 2 {
		t.Fatalf("a compiled snapshot: %d devices, %v", len(devs), err)
	}
	h0, devs0, _ := decode(t, data)
	rest := data[HeaderSize+len(devs0)*DeviceSize:]
	encode := func(h Header, devs []Device, tail []byte) []byte {
		var b bytes.Buffer
		if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
			t.Fatal(err)
		}
		if err := binary.Write(&b, binary.LittleEndian, devs); err != nil {
			t.Fatal(err)
		}
		return append(b.Bytes(), tail...)
	}
	header := func(f func(h *Header)) []byte {
		h := h0
		f(&h)
		return encode(h, devs0, rest)
	}
	device := func(f func(d *Device)) []byte {
		devs := slices.Clone(devs0)
		f(&devs[1])
		return encode(h0, devs, rest)
	}
	for _, c := range []struct {
		name, want string
		data       []byte
	}{
		{"another magic", "bad magic", append([]byte("NVMOCKXX"), data[8:]...)},
		{"a short header", "shorter than its header", data[:HeaderSize-1]},
		{"another version", "wrong snapshot version", header(func(h *Header) { h.Version++ })},
		{"another device size", "record sizes", header(func(h *Header) { h.DeviceSize-- })},
		{"another NIC size", "record sizes", header(func(h *Header) { h.NICSize++ })},
		{"one byte more", "truncated or padded", append(slices.Clone(data), 0)},
		{"one byte less", "truncated or padded", data[:len(data)-1]},
		{"a device more than the file holds", "truncated or padded", header(func(h *Header) { h.DeviceCount++ })},
		{"a pool count past the file", "truncated or padded", header(func(h *Header) { h.PoolCount += 1 << 30 })},
		{"an unterminated driver version", "header string", header(func(h *Header) { h.DriverVersion = [80]byte(bytes.Repeat([]byte("5"), 80)) })},
		{"an unterminated name", "device string", device(func(d *Device) { d.Name = [96]byte(bytes.Repeat([]byte("A"), 96)) })},
		{"unterminated MIG names", "device string", device(func(d *Device) { d.MIGGINames = [192]byte(bytes.Repeat([]byte("\n"), 192)) })},
		{"nine memory clocks", "supported clocks", device(func(d *Device) { d.SupportedMemCount = MaxMemClocks + 1 })},
		{"memory clocks past the pool", "supported clocks", device(func(d *Device) { d.SupportedMemFirst = h0.PoolCount })},
		{"graphics clocks past the pool", "supported clocks", device(func(d *Device) { d.SupportedGfxCount[0] = h0.PoolCount + 1 })},
		{"nine MIG profiles", "MIG profile table", device(func(d *Device) { d.MIGGICount = MaxMIGProfiles + 1 })},
		{"a profile of no memory slice", "MIG profile table", device(func(d *Device) { d.MIGGIMemorySlices[0] = 0 })},
		{"a profile of nine compute slices", "MIG profile table", device(func(d *Device) { d.MIGGIComputeSlices[1] = 9 })},
		{"a placement past slice 7", "MIG profile table", device(func(d *Device) { d.MIGGIPlacements[2] = 0x100 })},
		{"compute instances of 9 slices", "MIG profile table", device(func(d *Device) { d.MIGGICISizes[0] = 0x200 })},
		{"nine instances of a profile", "MIG profile table", device(func(d *Device) { d.MIGGIInstances[0] = 9 })},
		{"nine NVLink firmware images", "NVLink firmware list", device(func(d *Device) { d.NvlinkFwCount = MaxNVLinkFirmware + 1 })},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := Read(c.data)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}
