// Command nvmlprobe is the e2e go-nvml image's program: it loads
// libnvidia-ml.so.1 by name, as NVIDIA's Go tools do, and prints what NVML
// reports as JSON. It exits 1 with NVML's error when the library cannot be
// loaded or initialised.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type gpu struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Name  string `json:"name"`
	Minor int    `json:"minor"`
	BusID string `json:"bus_id"`
}

type report struct {
	Driver string `json:"driver"`
	Count  int    `json:"count"`
	GPUs   []gpu  `json:"gpus"`
}

func main() {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		fail("nvmlInit", ret)
	}
	defer nvml.Shutdown()
	var r report
	var ret nvml.Return
	if r.Driver, ret = nvml.SystemGetDriverVersion(); ret != nvml.SUCCESS {
		fail("nvmlSystemGetDriverVersion", ret)
	}
	if r.Count, ret = nvml.DeviceGetCount(); ret != nvml.SUCCESS {
		fail("nvmlDeviceGetCount", ret)
	}
	for i := 0; i < r.Count; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fail("nvmlDeviceGetHandleByIndex", ret)
		}
		g := gpu{Index: i}
		g.UUID, _ = d.GetUUID()
		g.Name, _ = d.GetName()
		g.Minor, _ = d.GetMinorNumber()
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.BusID = cString(pci.BusId[:])
		}
		r.GPUs = append(r.GPUs, g)
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

func fail(what string, ret nvml.Return) {
	fmt.Fprintf(os.Stderr, "nvmlprobe: %s: %s\n", what, nvml.ErrorString(ret))
	os.Exit(1)
}
