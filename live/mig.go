package live

import (
	"bytes"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/profile"
)

// MIG partitions are node state: each GPU's record holds its mode and its
// GPU and compute instances. These are the library's rules
// (libnvml/mig*.c), for nvmock's own tools: installing a layout.

// MIGNames are a board's GPU-instance profile names, one per table row,
// read as the library reads them (libnvml/mig.c nvmock_mig_name): row r
// follows the r-th newline and ends at a newline or NUL; a row past the
// list is "".
func MIGNames(d *snapshot.Device) []string {
	lines := bytes.Split(d.MIGGINames[:], []byte("\n"))
	names := make([]string, min(d.MIGGICount, snapshot.MaxMIGProfiles))
	for r := range names {
		if r < len(lines) {
			name, _, _ := bytes.Cut(lines[r], []byte{0})
			names[r] = string(name)
		}
	}
	return names
}

// MIGGIID is the GPU-instance id of a placement: one per node of the tree
// of memory slices, as the real driver numbers them.
func MIGGIID(start, size uint32) int {
	switch size {
	case 8:
		return 0
	case 4:
		return 1 + int(start/4)
	case 2:
		return 3 + int(start/2)
	}
	return 7 + int(start)
}

// SetMIGMode sets a GPU's MIG mode, current and pending. Instances must be
// gone before it is turned off.
func (s *State) SetMIGMode(gpu int, on bool) error {
	if err := s.checkGPU(gpu); err != nil {
		return err
	}
	g := &s.GPUs[gpu]
	if !on {
		for _, p := range g.GIProfile {
			if p != 0 {
				return fmt.Errorf("GPU %d: MIG cannot be turned off with GPU instances on it", gpu)
			}
		}
	}
	v := uint32(0)
	if on {
		v = 1
	}
	g.MIGSet, g.MIGCurrent, g.MIGPending = 1, v, v
	return nil
}

// CreateGPUInstance creates a GPU instance of profile row on a GPU of board
// d, where the driver would put it, and returns its id.
func (s *State) CreateGPUInstance(gpu int, d *snapshot.Device, row int) (int, error) {
	if err := s.checkGPU(gpu); err != nil {
		return 0, err
	}
	g := &s.GPUs[gpu]
	if !migOn(d, g) {
		return 0, fmt.Errorf("GPU %d: MIG mode is off", gpu)
	}
	cleanMIG(d, g)
	if row < 0 || row >= int(min(d.MIGGICount, snapshot.MaxMIGProfiles)) {
		return 0, fmt.Errorf("GPU %d: no GPU-instance profile %d", gpu, row)
	}
	size := d.MIGGIMemorySlices[row]
	var used uint32
	n := uint32(0)
	for id, p := range g.GIProfile {
		if p != 0 {
			used |= (1<<d.MIGGIMemorySlices[p-1] - 1) << g.GIStart[id]
		}
		if p == uint32(row)+1 {
			n++
		}
	}
	var free uint32
	for p := uint32(0); p < 8 && n < d.MIGGIInstances[row]; p++ {
		if d.MIGGIPlacements[row]>>p&1 != 0 && used&((1<<size-1)<<p) == 0 {
			free |= 1 << p
		}
	}
	if free == 0 {
		return 0, fmt.Errorf("GPU %d: no room for %s", gpu, MIGNames(d)[row])
	}
	start, ok := pickStart(d.MIGGIPlacements[row], free, size)
	if !ok {
		return 0, fmt.Errorf("GPU %d: no room for %s", gpu, MIGNames(d)[row])
	}
	id := MIGGIID(start, size)
	g.GIProfile[id], g.GIStart[id] = uint32(row)+1, start
	return id, nil
}

// pickStart is where the driver puts a GPU instance given no placement:
// the profile's last placement, else outward from it, the other half of
// each ever larger block of memory slices around it in turn, lowest
// first (libnvml/mig_gi.c pick_start, which says what real drivers do).
func pickStart(valid, free, size uint32) (uint32, bool) {
	if valid == 0 || size == 0 {
		return 0, false
	}
	top := uint32(31 - bits.LeadingZeros32(valid))
	if free>>top&1 != 0 {
		return top, true
	}
	for blk := size * 2; blk <= 8; blk *= 2 {
		base, half := top/blk*blk, blk/2
		other := base
		if top-base < half {
			other = base + half
		}
		for p := other; p < other+half; p++ {
			if free>>p&1 != 0 {
				return p, true
			}
		}
	}
	return 0, false
}

// ciStep is where compute instances of c slices may start: at multiples of
// the power of two that holds c, as GPU instances do, so a 3c sits at 0 or
// 4 of a 7g beside a 4c (libnvml/mig.h nvmock_mig_ci_step).
func ciStep(c uint32) uint32 {
	p := uint32(1)
	for p < c {
		p <<= 1
	}
	return p
}

// CreateComputeInstance creates a compute instance of c slices in a GPU
// instance, at its first free placement, and returns its id.
func (s *State) CreateComputeInstance(gpu, gi int, d *snapshot.Device, c uint32) (int, error) {
	if err := s.checkGPU(gpu); err != nil {
		return 0, err
	}
	g := &s.GPUs[gpu]
	cleanMIG(d, g)
	if gi < 0 || gi >= MaxGIs || g.GIProfile[gi] == 0 {
		return 0, fmt.Errorf("GPU %d: no GPU instance %d", gpu, gi)
	}
	row := g.GIProfile[gi] - 1
	whole := d.MIGGIComputeSlices[row]
	if c == 0 || d.MIGGICISizes[row]>>c&1 == 0 {
		return 0, fmt.Errorf("GPU %d: GPU instance %d holds no %d-slice compute instance", gpu, gi, c)
	}
	var used uint32
	id := -1
	for k := 0; k < MaxCIs; k++ {
		if n := g.CISlices[gi*MaxCIs+k]; n != 0 {
			used |= (1<<n - 1) << g.CIStart[gi*MaxCIs+k]
		} else if id < 0 {
			id = k
		}
	}
	for p := uint32(0); p+c <= whole && id >= 0; p += ciStep(c) {
		if used&((1<<c-1)<<p) == 0 {
			g.CISlices[gi*MaxCIs+id], g.CIStart[gi*MaxCIs+id] = c, p
			return id, nil
		}
	}
	return 0, fmt.Errorf("GPU %d: no room for a %d-slice compute instance in GPU instance %d", gpu, c, gi)
}

// ClearMIG removes a GPU's instances and sets its MIG mode. Instances
// with processes on them stay, as the driver keeps them ("In use by
// another client").
func (s *State) ClearMIG(gpu int, on bool) error {
	if err := s.checkGPU(gpu); err != nil {
		return err
	}
	for _, p := range s.Processes() {
		if p.GPU != gpu || Dead(p) {
			continue
		}
		if p.MIG != nil {
			return fmt.Errorf("GPU %d: process %d runs on its MIG device %d/%d (nvmock ctl proc rm %d --gpu %d)", gpu, p.PID, p.MIG.GI, p.MIG.CI, p.PID, gpu)
		}
		if on {
			// A whole-GPU process: the driver cannot reset the GPU into
			// MIG mode under it, and the library leaves the change pending.
			return fmt.Errorf("GPU %d: process %d runs on it, so MIG mode cannot be turned on (nvmock ctl proc rm %d --gpu %d)", gpu, p.PID, p.PID, gpu)
		}
	}
	g := &s.GPUs[gpu]
	g.GIProfile, g.GIStart = [MaxGIs]uint32{}, [MaxGIs]uint32{}
	g.CISlices, g.CIStart = [MaxGIs * MaxCIs]uint32{}, [MaxGIs * MaxCIs]uint32{}
	return s.SetMIGMode(gpu, on)
}

// FitMIGLayout checks that a profile's own MIG layout fits its GPUs,
// placed on a scratch state as an install places it, so that a layout
// that cannot be made is refused where it is written.
func FitMIGLayout(p *profile.Profile) error {
	m := p.Board.Modes.MIG
	if m == nil || m.Layout == "" {
		return nil
	}
	l, err := profile.ParseMIGLayout(m.Layout, m, p.GPUs)
	if err != nil {
		return err
	}
	data, err := snapshot.Compile(p, snapshot.Options{Seed: "layout"})
	if err != nil {
		return err
	}
	_, devs, err := snapshot.Read(data)
	if err != nil {
		return err
	}
	s := &State{}
	s.Header.Gpus = uint32(len(devs))
	return s.ApplyMIGLayout(devs, l)
}

// ApplyMIGLayout partitions the GPUs a layout sets, on boards devs (the
// node's snapshot records): each listed GPU instance with one compute
// instance of all its slices, as mig-parted makes them.
func (s *State) ApplyMIGLayout(devs []snapshot.Device, l *profile.MIGLayout) error {
	return s.applyMIGLayout(devs, l, true)
}

func (s *State) applyMIGLayout(devs []snapshot.Device, l *profile.MIGLayout, skipDone bool) error {
	for i, g := range l.GPUs {
		if !g.Set {
			continue
		}
		if i >= len(devs) || devs[i].MIGCurrent == snapshot.NA {
			return fmt.Errorf("mig layout %q: GPU %d has no MIG", l.Spec, i)
		}
		if skipDone && s.hasLayout(i, devs, l) {
			continue // as mig-parted: a config applied already is done
		}
		names := MIGNames(&devs[i])
		count := map[string]uint32{}
		for _, name := range g.Instances {
			count[name]++
		}
		for row, name := range names {
			if n := count[name]; n > devs[i].MIGGIInstances[row] {
				return fmt.Errorf("mig layout %q: GPU %d: %d of %s: a GPU holds at most %d", l.Spec, i, n, name, devs[i].MIGGIInstances[row])
			}
		}
		if err := s.ClearMIG(i, g.Enabled); err != nil {
			return fmt.Errorf("mig layout %q: %w", l.Spec, err)
		}
		for _, name := range g.Instances {
			row := slices.Index(names, name)
			gi, err := s.CreateGPUInstance(i, &devs[i], row)
			if err != nil {
				return fmt.Errorf("mig layout %q: GPU %d: %s do not fit: no room for %s", l.Spec, i, strings.Join(g.Instances, ", "), name)
			}
			if _, err := s.CreateComputeInstance(i, gi, &devs[i], devs[i].MIGGIComputeSlices[row]); err != nil {
				return fmt.Errorf("mig layout %q: %w", l.Spec, err)
			}
		}
	}
	return nil
}

// hasLayout says whether GPU gpu is already as the layout makes it: the
// same mode and the same instances at the same places.
func (s *State) hasLayout(gpu int, devs []snapshot.Device, l *profile.MIGLayout) bool {
	one := &profile.MIGLayout{Spec: l.Spec, GPUs: make([]profile.GPULayout, gpu+1)}
	one.GPUs[gpu] = l.GPUs[gpu]
	t := &State{}
	t.Header.Gpus = s.Header.Gpus
	if t.applyMIGLayout(devs, one, false) != nil {
		return false
	}
	a, b := &s.GPUs[gpu], &t.GPUs[gpu]
	return a.MIGSet == b.MIGSet && a.MIGCurrent == b.MIGCurrent && a.MIGPending == b.MIGPending &&
		a.GIProfile == b.GIProfile && a.GIStart == b.GIStart && a.CISlices == b.CISlices && a.CIStart == b.CIStart
}

// MIGUUID is a MIG device's UUID as the library gives it: name-based
// (version 5 form) on its GPU's UUID and the two instance ids.
func MIGUUID(gpuUUID string, gi, ci int) string {
	h := uint64(1469598103934665603)
	for i := 0; i < len(gpuUUID); i++ {
		h = (h ^ uint64(gpuUUID[i])) * 1099511628211
	}
	a := mix(h ^ (uint64(gi)<<8 | uint64(ci)))
	b := mix(a ^ 0x4d4947)
	a = a&^0xf000 | 0x5000
	b = b&^(3<<62) | 2<<62
	return fmt.Sprintf("MIG-%08x-%04x-%04x-%04x-%012x", uint32(a>>32), uint32(a>>16)&0xffff, uint32(a)&0xffff, uint32(b>>48), b&0xffffffffffff)
}

func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// MIGDevice is a MIG device of the node: a compute instance.
type MIGDevice struct {
	GPU, GI, CI int
	Row         int    // GPU-instance profile row
	Slices      uint32 // compute slices
}

// MIGDevices lists a GPU's MIG devices in the library's order (GPU
// instance, then compute instance); none while MIG is off or on a board
// without it, and no more than the board's maximum, as the library's
// handles by index give them (libnvml/mig_device.c).
func (s *State) MIGDevices(gpu int, d *snapshot.Device) []MIGDevice {
	g := s.GPUs[gpu]
	cleanMIG(d, &g)
	on := d.MIGCurrent != snapshot.NA && migOn(d, &g)
	var out []MIGDevice
	for gi := 0; gi < MaxGIs && on; gi++ {
		for ci := 0; ci < MaxCIs && g.GIProfile[gi] != 0 && len(out) < int(d.MaxMIGDevices); ci++ {
			if n := g.CISlices[gi*MaxCIs+ci]; n != 0 {
				out = append(out, MIGDevice{GPU: gpu, GI: gi, CI: ci, Row: int(g.GIProfile[gi]) - 1, Slices: n})
			}
		}
	}
	return out
}

// MIGTable is a board's GPU-instance profiles as its snapshot record holds
// them, enough to read a layout (profile.ParseMIGLayout) against; nil
// for a board without MIG.
func MIGTable(d *snapshot.Device) *profile.MIG {
	if d.MIGCurrent == snapshot.NA || d.MIGGICount == 0 {
		return nil
	}
	m := &profile.MIG{MaxDevices: d.MaxMIGDevices}
	for r, name := range MIGNames(d) {
		p := profile.GPUInstanceProfile{Name: name, ID: d.MIGGIID[r], MemorySlices: d.MIGGIMemorySlices[r], Instances: d.MIGGIInstances[r],
			MemoryMiB: d.MIGGIMemoryMIB[r], SMs: d.MIGGISms[r]}
		for e, v := range profile.MIGProfiles {
			if v == d.MIGGINvml[r] {
				p.NVML = e
			}
		}
		m.GPUInstances = append(m.GPUInstances, p)
	}
	return m
}

// GPUInstance is a GPU instance as nvmock ctl status lists it.
type GPUInstance struct {
	ID      int               `json:"id"`
	Profile string            `json:"profile"`
	Start   uint32            `json:"start"` // first memory slice
	CIs     []ComputeInstance `json:"computeInstances"`
}

// ComputeInstance is a compute instance of a GPUInstance: a MIG device.
type ComputeInstance struct {
	ID     int    `json:"id"`
	Slices uint32 `json:"slices"`
	Start  uint32 `json:"start"` // first compute slice in its GPU instance
}

// MIGMode is a GPU's MIG mode, current and pending (a change waiting for
// the GPU's processes to end), and its instances, as the library reads
// them; ok is false for a board without MIG.
func (s *State) MIGMode(gpu int, d *snapshot.Device) (current, pending bool, gis []GPUInstance, ok bool) {
	if d.MIGCurrent == snapshot.NA {
		return false, false, nil, false
	}
	g := s.GPUs[gpu]
	cleanMIG(d, &g)
	current, pending = migOn(d, &g), d.MIGPending == 1
	if g.MIGSet != 0 && g.MIGCurrent <= 1 && g.MIGPending <= 1 {
		pending = g.MIGPending == 1
	}
	names := MIGNames(d)
	for gi := 0; gi < MaxGIs && current; gi++ {
		p := g.GIProfile[gi]
		if p == 0 {
			continue
		}
		x := GPUInstance{ID: gi, Profile: names[p-1], Start: g.GIStart[gi], CIs: []ComputeInstance{}}
		for ci := 0; ci < MaxCIs; ci++ {
			if n := g.CISlices[gi*MaxCIs+ci]; n != 0 {
				x.CIs = append(x.CIs, ComputeInstance{ID: ci, Slices: n, Start: g.CIStart[gi*MaxCIs+ci]})
			}
		}
		gis = append(gis, x)
	}
	return current, pending, gis, true
}
