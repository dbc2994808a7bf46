// Command pciprobe is a statically linked Go program (CGO_ENABLED=0) that
// reads the PCI tree as topology-aware Go software does: NVIDIA's go-nvlib
// nvpci (device plugins, DRA drivers), github.com/jaypipes/ghw, and the
// PCIe root as Kubernetes' DRA device attributes derive it, from the
// relative link /sys/bus/pci/devices/<bdf>. It prints JSON. No preload
// reaches it: it sees what the mounts show.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/NVIDIA/go-nvlib/pkg/nvpci"
	"github.com/jaypipes/ghw/pkg/pci"
)

type device struct {
	Address  string `json:"address"`
	Vendor   uint16 `json:"vendor"`
	Device   uint16 `json:"device"`
	Class    uint32 `json:"class"`
	NUMANode int    `json:"numa_node"`
	Driver   string `json:"driver"`
	IOMMU    int    `json:"iommu_group"`
	PCIeRoot string `json:"pcie_root"`
	BAR1     uint64 `json:"bar1_bytes"`
}

type ghwDevice struct {
	Address string `json:"address"`
	Vendor  string `json:"vendor"`
	Product string `json:"product"`
	Class   string `json:"class"`
	Driver  string `json:"driver"`
}

type report struct {
	GPUs     []device    `json:"nvpci_gpus"`
	NVSwitch []device    `json:"nvpci_nvswitches"`
	NICs     []device    `json:"nvpci_mellanox"`
	GHW      []ghwDevice `json:"ghw"`
	GHWError string      `json:"ghw_error,omitempty"`
	NVPCIErr string      `json:"nvpci_error,omitempty"`
}

func main() {
	var r report
	nv := nvpci.New()
	devs, err := nv.GetAllDevices()
	if err != nil {
		r.NVPCIErr = err.Error()
	}
	for _, d := range devs {
		out := device{Address: d.Address, Vendor: d.Vendor, Device: d.Device, Class: d.Class,
			NUMANode: d.NumaNode, Driver: d.Driver, IOMMU: d.IommuGroup, PCIeRoot: pcieRoot(d.Address)}
		if res, ok := d.Resources[1]; ok {
			out.BAR1 = uint64(res.End - res.Start + 1)
		}
		switch {
		case d.IsGPU():
			r.GPUs = append(r.GPUs, out)
		case d.IsNVSwitch():
			r.NVSwitch = append(r.NVSwitch, out)
		default:
			r.NICs = append(r.NICs, out)
		}
	}
	info, err := pci.New()
	if err != nil {
		r.GHWError = err.Error()
	} else {
		for _, d := range info.Devices {
			g := ghwDevice{Address: d.Address, Driver: d.Driver}
			if d.Vendor != nil {
				g.Vendor = d.Vendor.Name
			}
			if d.Product != nil {
				g.Product = d.Product.Name
			}
			if d.Class != nil {
				g.Class = d.Class.Name
			}
			r.GHW = append(r.GHW, g)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// pcieRoot is what Kubernetes' deviceattribute package derives: the first
// component after devices/ of the relative link's target, e.g. pci0000:4d.
func pcieRoot(bdf string) string {
	target, err := os.Readlink(filepath.Join("/sys/bus/pci/devices", bdf))
	if err != nil || filepath.IsAbs(target) {
		return ""
	}
	p := filepath.Clean(filepath.Join("/sys/bus/pci/devices", target))
	rest, ok := strings.CutPrefix(p, "/sys/devices/")
	if !ok || filepath.Base(p) != bdf {
		return ""
	}
	root, _, _ := strings.Cut(rest, "/")
	return root
}
