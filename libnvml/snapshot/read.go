package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
)

// Magic opens every snapshot.
const Magic = "NVMOCKSS"

// Read parses a compiled snapshot back into its header and devices, for
// nvmock's tools that need the board's numbers (the live-state model, the
// NRI plugin's MIG devices). It refuses what the library refuses
// (libnvml/snapshot.c snap_check), with its words, so that no tool reads
// a file the library would not map; the caller names the file.
func Read(data []byte) (Header, []Device, error) {
	var h Header
	if len(data) < len(h.Magic) || string(data[:len(h.Magic)]) != Magic {
		return h, nil, errors.New("not an nvmock snapshot (bad magic)")
	}
	if len(data) < HeaderSize {
		return h, nil, errors.New("truncated: shorter than its header")
	}
	if err := binary.Read(bytes.NewReader(data[:HeaderSize]), binary.LittleEndian, &h); err != nil {
		return h, nil, err
	}
	if h.Version != Version {
		return h, nil, errors.New("wrong snapshot version; recompile it with this nvmock (nvmock profile compile)")
	}
	if h.HeaderSize != HeaderSize || h.DeviceSize != DeviceSize || h.NICSize != NICSize {
		return h, nil, errors.New("record sizes do not match this library")
	}
	want := uint64(HeaderSize) + uint64(h.DeviceCount)*DeviceSize + uint64(h.NICCount)*NICSize + uint64(h.PoolCount)*4
	if uint64(len(data)) != want {
		return h, nil, errors.New("file size does not match its header (truncated or padded)")
	}
	if !terminated(h.DriverVersion[:]) || !terminated(h.NvmlVersion[:]) || !terminated(h.Profile[:]) {
		return h, nil, errors.New("header string is not terminated")
	}
	devs := make([]Device, h.DeviceCount)
	if err := binary.Read(bytes.NewReader(data[HeaderSize:HeaderSize+len(devs)*DeviceSize]), binary.LittleEndian, devs); err != nil {
		return h, nil, err
	}
	for i := range devs {
		if err := check(&devs[i], h.PoolCount); err != nil {
			return h, nil, err
		}
	}
	return h, devs, nil
}

// check is snap_check's test of one device record.
func check(d *Device, pool uint32) error {
	v := reflect.ValueOf(d).Elem()
	for _, i := range stringFields {
		if !terminated(v.Field(i).Bytes()) {
			return errors.New("device string is not terminated")
		}
	}
	if d.SupportedMemCount > MaxMemClocks || uint64(d.SupportedMemFirst)+uint64(d.SupportedMemCount) > uint64(pool) {
		return errors.New("supported clocks out of range")
	}
	for k := uint32(0); k < d.SupportedMemCount; k++ {
		if uint64(d.SupportedGfxFirst[k])+uint64(d.SupportedGfxCount[k]) > uint64(pool) {
			return errors.New("supported clocks out of range")
		}
	}
	if !migOK(d) {
		return errors.New("MIG profile table out of range")
	}
	if d.NvlinkFwCount > MaxNVLinkFirmware {
		return errors.New("NVLink firmware list out of range")
	}
	return nil
}

// migOK is the library's mig_ok: at most 8 rows of 8 memory slices, 8
// compute slices and 8 placements, which the MIG code indexes and shifts by.
func migOK(d *Device) bool {
	if d.MIGGICount > MaxMIGProfiles {
		return false
	}
	for r := uint32(0); r < d.MIGGICount; r++ {
		if d.MIGGIMemorySlices[r]-1 >= 8 || d.MIGGIComputeSlices[r]-1 >= 8 ||
			d.MIGGIPlacements[r] > 0xff || d.MIGGICISizes[r] > 0x1ff || d.MIGGIInstances[r] > 8 {
			return false
		}
	}
	return true
}

func terminated(b []byte) bool { return bytes.IndexByte(b, 0) >= 0 }

// stringFields are Device's char arrays, the generator's only [N]byte
// fields (libnvml/gen: Str), which snap_device_strings lists for C.
var stringFields = func() []int {
	var out []int
	t := reflect.TypeOf(Device{})
	for i := 0; i < t.NumField(); i++ {
		if f := t.Field(i).Type; f.Kind() == reflect.Array && f.Elem().Kind() == reflect.Uint8 {
			out = append(out, i)
		}
	}
	return out
}()
