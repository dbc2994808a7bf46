//go:build integration

package gonvml

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/profile"
)

// newerCalls are what a board answers to the calls drivers added from R565
// on: the versioned temperature (R565), the PDI, the repair status, the
// unrepairable-memory flag and the NVLink information (R580).
type newerCalls struct {
	temperature, pdi, repair, unrepairable, nvlinkInfo nvml.Return
}

// Calls that newer drivers added answer as the captures show them on each
// board (nvidia-smi 580 and 595 print them: PDI, "Channel Repair Pending",
// "TPC Repair Pending", "Unrepairable Memory"), and a driver from before a
// call reports it missing, as pynvml does for a symbol the library lacks.
func TestCallsOfNewerDrivers(t *testing.T) {
	const (
		ok      = nvml.SUCCESS
		missing = nvml.ERROR_FUNCTION_NOT_FOUND
		no      = nvml.ERROR_NOT_SUPPORTED
	)
	boards := map[string]newerCalls{
		"a100":  {ok, missing, missing, missing, missing}, // its capture's driver is 570
		"h100":  {ok, ok, ok, ok, no},
		"b200":  {ok, ok, ok, ok, no},
		"gb200": {ok, ok, ok, ok, ok}, // the only board whose NVLink firmware is known
		"gb300": {ok, ok, ok, ok, no},
		"l40s":  {ok, ok, ok, no, no}, // Ada: the capture's "Unrepairable Memory" is N/A
		"t4":    {ok, ok, no, no, no}, // Turing: the capture prints no repair status
	}
	for _, name := range profile.Builtins() {
		want, known := boards[name]
		if !known {
			t.Errorf("profile %s: no expectation; add it from its capture", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			p, err := profile.Builtin(name)
			if err != nil {
				t.Fatal(err)
			}
			checkNewerCalls(t, p, want)
		})
	}
	t.Run("a100 on driver 580", func(t *testing.T) {
		p, _ := profile.Builtin("a100")
		if err := p.SetDriver("580.105.08"); err != nil {
			t.Fatal(err)
		}
		checkNewerCalls(t, p, newerCalls{ok, ok, ok, no, no}) // repair from Ampere, the flag from Hopper
	})
	t.Run("gb200 with NVLink encryption on", func(t *testing.T) {
		p, _ := profile.Builtin("gb200")
		p.Board.NVLink.Encryption = true
		checkNewerCalls(t, p, boards["gb200"])
	})
	t.Run("h100 on driver 550", func(t *testing.T) {
		p, _ := profile.Builtin("h100")
		if err := p.SetDriver("550.163.01"); err != nil {
			t.Fatal(err)
		}
		checkNewerCalls(t, p, newerCalls{missing, missing, missing, missing, missing})
	})
}

func checkNewerCalls(t *testing.T, p *profile.Profile, want newerCalls) {
	p.GPUs = 2
	cleanEnv(t, testenv.SnapshotOf(t, p))
	lib := newLib(t)
	start(t, lib)
	var pdis [2]uint64
	for i := range pdis {
		d := deviceAt(t, lib, i)
		temp, ret := d.GetTemperatureV().V1()
		if want.temperature == nvml.SUCCESS {
			old, _ := d.GetTemperature(nvml.TEMPERATURE_GPU)
			check(t, "GetTemperatureV", temp.Temperature, ret, int32(old))
		} else {
			checkRet(t, "GetTemperatureV", ret, want.temperature)
		}
		pdi, ret := d.GetPdi()
		checkRet(t, "GetPdi", ret, want.pdi)
		pdis[i] = pdi.Value
		repair, ret := d.GetRepairStatus()
		if want.repair == nvml.SUCCESS {
			check(t, "GetRepairStatus", repair, ret, nvml.RepairStatus{Version: repair.Version})
		} else {
			checkRet(t, "GetRepairStatus", ret, want.repair)
		}
		flag, ret := d.GetUnrepairableMemoryFlag_v1()
		if want.unrepairable == nvml.SUCCESS {
			check(t, "GetUnrepairableMemoryFlag_v1", flag.BUnrepairableMemory, ret, 0)
		} else {
			checkRet(t, "GetUnrepairableMemoryFlag_v1", ret, want.unrepairable)
		}
		checkNvLinkInfo(t, d, p, want.nvlinkInfo)
	}
	if want.pdi == nvml.SUCCESS && (pdis[0] == 0 || pdis[0] == pdis[1]) {
		t.Errorf("PDIs %#x and %#x, want one of its own per GPU", pdis[0], pdis[1])
	}
}

// checkNvLinkInfo: v2 lists the profile's firmware images as nvidia-smi
// nvlink -info prints them, v1 gives NVLE alone.
func checkNvLinkInfo(t *testing.T, d nvml.Device, p *profile.Profile, want nvml.Return) {
	v1, ret := d.GetNvLinkInfo().V1()
	if want != nvml.SUCCESS {
		checkRet(t, "GetNvLinkInfo v1", ret, want)
		_, ret = d.GetNvLinkInfo().V2()
		checkRet(t, "GetNvLinkInfo v2", ret, want)
		return
	}
	l := p.Board.NVLink
	check(t, "GetNvLinkInfo v1 NVLE", v1.IsNvleEnabled, ret, uint32(boolInt(l.Encryption)))
	v2, ret := d.GetNvLinkInfo().V2()
	var got []string
	for _, f := range v2.FirmwareInfo.FirmwareVersion[:min(v2.FirmwareInfo.NumValidEntries, 100)] {
		got = append(got, fmt.Sprintf("%d %d:%d:%d", f.UcodeType, f.Major, f.Minor, f.SubMinor))
	}
	var wantFw []string
	for _, f := range l.Firmware {
		wantFw = append(wantFw, fmt.Sprintf("%d %s", profile.NVLinkUcodes[f.Ucode], strings.ReplaceAll(f.Version, ".", ":")))
	}
	if ret != nvml.SUCCESS || v2.IsNvleEnabled != uint32(boolInt(l.Encryption)) || strings.Join(got, ", ") != strings.Join(wantFw, ", ") {
		t.Errorf("GetNvLinkInfo v2 = NVLE %d, images %v (%v); want %v, %v", v2.IsNvleEnabled, got, ret, l.Encryption, wantFw)
	}
}
