package fidelity

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// doc wraps the body of a first <gpu> in an nvidia-smi log.
func doc(gpu string) string {
	return `<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log><driver_version>535.261.03</driver_version><gpu id="00000000:07:00.0">` + gpu + `</gpu></nvidia_smi_log>`
}

func TestFirstGPU(t *testing.T) {
	for _, tc := range []struct {
		name string
		xml  string
		want Leaves
	}{
		{"a field is keyed by its path below the gpu",
			doc(`<product_name>NVIDIA A100</product_name><pci><pci_bus>07</pci_bus></pci>`),
			Leaves{"/product_name": "NVIDIA A100", "/pci/pci_bus": "07"}},
		{"a tag repeated among its siblings is numbered from 1 in document order, the others are not",
			doc(`<clocks><v>1</v><w>2</w><v>3</v></clocks><x><v>4</v></x>`),
			Leaves{"/clocks/v[1]": "1", "/clocks/w": "2", "/clocks/v[2]": "3", "/x/v": "4"}},
		{"repeated elements with children number the paths below them",
			doc(`<link><state>up</state></link><link><state>down</state></link>`),
			Leaves{"/link[1]/state": "up", "/link[2]/state": "down"}},
		{"white space is trimmed and its runs collapse to one space",
			doc("<product_name>\n\t  NVIDIA   A100\n  SXM4 </product_name>"),
			Leaves{"/product_name": "NVIDIA A100 SXM4"}},
		{"an element with children is not a field and its own text is dropped",
			doc(`<pci>stray<pci_bus>07</pci_bus>text</pci>`),
			Leaves{"/pci/pci_bus": "07"}},
		{"an empty element is a field with empty text",
			doc(`<processes></processes><accounted_processes/>`),
			Leaves{"/processes": "", "/accounted_processes": ""}},
		{"entities, character references and CDATA are text",
			doc(`<a>x &amp; y &#65;</a><b><![CDATA[ <z> ]]></b>`),
			Leaves{"/a": "x & y A", "/b": "<z>"}},
		{"text on both sides of a comment joins",
			doc(`<a>x<!-- note -->y</a>`),
			Leaves{"/a": "xy"}},
		{"only the first gpu directly below the root is read",
			`<log><other><gpu><uuid>nested</uuid></gpu></other><gpu><uuid>first</uuid></gpu><gpu><uuid>second</uuid></gpu></log>`,
			Leaves{"/uuid": "first"}},
		{"a gpu with no children has no fields",
			`<log><gpu>text</gpu></log>`,
			Leaves{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FirstGPU(strings.NewReader(tc.xml))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestFirstGPUFailsOn(t *testing.T) {
	for _, tc := range []struct{ name, xml, want string }{
		{"a document without a gpu", `<log><gpus/></log>`, "no <gpu> element"},
		{"a gpu that is the root", `<gpu><uuid>x</uuid></gpu>`, "no <gpu> element"},
		{"malformed XML", `<log><gpu><a>1</b></gpu></log>`, "syntax error"},
		{"an empty document", ``, "no <gpu> element"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FirstGPU(strings.NewReader(tc.xml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		path string
		want Kind
	}{
		// Identity: tells one board from another of the same model.
		{"/uuid", Identity},
		{"/serial", Identity},
		{"/minor_number", Identity},
		{"/module_id", Identity},
		{"/board_id", Identity},
		{"/pdi", Identity},
		{"/gpu_fabric_guid", Identity},
		{"/pci/pci_bus", Identity},
		{"/pci/pci_bus_id", Identity},
		{"/pci/pci_domain", Identity},
		{"/pci/pci_device", Identity},
		{"/platformInfo/slot_number", Identity},
		{"/fabric/clusterUuid", Identity},
		{"/fabric/cliqueId", Identity},
		// Only where the patterns anchor them.
		{"/pci/pci_device_id", Static},
		{"/fabric/state", Static},
		{"/mig_devices/mig_device[1]/uuid", Static},
		// Dynamic: readings that move.
		{"/temperature/gpu_temp", Dynamic},
		{"/temperature/memory_temp", Dynamic},
		{"/gpu_power_readings/power_draw", Dynamic},
		{"/gpu_power_readings/instant_power_draw", Dynamic},
		{"/gpu_power_readings/average_power_draw", Dynamic},
		{"/total_energy_consumption", Dynamic},
		{"/utilization/gpu_util", Dynamic},
		{"/power_samples/max_power_draw", Dynamic},
		{"/encoder_stats/session_count", Dynamic},
		{"/fbc_stats/average_fps", Dynamic},
		{"/processes", Dynamic},
		{"/clocks/graphics_clock", Dynamic},
		{"/clocks_event_reasons/clocks_event_reason_gpu_idle", Dynamic},
		{"/clocks_throttle_reasons/clocks_throttle_reason_gpu_idle", Dynamic},
		{"/performance_state", Dynamic},
		{"/fb_memory_usage/used", Dynamic},
		{"/bar1_memory_usage/free", Dynamic},
		{"/pci/tx_util", Dynamic},
		{"/pci/rx_util", Dynamic},
		{"/pci/pci_gpu_link_info/pcie_gen/current_link_gen", Dynamic},
		{"/pci/replay_counter", Dynamic},
		{"/fan_speed", Dynamic},
		{"/voltage/graphics_volt", Dynamic},
		{"/inforom_bbx_flush/latest_timestamp", Dynamic},
		{"/retired_pages/timestamp", Dynamic},
		// Static: what the board is, including the limits of the readings.
		{"/product_name", Static},
		{"/temperature/gpu_temp_max_threshold", Static},
		{"/max_clocks/graphics_clock", Static},
		{"/fb_memory_usage/total", Static},
		{"/fb_memory_usage/reserved", Static},
		{"/pci/pci_gpu_link_info/pcie_gen/max_link_gen", Static},
		// Identity wins over dynamic.
		{"/platformInfo/power_draw", Identity},
	} {
		t.Run(tc.path, func(t *testing.T) {
			if got := Classify(tc.path); got != tc.want {
				t.Errorf("Classify(%q) = %s, want %s", tc.path, got, tc.want)
			}
		})
	}
}

func TestIsNA(t *testing.T) {
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"", true},
		{"N/A", true},
		{"n/a", true},
		{"[N/A]", true},
		{"Not Supported", true},
		{"[Not Supported]", true},
		{"not supported", true},
		{"Unknown Error", true},
		{"Not Available", true},
		{"Insufficient Permissions", true},
		{"[Insufficient Permissions]", true},
		{"Not Found", true},
		{"Requested functionality has been deprecated", true},
		{"N/A extra", false},
		{"Uninitialized", false},
		{"Unknown", false},
		{"Disabled", false},
		{"0", false},
	} {
		t.Run(fmt.Sprintf("%q", tc.text), func(t *testing.T) {
			if got := IsNA(tc.text); got != tc.want {
				t.Errorf("IsNA(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		name           string
		mock, hardware Leaves
		want           Report
	}{
		{"the same text is the same, N/A included",
			Leaves{"/a": "1", "/b": "N/A"}, Leaves{"/a": "1", "/b": "N/A"},
			Report{
				Rows: []Row{
					{Path: "/a", Kind: Static, Outcome: Same, Mock: "1", Hardware: "1"},
					{Path: "/b", Kind: Static, Outcome: Same, Mock: "N/A", Hardware: "N/A"},
				},
				All: Counts{Same: 2}, Static: Counts{Same: 2}, Score: 100,
			}},
		{"two values that differ are a diff",
			Leaves{"/a": "1", "/b": "x"}, Leaves{"/a": "1", "/b": "y"},
			Report{
				Rows: []Row{
					{Path: "/a", Kind: Static, Outcome: Same, Mock: "1", Hardware: "1"},
					{Path: "/b", Kind: Static, Outcome: Diff, Mock: "x", Hardware: "y"},
				},
				All: Counts{Same: 1, Diff: 1}, Static: Counts{Same: 1, Diff: 1}, Score: 50,
			}},
		{"no value in the mock where the board has one is mock_na, empty text included",
			Leaves{"/a": "Not Supported", "/b": ""}, Leaves{"/a": "1", "/b": "2"},
			Report{
				Rows: []Row{
					{Path: "/a", Kind: Static, Outcome: MockNA, Mock: "Not Supported", Hardware: "1"},
					{Path: "/b", Kind: Static, Outcome: MockNA, Mock: "", Hardware: "2"},
				},
				All: Counts{MockNA: 2}, Static: Counts{MockNA: 2}, Score: 0,
			}},
		{"a value in the mock where the board has none is hw_na",
			Leaves{"/a": "Uninitialized"}, Leaves{"/a": "[N/A]"},
			Report{
				Rows:   []Row{{Path: "/a", Kind: Static, Outcome: HardwareNA, Mock: "Uninitialized", Hardware: "[N/A]"}},
				All:    Counts{HardwareNA: 1},
				Static: Counts{HardwareNA: 1},
			}},
		{"two different ways of saying no value are both_na",
			Leaves{"/a": "N/A", "/b": "1"}, Leaves{"/a": "Not Supported", "/b": "1"},
			Report{
				Rows: []Row{
					{Path: "/a", Kind: Static, Outcome: BothNA, Mock: "N/A", Hardware: "Not Supported"},
					{Path: "/b", Kind: Static, Outcome: Same, Mock: "1", Hardware: "1"},
				},
				All: Counts{Same: 1, BothNA: 1}, Static: Counts{Same: 1, BothNA: 1}, Score: 50,
			}},
		{"a field only one side prints is not counted",
			Leaves{"/a": "1", "/new_in_mock": "x"}, Leaves{"/a": "1", "/new_in_capture": "y"},
			Report{
				Rows: []Row{{Path: "/a", Kind: Static, Outcome: Same, Mock: "1", Hardware: "1"}},
				All:  Counts{Same: 1}, Static: Counts{Same: 1}, Score: 100,
			}},
		{"identity and dynamic fields are listed and counted but not scored",
			Leaves{"/uuid": "GPU-1", "/temperature/gpu_temp": "30 C", "/product_name": "A", "/serial": "1"},
			Leaves{"/uuid": "GPU-2", "/temperature/gpu_temp": "N/A", "/product_name": "A", "/serial": "1"},
			Report{
				Rows: []Row{
					{Path: "/product_name", Kind: Static, Outcome: Same, Mock: "A", Hardware: "A"},
					{Path: "/serial", Kind: Identity, Outcome: Same, Mock: "1", Hardware: "1"},
					{Path: "/temperature/gpu_temp", Kind: Dynamic, Outcome: HardwareNA, Mock: "30 C", Hardware: "N/A"},
					{Path: "/uuid", Kind: Identity, Outcome: Diff, Mock: "GPU-1", Hardware: "GPU-2"},
				},
				All:    Counts{Same: 2, Diff: 1, HardwareNA: 1},
				Static: Counts{Same: 1},
				Score:  100,
			}},
		{"without static fields the score is 0",
			Leaves{"/uuid": "GPU-1"}, Leaves{"/uuid": "GPU-1"},
			Report{
				Rows: []Row{{Path: "/uuid", Kind: Identity, Outcome: Same, Mock: "GPU-1", Hardware: "GPU-1"}},
				All:  Counts{Same: 1},
			}},
		{"nothing in common is an empty report",
			Leaves{"/a": "1"}, Leaves{"/b": "1"},
			Report{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compare(tc.mock, tc.hardware); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestScoreIsSameOverStatic(t *testing.T) {
	mock := Leaves{"/a": "1", "/b": "2", "/c": "N/A", "/d": "x", "/uuid": "u"}
	hardware := Leaves{"/a": "1", "/b": "2", "/c": "3", "/d": "y", "/uuid": "v"}
	r := Compare(mock, hardware)
	if got := fmt.Sprintf("%.4f", r.Score); got != "50.0000" {
		t.Errorf("score %s, want 50.0000 (2 same of 4 static)", got)
	}
	mock["/d"] = "y"
	if got := fmt.Sprintf("%.4f", Compare(mock, hardware).Score); got != "75.0000" {
		t.Errorf("score %s, want 75.0000 (3 same of 4 static)", got)
	}
}

func TestSelectAndMisses(t *testing.T) {
	r := Compare(
		Leaves{"/a": "1", "/b": "N/A", "/c": "x", "/d": "N/A", "/e": "v", "/uuid": "1"},
		Leaves{"/a": "1", "/b": "2", "/c": "y", "/d": "Not Supported", "/e": "N/A", "/uuid": "2"})
	paths := func(rows []Row) []string {
		var p []string
		for _, r := range rows {
			p = append(p, r.Path)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		got  []Row
		want []string
	}{
		{"static mock_na", r.Select(Static, MockNA), []string{"/b"}},
		{"static diff or hw_na", r.Select(Static, Diff, HardwareNA), []string{"/c", "/e"}},
		{"every identity row", r.Select(Identity), []string{"/uuid"}},
		{"misses are the static rows that are not the same", r.Misses(), []string{"/b", "/c", "/d", "/e"}},
	} {
		if got := paths(tc.got); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestExclude(t *testing.T) {
	arch := Exclusion{Path: "/product_architecture", Mock: "Unknown", Hardware: "Blackwell", Reason: "r"}
	board := Leaves{"/product_architecture": "Blackwell", "/product_name": "NVIDIA B200"}
	for _, tc := range []struct {
		name     string
		mock     Leaves
		hardware Leaves
		want     Leaves // the mock's leaves afterwards
	}{
		{"applies when the mock and the board say what it names",
			Leaves{"/product_architecture": "Unknown", "/product_name": "NVIDIA B200"}, board,
			Leaves{"/product_name": "NVIDIA B200"}},
		{"does not apply when the board says something else",
			Leaves{"/product_architecture": "Unknown"}, Leaves{"/product_architecture": "Hopper"},
			Leaves{"/product_architecture": "Unknown"}},
		{"does not apply when the mock prints the board's value",
			Leaves{"/product_architecture": "Blackwell"}, board,
			Leaves{"/product_architecture": "Blackwell"}},
		{"does not apply when the mock does not print the field",
			Leaves{"/product_name": "NVIDIA B200"}, board,
			Leaves{"/product_name": "NVIDIA B200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantApplied := len(tc.want) < len(tc.mock)
			applied := Exclude(tc.mock, tc.hardware, []Exclusion{arch})
			if !reflect.DeepEqual(tc.mock, tc.want) {
				t.Errorf("mock afterwards %v, want %v", tc.mock, tc.want)
			}
			if got := len(applied) == 1 && applied[0] == arch; got != wantApplied {
				t.Errorf("applied %v, want applied %v", applied, wantApplied)
			}
		})
	}
}

func TestWriteTextPrintsWhatTheOriginalToolDidAndBothNA(t *testing.T) {
	r := Compare(
		Leaves{"/a": "1", "/b": "N/A", "/c": "x", "/d": "N/A", "/uuid": "1"},
		Leaves{"/a": "1", "/b": "2", "/c": "y", "/d": "Not Supported", "/uuid": "2"})
	var b strings.Builder
	if err := r.WriteText(&b, true); err != nil {
		t.Fatal(err)
	}
	want := "common leaves 5: same=1 diff=2 mock_na=1 hw_na=0 both_na=1\n" +
		"static leaves 4: same=1 diff=1 mock_na=1 hw_na=0 both_na=1\n" +
		"mock_na\tstatic\t/b\tmock=\"N/A\"\thardware=\"2\"\n" +
		"diff\tstatic\t/c\tmock=\"x\"\thardware=\"y\"\n" +
		"diff\tidentity\t/uuid\tmock=\"1\"\thardware=\"2\"\n" +
		"both_na\tstatic\t/d\tmock=\"N/A\"\thardware=\"Not Supported\"\n" +
		"static fidelity 25.0%\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
