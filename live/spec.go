package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/nvmock/nvmock/profile"
)

// Spec is a node's live state written down: what nvmock ctl apply sets and
// the chart's live values hold.
type Spec struct {
	// Loads set readings moving on some GPUs.
	Loads []LoadSpec `json:"loads,omitempty"`
	// Faults are injected in order.
	Faults []FaultSpec `json:"faults,omitempty"`
}

// LoadSpec is nvmock ctl load in a file.
type LoadSpec struct {
	GPUs    string   `json:"gpus"`             // all, 3, 0,3 or 0-3
	Percent *float64 `json:"percent"`          // GPU load, required
	Memory  *float64 `json:"memory,omitempty"` // default: half the load
	Encoder float64  `json:"encoder,omitempty"`
	Decoder float64  `json:"decoder,omitempty"`
	Jitter  float64  `json:"jitter,omitempty"` // noise on utilization, % either way
}

// FaultSpec is nvmock ctl fault in a file.
type FaultSpec struct {
	GPUs        string   `json:"gpus"`
	Kind        string   `json:"kind"` // a key of Kinds
	XID         uint32   `json:"xid,omitempty"`
	Count       *uint64  `json:"count,omitempty"` // nil: the kind's
	Link        uint32   `json:"link,omitempty"`
	AfterCalls  *uint64  `json:"afterCalls,omitempty"`
	Probability *float64 `json:"probability,omitempty"`
	At          string   `json:"at,omitempty"` // RFC 3339
	In          string   `json:"in,omitempty"` // a duration from when it is applied
}

// ReadSpec reads a spec file strictly: an unknown field is an error naming
// it, its entry and its line. The file may be the chart's values block as
// it is (loads and faults under live:).
func ReadSpec(path string) (*Spec, error) {
	data, err := profile.ReadLimited(path)
	if err != nil {
		return nil, err
	}
	var doc yaml3.Node
	if err := yaml3.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %s", path, profile.OneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	if line := profile.SecondDocument(data); line > 0 {
		return nil, fmt.Errorf("%s:%d: a second YAML document; the loads and faults are one", path, line)
	}
	if len(doc.Content) == 0 {
		// An empty file is a slip (a wrong path, a file not yet written),
		// not a wish to clear the node (review: it cleared).
		return nil, fmt.Errorf("%s: empty; to clear the loads and faults, give loads: [] and faults: []", path)
	}
	top := doc.Content[0]
	if top.Kind == yaml3.MappingNode && len(top.Content) == 2 && top.Content[0].Value == "live" {
		top = top.Content[1]
	}
	// Nothing (the chart renders empty live values as null) clears.
	if top.Kind == yaml3.ScalarNode && top.Tag == "!!null" {
		return &Spec{}, nil
	}
	if top.Kind != yaml3.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of loads and faults", path, top.Line)
	}
	if err := unknownFields(top, reflect.TypeOf(Spec{}), ""); err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	// Decoded, not written back: aliases and merge keys resolve against
	// anchors anywhere in the file.
	var raw any
	if err := top.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: not valid YAML: %s", path, profile.OneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
	}
	body, err := json.Marshal(raw)
	if err != nil {
		if field, line := profile.NotANumber(data); line > 0 {
			return nil, fmt.Errorf("%s:%d: %s: not a number (.nan and .inf are not values)", path, line, strings.TrimPrefix(field, "live."))
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var s Spec
	if err := yaml.UnmarshalStrict(body, &s); err != nil {
		return nil, fmt.Errorf("%s%s", path, entryError(top, raw, err))
	}
	return &s, nil
}

// entryError names the list entry a decoding error is in, with its line
// (JSON's type errors name the field without the index): ":LINE:
// loads[1]: percent: expected a number, got string".
func entryError(top *yaml3.Node, raw any, err error) string {
	m, _ := raw.(map[string]any)
	t := reflect.TypeOf(Spec{})
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		list, ok := m[name].([]any)
		if !ok {
			continue
		}
		for j, e := range list {
			b, _ := json.Marshal(e)
			if err := yaml.UnmarshalStrict(b, reflect.New(t.Field(i).Type.Elem()).Interface()); err != nil {
				return fmt.Sprintf(":%d: %s[%d]: %s", entryLine(top, name, j), name, j, profile.DecodeMessage(err))
			}
		}
	}
	return ": " + profile.DecodeMessage(err)
}

// entryLine is the line of entry j of the list under key in top.
func entryLine(top *yaml3.Node, key string, j int) int {
	for i := 0; i+1 < len(top.Content); i += 2 {
		if v := top.Content[i+1]; top.Content[i].Value == key && v.Kind == yaml3.SequenceNode && j < len(v.Content) {
			return v.Content[j].Line
		}
	}
	return top.Line
}

// unknownFields finds the first key of n, a mapping read into t, that t
// has no field for, in its entries' lists too: "LINE: at: unknown field".
func unknownFields(n *yaml3.Node, t reflect.Type, at string) error {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		fields[name] = t.Field(i).Type
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" { // <<: *anchor; the decoder checks what it brings
			continue
		}
		ft, ok := fields[k.Value]
		where := k.Value
		if at != "" {
			where = at + "." + k.Value
		}
		switch {
		case !ok && at == "":
			return fmt.Errorf("%d: unknown field %q", k.Line, k.Value)
		case !ok:
			return fmt.Errorf("%d: %s: unknown field %q", k.Line, at, k.Value)
		}
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && v.Kind == yaml3.SequenceNode {
			for j, e := range v.Content {
				if e.Kind != yaml3.MappingNode {
					continue // the decoder names the type
				}
				if err := unknownFields(e, ft.Elem(), fmt.Sprintf("%s[%d]", where, j)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// NeedsBoards says whether Apply needs the boards: for loads, and for the
// links of nvlink_down faults.
func (sp *Spec) NeedsBoards() bool {
	if len(sp.Loads) > 0 {
		return true
	}
	for _, f := range sp.Faults {
		if f.Kind == "nvlink_down" {
			return true
		}
	}
	return false
}

// Apply makes the state's loads and faults what the spec says: those it
// does not list are cleared (registered processes stay), so applying the
// same file twice, as the chart does at each pod start, gives one state.
// On the first problem the error names the entry and field, and the caller
// keeps the state it had.
func (sp *Spec) Apply(s *State, boards []Board, now int64) error {
	n := int(s.Header.Gpus)
	old := make([]GPU, n)
	copy(old, s.GPUs[:n])
	kept := make([][MaxFaults]bool, n)
	for g := 0; g < n; g++ {
		if g < len(boards) {
			s.ResetToIdle(boards[g], g, now)
		} else {
			s.ResetReadings(g)
		}
	}
	loaded := map[int]int{} // GPU: the entry that loads it
	for i, l := range sp.Loads {
		at := fmt.Sprintf("loads[%d]", i)
		if l.GPUs == "" {
			return fmt.Errorf("%s.gpus: is required (all, or GPUs such as 0,2-3)", at)
		}
		gpus, err := profile.ParseGPUs(l.GPUs, n)
		if err != nil {
			return fmt.Errorf("%s.gpus: %w", at, err)
		}
		for _, g := range gpus {
			if k, ok := loaded[g]; ok {
				return fmt.Errorf("%s.gpus: GPU %d has a load already (loads[%d])", at, g, k)
			}
			loaded[g] = i
		}
		var ld Loads
		var errs []error
		pct := func(field string, v float64) uint32 {
			p, err := ParsePercent(at+"."+field, strconv.FormatFloat(v, 'g', -1, 64))
			errs = append(errs, err)
			return p
		}
		if l.Percent == nil {
			return fmt.Errorf("%s.percent: is required (0 to 100)", at)
		}
		ld.GPU = pct("percent", *l.Percent)
		ld.Memory = ld.GPU / 2
		if l.Memory != nil {
			ld.Memory = pct("memory", *l.Memory)
		}
		ld.Encoder, ld.Decoder, ld.Jitter = pct("encoder", l.Encoder), pct("decoder", l.Decoder), pct("jitter", l.Jitter)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for _, g := range gpus {
			if g >= len(boards) {
				return fmt.Errorf("%s: GPU %d is not in the snapshot; reinstall the node", at, g)
			}
			if err := boards[g].CheckLoad(g, ld); err != nil {
				return fmt.Errorf("%s.encoder: %w", at, err)
			}
			s.SetLoad(boards[g], g, ld, now)
		}
	}
	for i, f := range sp.Faults {
		at := fmt.Sprintf("faults[%d]", i)
		if f.GPUs == "" {
			return fmt.Errorf("%s.gpus: is required (all, or GPUs such as 0,2-3)", at)
		}
		gpus, err := profile.ParseGPUs(f.GPUs, n)
		if err != nil {
			return fmt.Errorf("%s.gpus: %w", at, err)
		}
		kind, ok := Kinds[f.Kind]
		if f.Kind == "" {
			return fmt.Errorf("%s.kind: is required: lost, ecc_uncorrectable, ecc_correctable, thermal, power_brake, nvlink_down, remap_failure or xid", at)
		}
		if !ok {
			return fmt.Errorf("%s.kind: %q is not one of lost, ecc_uncorrectable, ecc_correctable, thermal, power_brake, nvlink_down, remap_failure, xid", at, f.Kind)
		}
		if kind == FaultXID && f.XID == 0 {
			return fmt.Errorf("%s.xid: kind xid needs its XID (1 to %d)", at, MaxXID)
		}
		if f.XID > MaxXID {
			return fmt.Errorf("%s.xid: %d is not an XID (1 to %d)", at, f.XID, MaxXID)
		}
		var after, prob string
		if f.AfterCalls != nil {
			after = strconv.FormatUint(*f.AfterCalls, 10)
		}
		if f.Probability != nil {
			prob = strconv.FormatFloat(*f.Probability, 'g', -1, 64)
		}
		trig, param, err := ParseTrigger(after, prob, f.At, f.In, func() int64 { return now }, TriggerFields)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		if err := CheckFaultFields(kind, f.Link != 0, f.Count != nil, f.XID != 0, [3]string{"link", "count", "xid"}); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		var count uint32
		if f.Count != nil {
			if *f.Count < 1 || *f.Count > math.MaxUint32 {
				return fmt.Errorf("%s.count: %d is out of range; give 1 to %d, or leave it out", at, *f.Count, uint32(math.MaxUint32))
			}
			count = uint32(*f.Count)
		}
		fault := FaultOf(kind, f.XID, count, f.Link, 0)
		fault.Trigger, fault.Param = trig, param
		untimed := f.At == "" && f.In == ""
		for _, g := range gpus {
			if err := CheckFaultOn(boards, g, fault, at, at+".link"); err != nil {
				return err
			}
			if err := s.AddFault(g, fault, now); err != nil {
				if oa := (*OnAlready)(nil); errors.As(err, &oa) {
					continue // two entries give it one GPU: it has it
				}
				return fmt.Errorf("%s: %w", at, err)
			}
			keepOld(&s.GPUs[g], &old[g], &kept[g], untimed, now)
		}
	}
	return nil
}

// keepOld gives the fault just added to g the time and id of the same
// fault it had before the apply, if any: applying a file again (the chart
// does at each pod start) must not make its faults new, which would undo
// a GPU reset since and report their XIDs again. untimed: the entry gave
// no time, so any time of the old one's up to now matches.
func keepOld(g, o *GPU, used *[MaxFaults]bool, untimed bool, now int64) {
	i := g.Faults - 1
	for j := uint32(0); j < o.faults(); j++ {
		if used[j] || o.FaultKind[j] != g.FaultKind[i] || o.FaultXID[j] != g.FaultXID[i] || o.FaultCount[j] != g.FaultCount[i] ||
			o.FaultPID[j] != g.FaultPID[i] || o.FaultTrigger[j] != g.FaultTrigger[i] {
			continue
		}
		if o.FaultParam[j] != g.FaultParam[i] && (g.FaultTrigger[i] != TriggerAt || !untimed || o.FaultParam[j] > uint64(now)) {
			continue
		}
		used[j] = true
		g.FaultParam[i], g.FaultID[i] = o.FaultParam[j], o.FaultID[j]
		return
	}
}
