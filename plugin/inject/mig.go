package inject

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/libnvml/snapshot"
	"github.com/nvmock/nvmock/live"
)

// MIGDevice is a MIG device of the node: a compute instance, as the live
// state had it when probed (MIG layouts change at run time).
type MIGDevice struct {
	GPU     int    // node index of its GPU
	Index   int    // under its GPU, as nvidia-smi -L and CDI's "GPU:index" number it
	UUID    string // MIG-..., as the library reports it
	Profile string // 1g.5gb, 1c.3g.20gb
	GI, CI  int    // its GPU and compute instance ids
	// Caps are the capability nodes of its GPU instance and compute
	// instance: what lets a process use it, as on a real node.
	Caps [2]DeviceNode
}

// ProbeMIG lists the node's MIG devices from its live state, for the
// GPUs of the snapshot at snap, with their capability nodes in the
// overlay's dev directory, and which GPUs are in MIG mode (on, by index);
// gen is the state's generation, to re-probe when it moves. No state, or
// a board without MIG: none.
func ProbeMIG(statePath string, snap []byte, gpus []GPU, dev string) (migs []MIGDevice, on []bool, gen uint64, err error) {
	if statePath == "" {
		return nil, nil, 0, nil
	}
	s, err := live.ReadFile(statePath)
	if err != nil {
		return nil, nil, 0, err
	}
	_, devs, err := snapshot.Read(snap)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("snapshot: %w", err)
	}
	on = make([]bool, len(gpus))
	for i := range devs {
		if i >= len(gpus) || i >= int(s.Header.Gpus) || devs[i].MIGCurrent == snapshot.NA {
			continue
		}
		on[i], _, _, _ = s.MIGMode(i, &devs[i])
		names := live.MIGNames(&devs[i])
		for k, m := range s.MIGDevices(i, &devs[i]) {
			d := MIGDevice{GPU: i, Index: k, UUID: live.MIGUUID(gpus[i].UUID, m.GI, m.CI), Profile: names[m.Row], GI: m.GI, CI: m.CI}
			if m.Slices != devs[i].MIGGIComputeSlices[m.Row] {
				d.Profile = strconv.Itoa(int(m.Slices)) + "c." + d.Profile
			}
			for c, ci := range []int{-1, m.CI} {
				name := fmt.Sprintf("nvidia-caps/nvidia-cap%d", hostprep.MIGCapMinor(gpus[i].Index, m.GI, ci))
				if d.Caps[c], err = statNode(dev, name); err != nil {
					return nil, nil, 0, fmt.Errorf("MIG device %s: %w", d.UUID, err)
				}
			}
			migs = append(migs, d)
		}
	}
	return migs, on, s.Header.Generation, nil
}

// lookupMIG finds a MIG device by UUID or by GPU:index.
func (n *NodeState) lookupMIG(s string) (int, string) {
	if hasPrefixFold(s, "MIG-") {
		if k := n.MIGIndex(s); k >= 0 {
			return k, ""
		}
		return -1, fmt.Sprintf("names %s, no MIG device of this node", quote(s))
	}
	g, m, _ := strings.Cut(s, ":")
	for k := range n.MIG {
		if strconv.Itoa(n.MIG[k].GPU) == g && strconv.Itoa(n.MIG[k].Index) == m {
			return k, ""
		}
	}
	return -1, fmt.Sprintf("names MIG device %s, which this node does not have", quote(s))
}

// isMIGName says whether s names a MIG device: MIG-<uuid> or GPU:index.
func isMIGName(s string) bool {
	if hasPrefixFold(s, "MIG-") {
		return true
	}
	g, m, ok := strings.Cut(s, ":")
	return ok && digits(g) && digits(m)
}

// selectMIGProfile marks the least used MIG device of a profile not yet
// given to this container, lower index first on a tie ("mig-1g.5gb" in a
// request).
func (n *NodeState) selectMIGProfile(profile string, mig []bool) string {
	best := -1
	for k := range n.MIG {
		if n.MIG[k].Profile == profile && !mig[k] && (best < 0 || n.migUse(k) < n.migUse(best)) {
			best = k
		}
	}
	if best >= 0 {
		mig[best] = true
		return ""
	}
	return fmt.Sprintf("asks for a %s MIG device; the node has %s", quote(profile), n.migProfiles())
}

func (n *NodeState) migUse(k int) int {
	if n.MIGInUse == nil {
		return 0
	}
	return n.MIGInUse[k]
}

// Named reads an NVIDIA_VISIBLE_DEVICES value as the decision reads
// NVIDIA's interfaces (CDI names, indices, UUIDs, MIG UUIDs and GPU:index,
// all, none, void), for a restarted plugin's use counts: the node's GPUs it
// names, a MIG device's GPU too, ascending, and the MIG devices (indices in
// MIG). Entries naming nothing of the node are left out.
func (n *NodeState) Named(visible string) (gpus, migs []int) {
	add := func(s []int, i int) []int {
		if !slices.Contains(s, i) {
			s = append(s, i)
		}
		return s
	}
	v := unqualify(visible)
	switch special(v) {
	case "all":
		for i := range n.GPUs {
			gpus = append(gpus, i)
		}
		return gpus, nil
	case "none", "void":
		return nil, nil
	}
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if isMIGName(e) {
			if k, why := n.lookupMIG(e); why == "" {
				migs = add(migs, k)
				gpus = add(gpus, n.MIG[k].GPU)
			}
		} else if i, why := n.lookup(e, true); why == "" {
			gpus = add(gpus, i)
		}
	}
	slices.Sort(gpus)
	return gpus, migs
}

// MIGIndex is the index in MIG of the MIG device with a UUID, or -1.
func (n *NodeState) MIGIndex(uuid string) int {
	for k := range n.MIG {
		if strings.EqualFold(n.MIG[k].UUID, uuid) {
			return k
		}
	}
	return -1
}

func (n *NodeState) migProfiles() string {
	count := map[string]int{}
	var order []string
	for _, m := range n.MIG {
		if count[m.Profile] == 0 {
			order = append(order, m.Profile)
		}
		count[m.Profile]++
	}
	if len(order) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, p := range order {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d x %s", count[p], p)
	}
	return b.String()
}
