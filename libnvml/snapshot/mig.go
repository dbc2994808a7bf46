package snapshot

import (
	"strings"

	"github.com/nvmock/nvmock/profile"
)

// compileMIG writes the board's MIG profile table (validated).
func compileMIG(d *Device, m *profile.MIG) {
	var names strings.Builder
	d.MIGGICount = uint32(len(m.GPUInstances))
	for i := range m.GPUInstances {
		p := &m.GPUInstances[i]
		d.MIGGIID[i] = p.ID
		d.MIGGINvml[i] = profile.MIGProfiles[p.NVML]
		d.MIGGIMemorySlices[i] = p.MemorySlices
		d.MIGGIComputeSlices[i] = p.ComputeSlices()
		d.MIGGIInstances[i] = p.Instances
		d.MIGGIMemoryMIB[i] = p.MemoryMiB
		d.MIGGISms[i] = p.SMs
		d.MIGGICopyEngines[i] = p.CopyEngines
		d.MIGGIDecoders[i] = p.Decoders
		d.MIGGIEncoders[i] = p.Encoders
		d.MIGGIJpegs[i] = p.JPEGs
		d.MIGGIOfas[i] = p.OFAs
		d.MIGGIBar1MIB[i] = p.BAR1MiB
		d.MIGGIUsedMIB[i] = p.UsedMiB
		for _, s := range p.Placements {
			d.MIGGIPlacements[i] |= 1 << s
		}
		for _, c := range p.ComputeInstances {
			d.MIGGICISizes[i] |= 1 << c
			if c < p.ComputeSlices() {
				d.MIGCISms[c] = m.ComputeInstanceSMs(p, c)
			}
		}
		names.WriteString(p.Name + "\n")
	}
	copy(d.MIGGINames[:], names.String())
}
