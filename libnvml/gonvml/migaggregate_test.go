//go:build integration

package gonvml

import (
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nvmock/nvmock/hostprep"
)

// A GPU in MIG mode gives its memory, BAR1 and processes, summed over its
// instances, only to a caller with the MIG monitor capability (nvml.h: "only
// if the caller has appropriate privileges"): a container given one MIG
// device gets NO_PERMISSION from its GPU's handle and reads its MIG
// device's handle, as pynvml in such a container does on a real node
// (nvidia-container-toolkit #842). So go-nvlib's MIG profile lookup, which
// reads the parent's memory, fails there with the device plugin's "error
// getting parent memory info: Insufficient Permissions" (k8s-device-plugin
// #1683) unless the container asked for NVIDIA_MIG_MONITOR_DEVICES=all.
func TestAMIGModeGPUsAggregatesNeedTheMonitorCapability(t *testing.T) {
	for _, monitor := range []bool{false, true} {
		t.Run("monitor="+strconv.FormatBool(monitor), func(t *testing.T) {
			root := cleanEnv(t, balancedA100(t))
			// GPU 1's 2g.10gb: GPU instance 3, compute instance 0.
			nodes := []string{"nvidiactl", "nvidia1", "nvidia-caps/nvidia-cap" + strconv.Itoa(hostprep.MIGCapMinor(1, 3, -1)),
				"nvidia-caps/nvidia-cap" + strconv.Itoa(hostprep.MIGCapMinor(1, 3, 0))}
			if monitor {
				nodes = append(nodes, "nvidia-caps/nvidia-cap2")
			}
			devNodes(t, root, nodes...)
			lib := newLib(t)
			start(t, lib)
			dev := got(lib.DeviceGetHandleByIndex(0))(t, "GPU")
			want := nvml.ERROR_NO_PERMISSION
			if monitor {
				want = nvml.SUCCESS
			}
			_, ret := dev.GetMemoryInfo()
			wantRet(t, "the GPU's memory", ret, want)
			_, ret = dev.GetMemoryInfo_v2()
			wantRet(t, "the GPU's memory (v2)", ret, want)
			_, ret = dev.GetBAR1MemoryInfo()
			wantRet(t, "the GPU's BAR1", ret, want)
			_, ret = dev.GetComputeRunningProcesses()
			wantRet(t, "the GPU's processes", ret, want)

			// The 2g.10gb: the one MIG device without the monitor
			// capability, one of four with it.
			var mig nvml.Device
			for i := 0; mig == nil && i < 4; i++ {
				if m, ret := dev.GetMigDeviceHandleByIndex(i); ret == nvml.SUCCESS && got(m.GetGpuInstanceId())(t, "GPU instance") == 3 {
					mig = m
				}
			}
			if mig == nil {
				t.Fatal("no MIG device of GPU instance 3")
			}
			if m := got(mig.GetMemoryInfo())(t, "the MIG device's memory"); m.Total != 9984<<20 {
				t.Errorf("the MIG device's memory: %d bytes, want the 2g.10gb's 9984 MiB", m.Total)
			}
			if ps := got(mig.GetComputeRunningProcesses())(t, "the MIG device's processes"); len(ps) != 0 {
				t.Errorf("the MIG device's processes: %v", ps)
			}

			migs, err := device.New(lib).GetMigDevices()
			if err != nil || len(migs) == 0 {
				t.Fatalf("go-nvlib: %d MIG devices, %v", len(migs), err)
			}
			p, err := migs[0].GetProfile()
			switch {
			case monitor && err != nil:
				t.Errorf("go-nvlib's profile with the monitor capability: %v", err)
			case !monitor && (err == nil || !strings.Contains(err.Error(), "error getting parent memory info: Insufficient Permissions")):
				t.Errorf("go-nvlib's profile without it: %v, %v; want the device plugin's error", p, err)
			case !monitor:
			case p.String() != "3g.20gb":
				t.Errorf("go-nvlib's first MIG device is a %v, want all-balanced's 3g.20gb", p)
			}
		})
	}
}
