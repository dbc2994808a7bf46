//go:build integration

package gonvml

import (
	"encoding/binary"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A link's error counters (nvidia-smi nvlink -e from 535 on reads them as
// fields): the data-link layer's replay, recovery and CRC counts before
// Blackwell, the link recovery events from Blackwell on (nvml.h), 0 on a
// healthy link. QA: N/A on an A100 in 535 and 555, 0 in 470.
func TestNVLinkErrorCountsAreFieldsOfTheirArchitecture(t *testing.T) {
	dl := []uint32{nvml.FI_DEV_NVLINK_ERROR_DL_REPLAY, nvml.FI_DEV_NVLINK_ERROR_DL_RECOVERY, nvml.FI_DEV_NVLINK_ERROR_DL_CRC}
	recovery := []uint32{nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_SUCCESSFUL_EVENTS,
		nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS, nvml.FI_DEV_NVLINK_COUNT_LINK_RECOVERY_EVENTS}
	for _, c := range []struct {
		board         string
		answered, not []uint32
	}{{"a100", dl, recovery}, {"h100", dl, recovery}, {"b200", recovery, dl}} {
		t.Run(c.board, func(t *testing.T) {
			dev := startOneGPU(t, c.board, "")
			var vs []nvml.FieldValue
			for _, ids := range [][]uint32{c.answered, c.not} {
				for _, id := range ids {
					vs = append(vs, nvml.FieldValue{FieldId: id, ScopeId: 1})
				}
			}
			vs = append(vs, nvml.FieldValue{FieldId: c.answered[0], ScopeId: 99})
			if ret := dev.GetFieldValues(vs); ret != nvml.SUCCESS {
				t.Fatalf("GetFieldValues: %v", ret)
			}
			for i, v := range vs {
				want := nvml.SUCCESS
				switch {
				case i == len(vs)-1:
					want = nvml.ERROR_INVALID_ARGUMENT // no link 99
				case i >= len(c.answered):
					want = nvml.ERROR_NOT_SUPPORTED
				}
				if got := nvml.Return(v.NvmlReturn); got != want || (want == nvml.SUCCESS && (v.ValueType != uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG) || v.Value != [8]byte{})) {
					t.Errorf("field %d of link %d: %v, type %d, value %v; want %v and 0", v.FieldId, v.ScopeId, got, v.ValueType, v.Value, want)
				}
			}
		})
	}
}

// The NVLink-C2C fields (NCCL reads them for the GPU-CPU bandwidth): the
// count, and per link its status and bandwidth; a board without C2C
// answers none.
func TestC2CLinkFields(t *testing.T) {
	for _, c := range []struct {
		board string
		want  nvml.Return
	}{{"gb300", nvml.SUCCESS}, {"gb200", nvml.SUCCESS}, {"h100", nvml.ERROR_NOT_SUPPORTED}} {
		t.Run(c.board, func(t *testing.T) {
			dev := startOneGPU(t, c.board, "")
			vs := []nvml.FieldValue{{FieldId: nvml.FI_DEV_C2C_LINK_COUNT}, {FieldId: nvml.FI_DEV_C2C_LINK_GET_STATUS, ScopeId: 4},
				{FieldId: nvml.FI_DEV_C2C_LINK_GET_MAX_BW, ScopeId: 4}, {FieldId: nvml.FI_DEV_C2C_LINK_GET_MAX_BW, ScopeId: 5}}
			if ret := dev.GetFieldValues(vs); ret != nvml.SUCCESS {
				t.Fatalf("GetFieldValues: %v", ret)
			}
			for i, want := range []uint32{5, 1, 44712} {
				got := binary.LittleEndian.Uint32(vs[i].Value[:4])
				if r := nvml.Return(vs[i].NvmlReturn); r != c.want || (r == nvml.SUCCESS && got != want) {
					t.Errorf("field %d of link %d: %v, %d; want %v and %d", vs[i].FieldId, vs[i].ScopeId, r, got, c.want, want)
				}
			}
			want := nvml.ERROR_NOT_SUPPORTED
			if c.want == nvml.SUCCESS {
				want = nvml.ERROR_INVALID_ARGUMENT // there is no link 5
			}
			if r := nvml.Return(vs[3].NvmlReturn); r != want {
				t.Errorf("link 5's bandwidth: %v, want %v", r, want)
			}
		})
	}
}
