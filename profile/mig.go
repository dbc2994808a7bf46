package profile

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GPUInstanceProfile is one row of `nvidia-smi mig -lgip`, with the
// placements of -lgipp and the compute-instance sizes of -lcip.
type GPUInstanceProfile struct {
	Name         string   `json:"name"`         // 1g.5gb, 1g.5gb+me
	ID           uint32   `json:"id"`           // the profile id nvidia-smi shows (19)
	NVML         string   `json:"nvml"`         // NVML_GPU_INSTANCE_PROFILE_ without the prefix: 1_SLICE
	MemorySlices uint32   `json:"memorySlices"` // of 8
	Instances    uint32   `json:"instances"`
	MemoryMiB    uint32   `json:"memoryMiB"`
	SMs          uint32   `json:"sms"`
	CopyEngines  uint32   `json:"copyEngines"`
	Decoders     uint32   `json:"decoders"`
	Encoders     uint32   `json:"encoders"`
	JPEGs        uint32   `json:"jpegs"`
	OFAs         uint32   `json:"ofas"`
	Placements   []uint32 `json:"placements"` // first memory slices
	// BAR1MiB is the BAR1 of its MIG devices from driver 580 on, which
	// changed it; absent, or before 580: the GPU's BAR1 share less 1 MiB.
	BAR1MiB uint32 `json:"bar1MiB,omitempty"`
	// UsedMiB is what one of its MIG devices shows used with nothing
	// running: the driver's own (15 MiB for an H100 1g.10gb on R580).
	UsedMiB uint32 `json:"usedMiB,omitempty"`
	// ComputeInstances are the compute-slice counts of the compute
	// instances it can hold; the largest, the whole instance, is the default.
	ComputeInstances []uint32 `json:"computeInstances"`
}

// MIGProfiles are the NVML GPU-instance profile enums.
var MIGProfiles = map[string]uint32{
	"1_SLICE": 0, "2_SLICE": 1, "3_SLICE": 2, "4_SLICE": 3, "7_SLICE": 4, "8_SLICE": 5, "6_SLICE": 6,
	"1_SLICE_REV1": 7, "2_SLICE_REV1": 8, "1_SLICE_REV2": 9,
}

// MIGMemorySlices and MIGComputeSlices are what a MIG board divides into.
const (
	MIGMemorySlices  = 8
	MIGComputeSlices = 7
	// MIGMaxProfiles bounds the table (the snapshot's room).
	MIGMaxProfiles = 8
)

var migNameRE = regexp.MustCompile(`^([1-8])g\.[0-9]+gb(\+[a-z]+)?$`)

// ComputeSlices is the g of the profile's name.
func (p *GPUInstanceProfile) ComputeSlices() uint32 {
	m := migNameRE.FindStringSubmatch(p.Name)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return uint32(n)
}

// ComputeInstanceSMs is the SM count of a compute instance of c slices in
// the profile: the whole instance's, or that of the c-slice GPU instance,
// as the real A100 tables have them.
func (m *MIG) ComputeInstanceSMs(p *GPUInstanceProfile, c uint32) uint32 {
	if c == p.ComputeSlices() {
		return p.SMs
	}
	want := fmt.Sprintf("%d_SLICE", c)
	for i := range m.GPUInstances {
		if m.GPUInstances[i].NVML == want {
			return m.GPUInstances[i].SMs
		}
	}
	return 0
}

// maxSMs bounds an instance's SMs (0: the board does not say).
func (c *checker) mig(field string, m *MIG, memoryMiB, bar1MiB uint64, maxSMs uint32) {
	if len(m.GPUInstances) == 0 && m.MaxDevices == 0 && m.Layout != "" {
		// A layout on a board without MIG (base: t4): all-disabled asks
		// nothing of it (one layout for a pool of several boards); another
		// is told as that, not as what else a MIG block would need.
		if _, err := ParseMIGLayout(m.Layout, nil, 0); err != nil {
			c.fail(field+".layout", "%q: the board has no MIG profiles (gpuInstances), so it cannot be partitioned", m.Layout)
		}
		return
	}
	if m.MaxDevices < 1 || m.MaxDevices > MIGComputeSlices {
		c.fail(field+".maxDevices", "%d is out of range; use 1 to %d", m.MaxDevices, MIGComputeSlices)
	}
	if len(m.GPUInstances) > MIGMaxProfiles {
		c.fail(field+".gpuInstances", "%d profiles; at most %d", len(m.GPUInstances), MIGMaxProfiles)
	}
	if len(m.GPUInstances) == 0 && (m.Current || m.Pending) {
		c.fail(field+".current", "MIG mode is on but the board has no gpuInstances to create")
	}
	ids, names, enums := map[uint32]bool{}, map[string]bool{}, map[string]bool{}
	for i := range m.GPUInstances {
		p := &m.GPUInstances[i]
		f := fmt.Sprintf("%s.gpuInstances[%d]", field, i)
		if !migNameRE.MatchString(p.Name) || len(p.Name) > 22 {
			c.fail(f+".name", "%q is not a profile name such as 1g.5gb or 1g.5gb+me", p.Name)
			continue
		}
		if names[p.Name] || ids[p.ID] || enums[p.NVML] {
			c.fail(f, "%s (id %d, %s) repeats an earlier profile's name, id or nvml", p.Name, p.ID, p.NVML)
		}
		names[p.Name], ids[p.ID], enums[p.NVML] = true, true, true
		c.enum(f+".nvml", p.NVML, MIGProfiles)
		g := p.ComputeSlices()
		if g > MIGComputeSlices {
			c.fail(f+".name", "%s has %d compute slices; a board has %d", p.Name, g, MIGComputeSlices)
		}
		slicesOK := true
		switch p.MemorySlices {
		case 1, 2, 4, 8:
		default:
			c.fail(f+".memorySlices", "%d; use 1, 2, 4 or 8", p.MemorySlices)
			slicesOK = false
		}
		if p.Instances < 1 || p.Instances > MIGComputeSlices {
			c.fail(f+".instances", "%d is out of range; use 1 to %d", p.Instances, MIGComputeSlices)
		}
		if p.MemoryMiB == 0 || uint64(p.MemoryMiB) > memoryMiB {
			c.fail(f+".memoryMiB", "%d is not within the board's %d MiB", p.MemoryMiB, memoryMiB)
		}
		if p.UsedMiB >= p.MemoryMiB && p.MemoryMiB != 0 {
			c.fail(f+".usedMiB", "%d leaves nothing of its %d MiB", p.UsedMiB, p.MemoryMiB)
		}
		if uint64(p.BAR1MiB) > bar1MiB {
			c.fail(f+".bar1MiB", "%d is above the board's BAR1 of %d MiB", p.BAR1MiB, bar1MiB)
		}
		switch {
		case p.SMs == 0:
			c.fail(f+".sms", "must be set")
		case maxSMs > 0 && p.SMs > maxSMs:
			c.fail(f+".sms", "%d is more than the board's cudaCores allow (%d SMs at 64 cores each)", p.SMs, maxSMs)
		}
		if p.CopyEngines == 0 {
			c.fail(f+".copyEngines", "must be set: every instance has a copy engine")
		}
		if len(p.Placements) < int(p.Instances) {
			c.fail(f+".placements", "%d placements for %d instances", len(p.Placements), p.Instances)
		}
		for k, s := range p.Placements {
			if slices.Contains(p.Placements[:k], s) && !slices.Contains(p.Placements[k+1:], s) { // told once
				c.fail(f+".placements", "%d is listed twice", s)
			}
			if slicesOK && (s%p.MemorySlices != 0 || s+p.MemorySlices > MIGMemorySlices) {
				c.fail(f+".placements", "%d: an instance of %d memory slices starts at a multiple of %d, within %d", s, p.MemorySlices, p.MemorySlices, MIGMemorySlices)
			}
		}
		list := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(p.ComputeInstances)), ", "), "[]")
		if len(p.ComputeInstances) == 0 || p.ComputeInstances[len(p.ComputeInstances)-1] != g {
			c.fail(f+".computeInstances", "[%s] must end with the whole instance's %d slices", list, g)
		}
		for k, n := range p.ComputeInstances {
			if n == 0 || n > g {
				c.fail(f+".computeInstances", "[%s]: %d is not a compute instance's slices in a %d-slice instance (1 to %d)", list, n, g, g)
				break
			}
			if k > 0 && n <= p.ComputeInstances[k-1] {
				c.fail(f+".computeInstances", "[%s]: %d after %d; the slices rise", list, n, p.ComputeInstances[k-1])
				break
			}
			if n < g && m.ComputeInstanceSMs(p, n) == 0 {
				c.fail(f+".computeInstances", "a %d-slice compute instance takes its SMs from the %d_SLICE profile, which the board lacks", n, n)
			}
		}
	}
}
