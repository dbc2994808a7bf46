package gen

import (
	"bytes"
	"fmt"
	"go/format"
	"strings"
)

// The live state schema: the file every process using the library maps
// beside the snapshot, written only by nvmock's own tools (package live).
// Bump StateVersion on any change, but one: a spare word may become a
// setting guarded by a CFG_* bit (gpm_stream, ecc_pending, timeslice), since a file
// with the bit clear reads as before to old and new libraries alike.

// StateVersion is the layout version written into every state file.
const StateVersion = 12

// The state file has fixed capacities, so it never changes size under a
// reader (a shrinking mapping would fault in every process).
const (
	StateGPUs   = 64  // GPU records; a node uses the first Header.GPUs
	StateFaults = 8   // fault slots per GPU
	StateEvents = 256 // the event ring
	StateProcs  = 256 // registered processes
	StateGIs    = 15  // GPU instances per GPU, by GPU-instance id
	StateCIs    = 8   // compute instances per GPU instance, by id
)

// StateEnums are the numbers both sides give a meaning to.
var StateEnums = []struct {
	Name  string
	Value int
	Doc   string
}{
	{"FAULT_LOST", 1, "every call on the GPU answers GPU_IS_LOST"},
	{"FAULT_ECC", 2, "uncorrectable ECC errors: counts, remaps or retired pages"},
	{"FAULT_THERMAL", 3, "thermal slowdown"},
	{"FAULT_POWER_BRAKE", 4, "power brake slowdown"},
	{"FAULT_NVLINK_DOWN", 5, "an NVLink goes down"},
	{"FAULT_XID", 6, "an XID event and nothing more"},
	{"FAULT_SBE", 7, "correctable ECC errors"},
	{"FAULT_REMAP_FAILURE", 8, "a row remapping failed"},
	{"CFG_PERSISTENCE", 1, "persistence holds the persistence mode"},
	{"CFG_COMPUTE_MODE", 2, "compute_mode holds the compute mode"},
	{"CFG_POWER_LIMIT", 4, "power_limit_mw holds the power limit"},
	{"CFG_GPM_STREAM", 8, "gpm_stream holds the GPM stream state"},
	{"CFG_ECC_PENDING", 16, "ecc_pending holds the pending ECC mode"},
	{"CFG_TIMESLICE", 32, "timeslice holds the compute policy's timeslice"},
	{"CFG_GPU_LOCKED", 64, "gpu_locked_min and _max hold the locked GPU clocks"},
	{"CFG_MEM_LOCKED", 128, "mem_locked_min and _max hold the locked memory clocks"},
	{"CFG_APP_CLOCKS", 256, "app_clock_mem and _gfx hold the applications clocks"},
	{"CFG_ACCOUNTING", 512, "accounting holds the accounting mode, accounting_since_ns when it was turned on"},
	{"CFG_DRAIN", 1024, "drain holds the drain state"},
	{"TRIGGER_AT", 1, "from time param (ns), node-wide"},
	{"TRIGGER_CALLS", 2, "after param calls on the GPU, counted by each process"},
	{"TRIGGER_PROBABILITY", 3, "each call with probability param / 2^32, drawn by each process"},
}

// StateSchema is the state layout: a header, StateGPUs GPU records,
// StateEvents events, then StateProcs processes.
var StateSchema = []Record{
	{Name: "header", Doc: "starts the file", Fields: []Field{
		{"magic", Str, 8, `"NVMOCKLV"`},
		{"version", U32, 0, "StateVersion"},
		{"header_size", U32, 0, ""},
		{"gpu_size", U32, 0, ""},
		{"event_size", U32, 0, ""},
		{"proc_size", U32, 0, ""},
		{"gpus", U32, 0, "GPUs of the node: the snapshot's device count"},
		{"seq", U32, 0, "seqlock: odd while a writer is inside"},
		{"wake", U32, 0, "futex word: bumped, and woken, by every write"},
		{"ring", U32, 0, "events published so far"},
		{"frozen", U32, 0, "1: the clock stands at frozen_ns"},
		{"procs", U32, 0, "registered processes: 0 lets readers skip the table"},
		{"pad", U32, 0, ""},
		{"frozen_ns", U64, 0, "CLOCK_REALTIME"},
		{"seed", U64, 0, "noise seed"},
		{"generation", U64, 0, "writes so far"},
	}},
	{Name: "gpu", Doc: "the live state of one GPU", Fields: []Field{
		{"model", U32, 0, "1: readings follow the load model; 0: the snapshot's"},
		{"jitter", U32, 0, "% amplitude of utilization noise"},
		{"load", U32s, 4, "% by engine: GPU, memory, encoder, decoder"},
		{"prev_load", U32s, 4, "the segment before"},
		{"temp0_mc", U32, 0, "temperature at since_ns, milli-C"},
		{"prev_temp0_mc", U32, 0, ""},
		{"since_ns", U64, 0, "when the load was set"},
		{"prev_since_ns", U64, 0, ""},
		{"energy0_mj", U64, 0, "energy counter at since_ns"},
		{"prev_energy0_mj", U64, 0, ""},
		{"viol0_ns", U64, 0, "time the load held the clocks back for power, at since_ns"},
		{"prev_viol0_ns", U64, 0, ""},
		{"faults", U32, 0, "fault slots in use, first to last"},
		{"ecc_pending", U32, 0, "nvmlEnableState_t: the ECC mode nvidia-smi -e set, from the next boot (a setting, here for the layout)"},
		{"fault_kind", U32s, StateFaults, "FAULT_*"},
		{"fault_trigger", U32s, StateFaults, "TRIGGER_*"},
		{"fault_xid", U32s, StateFaults, "the XID the fault reports"},
		{"fault_pid", U32s, StateFaults, "0: node-wide; else the only process it hits"},
		{"fault_count", U32s, StateFaults, "errors it adds (ECC), or the link (NVLink)"},
		{"fault_id", U32s, StateFaults, "unique per injection"},
		{"fault_param", U64s, StateFaults, "trigger: time ns, calls, or probability x 2^32"},
		{"mig_set", U32, 0, "1: mig_current and mig_pending hold the modes; 0: the snapshot's"},
		{"mig_current", U32, 0, ""},
		{"mig_pending", U32, 0, ""},
		{"timeslice", U32, 0, "nvidia-smi compute-policy --set-timeslice: 0 default, 1 short, 2 medium, 3 long"},
		{"gi_profile", U32s, StateGIs, "by GPU-instance id: row + 1 of the snapshot's profile table; 0: none"},
		{"gi_start", U32s, StateGIs, "first memory slice"},
		{"ci_slices", U32s, StateGIs * StateCIs, "by GPU instance x 8 + compute-instance id: compute slices; 0: none"},
		{"ci_start", U32s, StateGIs * StateCIs, "first compute slice in its GPU instance"},
		{"cfg_set", U32, 0, "CFG_* bits: the settings below that a setter changed; the others are the snapshot's"},
		{"persistence", U32, 0, "nvmlEnableState_t"},
		{"compute_mode", U32, 0, "nvmlComputeMode_t"},
		{"power_limit_mw", U32, 0, "the power limit a setter asked for"},
		{"prev_power_limit_mw", U32, 0, "the power limit in force in the segment before; 0: the current one"},
		{"gpm_stream", U32, 0, "nvmlEnableState_t: GPM streaming (nvidia-smi gpm --set-stream-state)"},
		{"gpu_locked_min", U32, 0, "MHz: the GPU clock range nvidia-smi -lgc locked"},
		{"gpu_locked_max", U32, 0, ""},
		{"mem_locked_min", U32, 0, "MHz: the memory clock range nvidia-smi -lmc locked"},
		{"mem_locked_max", U32, 0, ""},
		{"app_clock_mem", U32, 0, "MHz: the applications clocks nvidia-smi -ac set"},
		{"app_clock_gfx", U32, 0, ""},
		{"accounting_since_ns", U64, 0, "when nvidia-smi -am 1 turned accounting on: processes since are accounted"},
		{"accounting", U32, 0, "nvmlEnableState_t: per-process accounting (nvidia-smi -am)"},
		{"reset_fault_id", U32, 0, "the last fault id when it was reset: of faults at reset_ns itself, those up to it came before the reset"},
		{"reset_ns", U64, 0, "when nvidia-smi -r last reset the GPU: errors by then leave the volatile counts and their rows are remapped; 0: never"},
		{"drain", U32, 0, "nvmlEnableState_t: nvidia-smi drain -m 1; a drained GPU is left out of the processes that start after"},
		{"pad", U32, 0, ""},
	}},
	{Name: "event", Doc: "one published event", Fields: []Field{
		{"serial", U64, 0, "ring position + 1; 0: never written"},
		{"time_ns", U64, 0, ""},
		{"type", U64, 0, "nvmlEventType*"},
		{"data", U64, 0, "the XID"},
		{"gpu", U32, 0, "node index"},
		{"pad", U32, 0, ""},
	}},
	{Name: "proc", Doc: "a process registered on a GPU", Fields: []Field{
		{"pid", U32, 0, "0: free slot"},
		{"gpu", U32, 0, "node index"},
		{"type", U32, 0, "1 compute, 2 graphics, 3 both"},
		{"pidns", U32, 0, "inode of the pid namespace pid is in; 0: unknown"},
		{"used_bytes", U64, 0, ""},
		{"start_ns", U64, 0, "when it was registered"},
		{"name", Str, 64, ""},
		{"owner", Str, 80, "who registered it: ctl, or container:<64-hex id>"},
		{"mig_gi", U32, 0, "GPU-instance id + 1 of the MIG device it runs on; 0: the whole GPU"},
		{"mig_ci", U32, 0, "compute-instance id of that MIG device"},
	}},
}

// StateC is the C header for the state layout.
func StateC() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by libnvml/gen/nvmlgen from libnvml/gen/state.go. DO NOT EDIT.\n\n")
	b.WriteString("#ifndef NVMOCK_STATE_GEN_H\n#define NVMOCK_STATE_GEN_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n")
	fmt.Fprintf(&b, "#define STATE_VERSION %d\n#define STATE_GPUS %d\n#define STATE_FAULTS %d\n#define STATE_EVENTS %d\n#define STATE_PROCS %d\n#define STATE_GIS %d\n#define STATE_CIS %d\n\n",
		StateVersion, StateGPUs, StateFaults, StateEvents, StateProcs, StateGIs, StateCIs)
	for _, e := range StateEnums {
		fmt.Fprintf(&b, "#define LIVE_%s %d // %s\n", e.Name, e.Value, e.Doc)
	}
	b.WriteString("\n")
	for _, r := range StateSchema {
		if err := cStruct(&b, "live", "state", r); err != nil {
			return nil, err
		}
	}
	b.WriteString("#endif\n")
	return b.Bytes(), nil
}

// StateGo is the Go mirror of the state layout, for package live.
func StateGo() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by libnvml/gen/nvmlgen from libnvml/gen/state.go. DO NOT EDIT.\n\npackage live\n\n")
	fmt.Fprintf(&b, "// Version is the state layout version.\nconst Version = %d\n\n", StateVersion)
	fmt.Fprintf(&b, "// Capacities of the file.\nconst (\n\tMaxGPUs = %d\n\tMaxFaults = %d\n\tMaxEvents = %d\n\tMaxProcs = %d\n\tMaxGIs = %d\n\tMaxCIs = %d\n)\n\n",
		StateGPUs, StateFaults, StateEvents, StateProcs, StateGIs, StateCIs)
	b.WriteString("// Fault kinds, setting bits and triggers.\nconst (\n")
	for _, e := range StateEnums {
		fmt.Fprintf(&b, "\t%s = %d // %s\n", camel(strings.ToLower(e.Name)), e.Value, e.Doc)
	}
	b.WriteString(")\n\n")
	for _, r := range StateSchema {
		if err := goStruct(&b, r); err != nil {
			return nil, err
		}
	}
	return format.Source(bytes.TrimRight(b.Bytes(), "\n"))
}
