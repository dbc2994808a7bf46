package fidelity

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// Leaves are the leaf fields of one <gpu>, keyed by their path below it
// ("/pci/pci_bus_id"). A tag that repeats among its siblings carries its
// 1-based position ("/clocks_event_reasons/sw_power_cap[2]"); a tag that
// occurs once does not. Text is trimmed and its runs of white space are
// collapsed to one space.
type Leaves map[string]string

// FirstGPU reads an `nvidia-smi -q -x` document and returns the leaves of the
// first <gpu> directly below its root. Only the first GPU is scored: captures
// of 8-GPU nodes repeat the same board, and a mock node renders GPU 0 first.
func FirstGPU(r io.Reader) (Leaves, error) {
	dec := xml.NewDecoder(r) // strict; the DOCTYPE naming an external DTD is a directive it skips
	var (
		depth int
		gpu   *element
		open  []*element // the elements being read inside the first <gpu>
	)
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			depth++
			switch {
			case len(open) > 0:
				e := &element{tag: tagOf(tok.Name)}
				parent := open[len(open)-1]
				parent.children = append(parent.children, e)
				open = append(open, e)
			case gpu == nil && depth == 2 && tok.Name.Space == "" && tok.Name.Local == "gpu":
				gpu = &element{tag: "gpu"}
				open = append(open, gpu)
			}
		case xml.EndElement:
			depth--
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		case xml.CharData:
			// Comments and processing instructions are other tokens, so
			// text on both sides of one joins, as in ElementTree.
			if len(open) > 0 {
				open[len(open)-1].text.Write(tok)
			}
		}
	}
	if gpu == nil {
		return nil, errors.New("no <gpu> element below the root")
	}
	leaves := Leaves{}
	gpu.collect("", leaves)
	return leaves, nil
}

// FirstGPUFile is FirstGPU on a file; errors name the file.
func FirstGPUFile(path string) (Leaves, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := FirstGPU(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}

type element struct {
	tag      string
	text     strings.Builder
	children []*element
}

// tagOf spells a name as ElementTree does: "{namespace}local" when it has a
// namespace. nvidia-smi uses none.
func tagOf(n xml.Name) string {
	if n.Space != "" {
		return "{" + n.Space + "}" + n.Local
	}
	return n.Local
}

func (e *element) collect(prefix string, out Leaves) {
	count := map[string]int{}
	for _, c := range e.children {
		count[c.tag]++
	}
	seen := map[string]int{}
	for _, c := range e.children {
		seen[c.tag]++
		path := prefix + "/" + c.tag
		if count[c.tag] > 1 {
			path = fmt.Sprintf("%s[%d]", path, seen[c.tag])
		}
		if len(c.children) > 0 {
			c.collect(path, out) // an element with children is not a field; its own text is layout
			continue
		}
		// strings.Fields splits where Python's str.split() does on every
		// character XML allows (they differ only on U+001C..U+001F).
		out[path] = strings.Join(strings.Fields(c.text.String()), " ")
	}
}

// Kind is what a field says about the board.
type Kind string

const (
	// Identity fields tell one board from another of the same model
	// (UUID, serial, bus number): they differ by design and are not scored.
	Identity Kind = "identity"
	// Dynamic fields are readings that move (temperatures, power draw,
	// utilization, current clocks): not scored.
	Dynamic Kind = "dynamic"
	// Static fields are what the board is: the scored ones.
	Static Kind = "static"
)

// anyOf joins patterns into one alternation.
func anyOf(patterns ...string) *regexp.Regexp {
	return regexp.MustCompile(strings.Join(patterns, "|"))
}

var (
	identityRE = anyOf(
		`^/(uuid|serial|minor_number|module_id|board_id|pdi|gpu_fabric_guid)$`,
		`^/pci/(pci_bus|pci_bus_id|pci_domain|pci_device)$`,
		`^/platformInfo/`,
		`^/fabric/(clusterUuid|cliqueId)$`,
		`^/gpu_fabric_guid`,
	)
	dynamicRE = anyOf(
		`/temperature/(gpu_temp|memory_temp)$`,
		`power_draw`, `instant_power`, `average_power`, `energy`,
		`/utilization/`, `_samples/`, `/encoder_stats/`, `/fbc_stats/`, `/processes`,
		`^/clocks/`, `clocks_event_reasons`, `clocks_throttle_reasons`, `performance_state`,
		`_memory_usage/(used|free)$`,
		`tx_util`, `rx_util`, `current_link`, `replay`,
		`fan_speed`, `graphics_volt`, `/voltage/`,
		`inforom_bbx_flush`, `/timestamp`,
	)
)

// Classify says what kind of field a path is. A path matching both the
// identity and the dynamic patterns is identity.
func Classify(path string) Kind {
	switch {
	case identityRE.MatchString(path):
		return Identity
	case dynamicRE.MatchString(path):
		return Dynamic
	}
	return Static
}

var naRE = regexp.MustCompile(`(?i)^\[?(N/A|Not Supported|Unknown Error|Not Available|` +
	`Insufficient Permissions|Not Found|Requested functionality has been deprecated)\]?$`)

// IsNA says whether a field's text is one of the ways nvidia-smi says it has
// no value: empty, N/A, Not Supported, Unknown Error and the like, in any
// case, optionally in brackets.
func IsNA(text string) bool {
	return text == "" || naRE.MatchString(text)
}

// Outcome is how a field of the mock compares with the capture's.
type Outcome string

const (
	// Same text, N/A included.
	Same Outcome = "same"
	// Diff: both have a value, and they differ.
	Diff Outcome = "diff"
	// MockNA: the mock has no value where the board has one; the worst miss.
	MockNA Outcome = "mock_na"
	// HardwareNA: the mock has a value where the board has none.
	HardwareNA Outcome = "hw_na"
	// BothNA: neither has a value, but they say so differently
	// ("N/A" and "Not Supported").
	BothNA Outcome = "both_na"
)

// Outcomes lists every outcome, in the order reports print them.
var Outcomes = []Outcome{Same, Diff, MockNA, HardwareNA, BothNA}

func compare(mock, hardware string) Outcome {
	mockNA, hardwareNA := IsNA(mock), IsNA(hardware)
	switch {
	case mock == hardware:
		return Same
	case mockNA && hardwareNA:
		return BothNA
	case mockNA:
		return MockNA
	case hardwareNA:
		return HardwareNA
	}
	return Diff
}

// Row is one field both documents have.
type Row struct {
	Path     string
	Kind     Kind
	Outcome  Outcome
	Mock     string
	Hardware string
}

// Counts counts rows by outcome.
type Counts struct {
	Same, Diff, MockNA, HardwareNA, BothNA int
}

// of points at the count of one outcome.
func (c *Counts) of(o Outcome) *int {
	switch o {
	case Same:
		return &c.Same
	case Diff:
		return &c.Diff
	case MockNA:
		return &c.MockNA
	case HardwareNA:
		return &c.HardwareNA
	case BothNA:
		return &c.BothNA
	}
	panic(fmt.Sprintf("fidelity: unknown outcome %q", o))
}

// Of is the count of one outcome.
func (c Counts) Of(o Outcome) int { return *c.of(o) }

// Total is the number of rows counted.
func (c Counts) Total() int {
	return c.Same + c.Diff + c.MockNA + c.HardwareNA + c.BothNA
}

// String is "same=N diff=N mock_na=N hw_na=N both_na=N".
func (c Counts) String() string {
	parts := make([]string, len(Outcomes))
	for i, o := range Outcomes {
		parts[i] = fmt.Sprintf("%s=%d", o, c.Of(o))
	}
	return strings.Join(parts, " ")
}

// Report is the comparison of a mock's first GPU with the capture's.
type Report struct {
	// Rows are the fields both documents have, sorted by path. A field
	// only one prints (a newer nvidia-smi's addition) is left out.
	Rows []Row
	// All counts every row; Static only the static ones.
	All, Static Counts
	// Score is the static fidelity: the percentage of static rows that
	// are the same (0 when there are none).
	Score float64
}

// Compare compares the leaves of a mock's GPU with those of the capture.
func Compare(mock, hardware Leaves) Report {
	var r Report
	for path, m := range mock {
		h, ok := hardware[path]
		if !ok {
			continue
		}
		r.Rows = append(r.Rows, Row{Path: path, Kind: Classify(path), Outcome: compare(m, h), Mock: m, Hardware: h})
	}
	sort.Slice(r.Rows, func(i, j int) bool { return r.Rows[i].Path < r.Rows[j].Path })
	for _, row := range r.Rows {
		*r.All.of(row.Outcome)++
		if row.Kind == Static {
			*r.Static.of(row.Outcome)++
		}
	}
	if n := r.Static.Total(); n > 0 {
		r.Score = 100 * float64(r.Static.Same) / float64(n)
	}
	return r
}

// Select returns the rows of kind k whose outcome is one of outcomes (any
// outcome when none is given), in path order.
func (r Report) Select(k Kind, outcomes ...Outcome) []Row {
	var rows []Row
	for _, row := range r.Rows {
		if row.Kind != k {
			continue
		}
		if len(outcomes) == 0 {
			rows = append(rows, row)
			continue
		}
		for _, o := range outcomes {
			if row.Outcome == o {
				rows = append(rows, row)
				break
			}
		}
	}
	return rows
}

// Misses are the static rows that are not the same: what lowers the score.
func (r Report) Misses() []Row {
	return r.Select(Static, Diff, MockNA, HardwareNA, BothNA)
}

// WriteText prints the report as the original tool did: the counts of every
// row and of the static ones, with list the rows that are mock_na, diff,
// hw_na or (which the original did not list) both_na, of any kind and
// grouped in that order, and the score.
func (r Report) WriteText(w io.Writer, list bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "common leaves %d: %s\n", r.All.Total(), r.All)
	fmt.Fprintf(&b, "static leaves %d: %s\n", r.Static.Total(), r.Static)
	if list {
		for _, o := range []Outcome{MockNA, Diff, HardwareNA, BothNA} {
			for _, row := range r.Rows {
				if row.Outcome == o {
					fmt.Fprintf(&b, "%s\t%s\t%s\tmock=%q\thardware=%q\n", o, row.Kind, row.Path, row.Mock, row.Hardware)
				}
			}
		}
	}
	fmt.Fprintf(&b, "static fidelity %.1f%%\n", r.Score)
	_, err := io.WriteString(w, b.String())
	return err
}

// An Exclusion leaves one field out of the score when the mock's nvidia-smi
// prints Mock where the capture says Hardware: a field that build of
// nvidia-smi cannot print as the capture's newer one does, whatever NVML
// returns.
type Exclusion struct {
	Path, Mock, Hardware string
	// Reason is the evidence, said in the output when the exclusion applies.
	Reason string
}

func (e Exclusion) String() string {
	return fmt.Sprintf("%s %q where the board says %q: %s", e.Path, e.Mock, e.Hardware, e.Reason)
}

// Unrenderable are the fields left out of every score; docs/fidelity.md
// lists them with their evidence.
var Unrenderable = []Exclusion{{
	Path: "/product_architecture", Mock: "Unknown", Hardware: "Blackwell",
	Reason: "nvidia-smi up to 555 predates Blackwell: the binary holds no \"Blackwell\" string " +
		"and prints Unknown for NVML_DEVICE_ARCH_BLACKWELL (10), which the mock returns",
}, {
	Path: "/fabric/health/bandwidth", Mock: "N/A", Hardware: "Full",
	Reason: "nvidia-smi 555 prints only Degraded or N/A here: the binary holds no \"Full\" string and " +
		"tests bits 0 and 4 of the health mask (0x40fcec), where 550 prints Full from the same mask",
}}

// Exclude deletes from mock the fields the exclusions match against the
// capture and returns the exclusions it applied.
func Exclude(mock, hardware Leaves, exclusions []Exclusion) []Exclusion {
	var applied []Exclusion
	for _, e := range exclusions {
		m, ok := mock[e.Path]
		if ok && m == e.Mock && hardware[e.Path] == e.Hardware {
			delete(mock, e.Path)
			applied = append(applied, e)
		}
	}
	return applied
}
