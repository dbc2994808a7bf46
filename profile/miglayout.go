package profile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MIGLayout is how the GPUs of a node are partitioned at install, in the
// spirit of mig-parted's configs. Spec is one of
//
//	all-disabled, all-enabled      MIG off, or on with no instances
//	all-<profile>                  every GPU full of one profile: all-1g.5gb
//	all-balanced                   two 1-slice, one 2-slice, one 3-slice
//	GPUS=ITEMS[;GPUS=ITEMS...]     per GPU: 0-3=3g.20gb*2;4-7=all-1g.5gb
//
// where GPUS is all or a list of indices and ranges (0,2,4-7), and ITEMS
// a named layout or profiles with counts (3g.20gb,2g.10gb,1g.5gb*2). Later
// groups override earlier ones; GPUs no group names keep the profile's mode.
type MIGLayout struct {
	Spec string
	GPUs []GPULayout // by GPU index
}

// GPULayout is one GPU's part: whether the layout sets it, its mode, and
// its GPU instances (profile names, each with one whole compute instance),
// largest first.
type GPULayout struct {
	Set       bool
	Enabled   bool
	Instances []string
}

// otherLayouts ends an unknown profile's error: it may have been meant as
// a layout.
const otherLayouts = "layouts: all-PROFILE, all-balanced, all-enabled, all-disabled"

// ParseMIGLayout reads spec for a node of gpus GPUs of board m. Whether the
// instances fit is checked where they are placed (live.State).
func ParseMIGLayout(spec string, m *MIG, gpus int) (*MIGLayout, error) {
	l := &MIGLayout{Spec: spec, GPUs: make([]GPULayout, gpus)}
	if m == nil || len(m.GPUInstances) == 0 {
		// all-disabled asks nothing of such a board, per GPU too.
		for _, g := range strings.Split(spec, ";") {
			if _, items, ok := strings.Cut(g, "="); (ok && items != "all-disabled") || (!ok && g != "all-disabled") {
				return nil, fmt.Errorf("mig layout %q: the board has no MIG profiles", spec)
			}
		}
		return l, nil
	}
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New(`mig layout "": empty; give one such as all-balanced, or all-disabled`)
	}
	groups := strings.Split(spec, ";")
	for _, g := range groups {
		sel, items, ok := strings.Cut(g, "=")
		switch {
		case strings.TrimSpace(g) == "":
			return nil, fmt.Errorf("mig layout %q: an empty group (a ; too many)", spec)
		case !ok && len(groups) > 1:
			return nil, fmt.Errorf("mig layout %q: %q is not GPUS=ITEMS: with several groups each names its GPUs, such as all=%s", spec, g, g)
		case !ok:
			sel, items = "all", g
		}
		idx, err := ParseGPUs(sel, gpus)
		if err != nil {
			return nil, fmt.Errorf("mig layout %q: %w", spec, err)
		}
		part, err := m.gpuLayout(items)
		if err != nil {
			return nil, fmt.Errorf("mig layout %q: %w", spec, err)
		}
		for _, i := range idx {
			l.GPUs[i] = part
		}
	}
	return l, nil
}

func (m *MIG) profile(name string) *GPUInstanceProfile {
	for i := range m.GPUInstances {
		if m.GPUInstances[i].Name == name {
			return &m.GPUInstances[i]
		}
	}
	return nil
}

func (m *MIG) names() []string {
	var out []string
	for _, p := range m.GPUInstances {
		out = append(out, p.Name)
	}
	return out
}

func (m *MIG) gpuLayout(items string) (GPULayout, error) {
	switch {
	case items == "all-disabled":
		return GPULayout{Set: true}, nil
	case items == "all-enabled":
		return GPULayout{Set: true, Enabled: true}, nil
	case items == "all-balanced":
		var out []string
		for _, want := range []struct {
			nvml string
			n    int
		}{{"3_SLICE", 1}, {"2_SLICE", 1}, {"1_SLICE", 2}} {
			for _, p := range m.GPUInstances {
				if p.NVML == want.nvml {
					for k := 0; k < want.n; k++ {
						out = append(out, p.Name)
					}
				}
			}
		}
		return GPULayout{Set: true, Enabled: true, Instances: out}, nil
	case strings.HasPrefix(items, "all-") && !strings.Contains(items, ","):
		p := m.profile(strings.TrimPrefix(items, "all-"))
		if p == nil {
			return GPULayout{}, fmt.Errorf("%q: the board's profiles are %s (%s)", strings.TrimPrefix(items, "all-"), strings.Join(m.names(), ", "), otherLayouts)
		}
		return GPULayout{Set: true, Enabled: true, Instances: slices.Repeat([]string{p.Name}, int(p.Instances))}, nil
	}
	var out []string
	for _, it := range strings.Split(items, ",") {
		if strings.HasPrefix(it, "all-") {
			return GPULayout{}, fmt.Errorf("%q: a layout such as %s stands alone, not in a list of profiles", items, it)
		}
		name, count, hasCount := strings.Cut(it, "*")
		n := 1
		if hasCount {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 1 || n > MIGComputeSlices {
				return GPULayout{}, fmt.Errorf("%q: the count is not 1 to %d", it, MIGComputeSlices)
			}
		}
		if m.profile(name) == nil {
			return GPULayout{}, fmt.Errorf("%q: the board's profiles are %s (%s)", name, strings.Join(m.names(), ", "), otherLayouts)
		}
		out = append(out, slices.Repeat([]string{name}, n)...)
	}
	// Largest first, as they pack best.
	slices.SortStableFunc(out, func(a, b string) int {
		pa, pb := m.profile(a), m.profile(b)
		if pa.MemorySlices != pb.MemorySlices {
			return int(pb.MemorySlices) - int(pa.MemorySlices)
		}
		return int(pb.ComputeSlices()) - int(pa.ComputeSlices())
	})
	return GPULayout{Set: true, Enabled: true, Instances: out}, nil
}
