package fidelity

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// hardwareDir holds the real captures; the integration test that scores the
// built-in profiles reads them from there too.
var hardwareDir = filepath.Join("..", "..", "libnvml", "smi", "testdata", "hardware")

// TestRealDocumentsScoreAsTheOriginalToolScoredThem scores real documents:
// frozen renderings of the mock by the real nvidia-smi (testdata/README.md)
// and the captures scored against each other, which between them give every
// outcome. The numbers were cross-checked with the original Python tool
// (shared/tools/nvsmi-fidelity) on 2026-12-01: its counts and score for
// each case below; with exclude, it scored the document with the excluded
// element deleted, as the fidelity test did then. On that day both tools
// also gave the same counts, score and mock_na, diff and hw_na rows (--list)
// for the mock of every built-in board rendered by nvidia-smi 470.256.02,
// 535.261.03, 550.163.01 and 555.58.02, and for all 49 ordered pairs of
// captures.
func TestRealDocumentsScoreAsTheOriginalToolScoredThem(t *testing.T) {
	for _, tc := range []struct {
		mock, board string // mock: a file in testdata, or hardware/ for a capture
		exclude     bool   // leave out the product architecture first
		all, static Counts // same, diff, mock_na, hw_na, both_na
		score       string
	}{
		{"mock-535.261.03-a100.xml", "a100", false, Counts{242, 7, 0, 0, 2}, Counts{194, 1, 0, 0, 2}, "98.5"},
		{"mock-535.261.03-h100.xml", "h100", false, Counts{381, 5, 2, 0, 0}, Counts{334, 1, 0, 0, 0}, "99.7"},
		{"mock-535.261.03-b200.xml", "b200", false, Counts{657, 5, 0, 0, 0}, Counts{607, 2, 0, 0, 0}, "99.7"},
		{"mock-535.261.03-gb200.xml", "gb200", false, Counts{160, 5, 2, 0, 0}, Counts{112, 2, 0, 0, 0}, "98.2"},
		{"mock-535.261.03-gb300.xml", "gb300", false, Counts{160, 5, 2, 0, 0}, Counts{112, 2, 0, 0, 0}, "98.2"},
		{"mock-535.261.03-l40s.xml", "l40s", false, Counts{329, 4, 0, 0, 4}, Counts{279, 1, 0, 0, 4}, "98.2"},
		{"mock-535.261.03-t4.xml", "t4", false, Counts{255, 4, 0, 0, 4}, Counts{205, 1, 0, 0, 4}, "97.6"},
		{"mock-555.58.02-gb200.xml", "gb200", false, Counts{156, 9, 4, 6, 0}, Counts{106, 6, 2, 6, 0}, "88.3"},

		{"mock-535.261.03-b200.xml", "b200", true, Counts{657, 4, 0, 0, 0}, Counts{607, 1, 0, 0, 0}, "99.8"},
		{"mock-535.261.03-gb200.xml", "gb200", true, Counts{160, 4, 2, 0, 0}, Counts{112, 1, 0, 0, 0}, "99.1"},
		{"mock-535.261.03-gb300.xml", "gb300", true, Counts{160, 4, 2, 0, 0}, Counts{112, 1, 0, 0, 0}, "99.1"},
		{"mock-555.58.02-gb200.xml", "gb200", true, Counts{156, 8, 4, 6, 0}, Counts{106, 5, 2, 6, 0}, "89.1"},

		{"hardware/qx-a100.xml", "h100", false, Counts{132, 48, 11, 1, 0}, Counts{87, 31, 5, 1, 0}, "70.2"},
		{"hardware/qx-h100.xml", "b200", false, Counts{148, 269, 7, 3, 2}, Counts{99, 250, 4, 1, 1}, "27.9"},
		{"hardware/qx-b200.xml", "gb200", false, Counts{146, 45, 15, 1, 0}, Counts{97, 27, 8, 1, 0}, "72.9"},
		{"hardware/qx-gb200.xml", "gb300", false, Counts{161, 309, 2, 0, 0}, Counts{108, 288, 2, 0, 0}, "27.1"},
		{"hardware/qx-gb300.xml", "h100", false, Counts{124, 60, 1, 21, 1}, Counts{85, 33, 1, 13, 1}, "63.9"},
		{"hardware/qx-l40s.xml", "t4", false, Counts{135, 144, 4, 2, 2}, Counts{78, 128, 4, 1, 2}, "36.6"},
		{"hardware/qx-t4.xml", "a100", false, Counts{113, 47, 11, 4, 2}, Counts{64, 29, 10, 4, 2}, "58.7"},
		{"hardware/qx-h100.xml", "l40s", false, Counts{140, 174, 0, 19, 0}, Counts{92, 154, 0, 13, 0}, "35.5"},
	} {
		name := fmt.Sprintf("%s against %s", tc.mock, tc.board)
		if tc.exclude {
			name += " leaving out what cannot be rendered"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", tc.mock)
			if dir, file := filepath.Split(tc.mock); dir == "hardware/" {
				path = filepath.Join(hardwareDir, file)
			}
			mock, err := FirstGPUFile(path)
			if err != nil {
				t.Fatal(err)
			}
			hardware, err := FirstGPUFile(filepath.Join(hardwareDir, "qx-"+tc.board+".xml"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.exclude {
				// The cross-check left out the one exclusion there was then.
				arch := slices.DeleteFunc(slices.Clone(Unrenderable), func(e Exclusion) bool { return e.Path != "/product_architecture" })
				if applied := Exclude(mock, hardware, arch); len(applied) == 0 {
					t.Fatal("no exclusion applied")
				}
			}
			r := Compare(mock, hardware)
			if r.All != tc.all || r.Static != tc.static {
				t.Errorf("counts: all %v, static %v\nwant:   all %v, static %v", r.All, r.Static, tc.all, tc.static)
			}
			if got := fmt.Sprintf("%.1f", r.Score); got != tc.score {
				t.Errorf("static fidelity %s%%, want %s%%", got, tc.score)
			}
		})
	}
}

// Every capture parses, and scores 100 % against itself.
func TestEveryCaptureMatchesItself(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(hardwareDir, "qx-*.xml"))
	if err != nil || len(files) != 7 {
		t.Fatalf("captures in %s: %v %v", hardwareDir, files, err)
	}
	for _, f := range files {
		l, err := FirstGPUFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := Compare(l, l)
		if r.Score != 100 || r.All.Same != len(l) || r.All.Total() != len(l) {
			t.Errorf("%s against itself: %v, %.1f%%", f, r.All, r.Score)
		}
	}
}
