// Command nvml-list lists the GPUs NVML reports, through go-nvml as NVIDIA's
// Go tools use it: the demo's proof that an unmodified NVML program sees the
// mock.
package main

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nvml-list:", err)
		os.Exit(1)
	}
}

func run() error {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("init: %v", ret)
	}
	defer nvml.Shutdown()
	driver, _ := nvml.SystemGetDriverVersion()
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("device count: %v", ret)
	}
	fmt.Printf("go-nvml: driver %s, %d GPUs\n", driver, count)
	for i := 0; i < count; i++ {
		d, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("GPU %d: %v", i, ret)
		}
		name, _ := d.GetName()
		uuid, _ := d.GetUUID()
		mem, _ := d.GetMemoryInfo()
		pci, _ := d.GetPciInfo()
		var bus []byte
		for _, c := range pci.BusId {
			if c == 0 {
				break
			}
			bus = append(bus, byte(c))
		}
		fmt.Printf("  %d  %s  %s  %s  %d MiB\n", i, name, uuid, bus, mem.Total>>20)
	}
	return nil
}
