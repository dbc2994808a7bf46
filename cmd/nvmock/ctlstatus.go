package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/live"
)

// Status is what nvmock ctl status --json prints.
type Status struct {
	State     string         `json:"state"`
	Frozen    *time.Time     `json:"frozenAt,omitempty"`
	GPUs      []GPUStatus    `json:"gpus"`
	Processes []live.Process `json:"processes"`
	// InfiniBand is the node's port faults (nvmock ctl ib); nil: a node
	// without InfiniBand.
	InfiniBand []string `json:"infinibandFaults,omitempty"`
}

// GPUStatus is one GPU's part of Status.
type GPUStatus struct {
	Index  int           `json:"index"`
	Model  bool          `json:"model"`
	Load   [4]uint32     `json:"load"` // GPU, memory, encoder, decoder %
	Jitter uint32        `json:"jitter"`
	Faults []FaultStatus `json:"faults"`
	// Settings are those changed with nvidia-smi (-pm, -c, -pl, -e, gpm -s), kept
	// until the node is reinstalled; nil: none.
	Settings *GPUSettings `json:"settings,omitempty"`
	// MIG is the GPU's MIG mode and instances; nil: a board without MIG,
	// or a state without its snapshot.
	MIG *MIGStatus `json:"mig,omitempty"`
	// ResetAt is when nvidia-smi -r last reset the GPU; nil: never.
	ResetAt *time.Time `json:"resetAt,omitempty"`
}

// MIGStatus is a GPU's MIG mode and its instances.
type MIGStatus struct {
	Current   bool               `json:"current"`
	Pending   bool               `json:"pending"`
	Instances []live.GPUInstance `json:"instances"`
}

func (m *MIGStatus) String() string {
	mode := map[bool]string{true: "Enabled", false: "Disabled"}
	out := mode[m.Current]
	if m.Pending != m.Current {
		out += ", " + mode[m.Pending] + " pending"
	}
	for _, gi := range m.Instances {
		var cis []string
		for _, ci := range gi.CIs {
			cis = append(cis, fmt.Sprintf("%d:%dc@%d", ci.ID, ci.Slices, ci.Start))
		}
		if len(cis) == 0 {
			cis = append(cis, "no compute instance")
		}
		out += fmt.Sprintf("; GI %d %s@%d (%s)", gi.ID, gi.Profile, gi.Start, strings.Join(cis, " "))
	}
	return out
}

// GPUSettings are the node settings changed on one GPU; unset: the
// board's.
type GPUSettings struct {
	Persistence  *bool   `json:"persistence,omitempty"`
	ComputeMode  string  `json:"computeMode,omitempty"`
	PowerLimitMW *uint32 `json:"powerLimitMW,omitempty"`
	GPMStream    *bool   `json:"gpmStream,omitempty"`
	ECCPending   *bool   `json:"eccPending,omitempty"` // from the next boot
	Timeslice    string  `json:"timeslice,omitempty"`  // the compute policy's
	Accounting   *bool   `json:"accounting,omitempty"`
	Draining     bool    `json:"draining,omitempty"` // nvidia-smi drain -m 1: new processes do not see it
	// Clock ranges and pairs in MHz: -lgc's and -lmc's min and max, -ac's
	// memory and graphics clocks.
	LockedGPUClocks    *[2]uint32 `json:"lockedGPUClocks,omitempty"`
	LockedMemoryClocks *[2]uint32 `json:"lockedMemoryClocks,omitempty"`
	ApplicationsClocks *[2]uint32 `json:"applicationsClocks,omitempty"`
}

// computeModes are nvmlComputeMode_t's names, as nvidia-smi prints them.
var computeModes = []string{"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"}

// timeslices are the compute policy's timeslice names, as nvidia-smi
// compute-policy prints them.
var timeslices = []string{"Default", "Short", "Medium", "Long"}

func settingsOf(g *live.GPU) *GPUSettings {
	if g.CfgSet == 0 {
		return nil
	}
	var st GPUSettings
	if g.CfgSet&live.CfgPersistence != 0 {
		on := g.Persistence != 0
		st.Persistence = &on
	}
	if g.CfgSet&live.CfgComputeMode != 0 {
		st.ComputeMode = fmt.Sprint(g.ComputeMode)
		if int(g.ComputeMode) < len(computeModes) {
			st.ComputeMode = computeModes[g.ComputeMode]
		}
	}
	if g.CfgSet&live.CfgPowerLimit != 0 {
		mw := g.PowerLimitMW
		st.PowerLimitMW = &mw
	}
	if g.CfgSet&live.CfgECCPending != 0 {
		on := g.ECCPending != 0
		st.ECCPending = &on
	}
	if g.CfgSet&live.CfgGpmStream != 0 {
		on := g.GpmStream != 0
		st.GPMStream = &on
	}
	if g.CfgSet&live.CfgTimeslice != 0 {
		st.Timeslice = fmt.Sprint(g.Timeslice)
		if int(g.Timeslice) < len(timeslices) {
			st.Timeslice = timeslices[g.Timeslice]
		}
	}
	if g.CfgSet&live.CfgAccounting != 0 {
		on := g.Accounting != 0
		st.Accounting = &on
	}
	st.Draining = g.CfgSet&live.CfgDrain != 0 && g.Drain == 1 // NVML_FEATURE_ENABLED, as the library reads it
	if g.CfgSet&live.CfgGPULocked != 0 {
		st.LockedGPUClocks = &[2]uint32{g.GPULockedMin, g.GPULockedMax}
	}
	if g.CfgSet&live.CfgMemLocked != 0 {
		st.LockedMemoryClocks = &[2]uint32{g.MemLockedMin, g.MemLockedMax}
	}
	if g.CfgSet&live.CfgAppClocks != 0 {
		st.ApplicationsClocks = &[2]uint32{g.AppClockMem, g.AppClockGfx}
	}
	return &st
}

func (st *GPUSettings) String() string {
	var out []string
	if st.Persistence != nil {
		out = append(out, map[bool]string{true: "persistence Enabled", false: "persistence Disabled"}[*st.Persistence])
	}
	if st.ComputeMode != "" {
		out = append(out, "compute mode "+st.ComputeMode)
	}
	if st.PowerLimitMW != nil {
		out = append(out, fmt.Sprintf("power limit %.2f W", float64(*st.PowerLimitMW)/1000))
	}
	if st.ECCPending != nil {
		out = append(out, map[bool]string{true: "ECC Enabled at next boot", false: "ECC Disabled at next boot"}[*st.ECCPending])
	}
	if st.GPMStream != nil {
		out = append(out, map[bool]string{true: "GPM streaming Enabled", false: "GPM streaming Disabled"}[*st.GPMStream])
	}
	if st.Timeslice != "" {
		out = append(out, "timeslice "+st.Timeslice)
	}
	if st.Accounting != nil {
		out = append(out, map[bool]string{true: "accounting Enabled", false: "accounting Disabled"}[*st.Accounting])
	}
	if st.Draining {
		out = append(out, "draining (left out of new processes)")
	}
	if c := st.LockedGPUClocks; c != nil {
		out = append(out, fmt.Sprintf("GPU clocks locked %d-%d MHz", c[0], c[1]))
	}
	if c := st.LockedMemoryClocks; c != nil {
		out = append(out, fmt.Sprintf("memory clocks locked %d-%d MHz", c[0], c[1]))
	}
	if c := st.ApplicationsClocks; c != nil {
		out = append(out, fmt.Sprintf("applications clocks memory %d MHz, graphics %d MHz", c[0], c[1]))
	}
	return strings.Join(out, ", ")
}

// FaultStatus is one fault, for people.
type FaultStatus struct {
	Kind    string `json:"kind"`
	XID     uint32 `json:"xid,omitempty"`
	Trigger string `json:"trigger"`
	PID     uint32 `json:"pid,omitempty"`
	Count   uint32 `json:"count,omitempty"` // ECC errors, or nvlink_down's link
}

func triggerText(f live.Fault) string {
	switch f.Trigger {
	case live.TriggerAt:
		return "at " + time.Unix(0, int64(f.Param)).UTC().Format(time.RFC3339Nano)
	case live.TriggerCalls:
		return "after " + strconv.FormatUint(f.Param, 10) + " calls"
	case live.TriggerProbability:
		return "probability " + strconv.FormatFloat(float64(f.Param)/(1<<32), 'g', 4, 64)
	}
	return "unknown"
}

func ctlStatus(f *live.File, args []string, w io.Writer) error {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := ctlFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return fmt.Errorf("%q: status takes no argument (only --json)", pos[0])
	}
	s := f.Read()
	if err := f.Check(s); err != nil {
		return err
	}
	// An exited process is gone, as the library shows it, until the next
	// write removes it from the state.
	st := Status{State: f.Path, Processes: slices.DeleteFunc(s.Processes(), live.Dead)}
	if st.Processes == nil {
		st.Processes = []live.Process{}
	}
	if s.Header.Frozen != 0 {
		t := time.Unix(0, int64(s.Header.FrozenNS)).UTC()
		st.Frozen = &t
	}
	devs, _ := live.Snapshot(f.Path) // none: no MIG column
	for i := 0; i < int(s.Header.Gpus); i++ {
		g := &s.GPUs[i]
		gs := GPUStatus{Index: i, Model: g.Model != 0, Load: g.Load, Jitter: g.Jitter, Faults: []FaultStatus{}, Settings: settingsOf(g)}
		if i < len(devs) {
			if cur, pend, gis, ok := s.MIGMode(i, &devs[i]); ok {
				gs.MIG = &MIGStatus{Current: cur, Pending: pend, Instances: gis}
				if gs.MIG.Instances == nil {
					gs.MIG.Instances = []live.GPUInstance{}
				}
			}
		}
		if g.ResetNS != 0 {
			t := time.Unix(0, int64(g.ResetNS)).UTC()
			gs.ResetAt = &t
		}
		for _, fl := range s.Faults(i) {
			gs.Faults = append(gs.Faults, FaultStatus{Kind: live.KindName(fl.Kind), XID: fl.XID, Trigger: triggerText(fl), PID: fl.PID, Count: fl.Count})
		}
		st.GPUs = append(st.GPUs, gs)
	}
	if faults, err := hostprep.IBFaults(f.Path); err == nil {
		st.InfiniBand = []string{}
		for _, ft := range faults {
			st.InfiniBand = append(st.InfiniBand, ft.String())
		}
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "state %s", st.State)
	if st.Frozen != nil {
		fmt.Fprintf(tw, " (clock frozen at %s)", st.Frozen.Format(time.RFC3339Nano))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "GPU\tLOAD\tMEMORY\tENC\tDEC\tJITTER\tFAULTS")
	for _, g := range st.GPUs {
		load := "static"
		if g.Model {
			load = fmt.Sprintf("%d%%", g.Load[0])
		}
		var fl []string
		for _, x := range g.Faults {
			t := x.Kind
			if x.Kind == "nvlink_down" {
				t += fmt.Sprintf(" link %d", x.Count)
			}
			if x.XID != 0 {
				t += fmt.Sprintf(" (XID %d)", x.XID)
			}
			if x.PID != 0 {
				t += fmt.Sprintf(" for pid %d only", x.PID)
			}
			fl = append(fl, t+" "+x.Trigger)
		}
		faults := "-"
		if len(fl) > 0 {
			faults = strings.Join(fl, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%d%%\t%d%%\t%d%%\t%d%%\t%s\n", g.Index, load, g.Load[1], g.Load[2], g.Load[3], g.Jitter, faults)
	}
	head := "\nGPU\tSETTINGS (nvidia-smi -pm, -c, -pl, -e, -am, -lgc, -lmc, -ac, gpm -s, compute-policy, drain; until reinstalled)\n"
	for _, g := range st.GPUs {
		if g.Settings != nil {
			fmt.Fprintf(tw, "%s%d\t%s\n", head, g.Index, g.Settings)
			head = ""
		}
	}
	head = "\nGPU\tMIG (GPU instance profile@memory slice, compute instances id:slices c@slice)\n"
	for _, g := range st.GPUs {
		if g.MIG != nil && (g.MIG.Current || g.MIG.Pending) {
			fmt.Fprintf(tw, "%s%d\t%s\n", head, g.Index, g.MIG)
			head = ""
		}
	}
	head = "\nGPU\tLAST RESET (nvidia-smi -r)\n"
	for _, g := range st.GPUs {
		if g.ResetAt != nil {
			fmt.Fprintf(tw, "%s%d\t%s\n", head, g.Index, g.ResetAt.Format(time.RFC3339Nano))
			head = ""
		}
	}
	if len(st.Processes) > 0 {
		fmt.Fprintln(tw, "\nPID\tGPU\tGI\tCI\tTYPE\tMEMORY\tNAME\tOWNER")
		for _, p := range st.Processes {
			gi, ci := "-", "-"
			if p.MIG != nil {
				gi, ci = strconv.Itoa(p.MIG.GI), strconv.Itoa(p.MIG.CI)
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d MiB\t%s\t%s\n", p.PID, p.GPU, gi, ci, procTypeNames[p.Type], p.UsedBytes>>20, p.Name, p.Owner)
		}
	}
	if st.InfiniBand != nil {
		ib := "none"
		if len(st.InfiniBand) > 0 {
			ib = strings.Join(st.InfiniBand, "; ")
		}
		fmt.Fprintf(tw, "\nInfiniBand port faults: %s\n", ib)
	}
	return tw.Flush()
}
