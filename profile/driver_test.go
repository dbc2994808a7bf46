package profile

import (
	"strings"
	"testing"
)

func TestEachBuiltinRunsTheDriverOfItsCapture(t *testing.T) {
	for _, c := range []struct {
		board, driver, cuda, nvml string
	}{
		{"a100", "570.148.08", "12.8", "12.570.148.08"},
		{"h100", "580.105.08", "13.0", "13.580.105.08"},
		{"b200", "580.105.08", "13.0", "13.580.105.08"},
		{"gb200", "580.173.02", "13.0", "13.580.173.02"},
		{"gb300", "580.173.02", "13.0", "13.580.173.02"},
		{"l40s", "595.91.07", "13.2", "13.595.91.07"},
		{"t4", "595.91.07", "13.2", "13.595.91.07"},
	} {
		t.Run(c.board, func(t *testing.T) {
			p, err := Builtin(c.board)
			if err != nil {
				t.Fatal(err)
			}
			want := Driver{Version: c.driver, CUDAVersion: c.cuda, NVMLVersion: c.nvml}
			if p.Driver != want {
				t.Errorf("driver %+v, want %+v", p.Driver, want)
			}
			if got := p.Board.GSPVersion(p.Driver.Version); got != c.driver {
				t.Errorf("GSP firmware %q, want the driver's %q", got, c.driver)
			}
		})
	}
}

func TestAnotherDriverBringsItsOwnCUDAVersion(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       Driver
	}{
		{"a driver version alone on a base takes that branch's CUDA and NVML versions",
			"name: x\nbase: a100\ndriver: {version: 535.261.03}\n",
			Driver{"535.261.03", "12.2", "12.535.261.03"}},
		{"a CUDA version given with an unknown branch is kept",
			"name: x\nbase: h100\ndriver: {version: 600.1.2, cudaVersion: \"14.0\"}\n",
			Driver{"600.1.2", "14.0", "14.600.1.2"}},
		{"an explicit NVML version is kept",
			"name: x\nbase: h100\ndriver: {version: 550.163.01, nvmlVersion: 12.550.163.01}\n",
			Driver{"550.163.01", "12.4", "12.550.163.01"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("x.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if p.Driver != c.want {
				t.Errorf("driver %+v, want %+v", p.Driver, c.want)
			}
		})
	}
}

func TestSetDriverAsTheFlagDoes(t *testing.T) {
	p, err := Builtin("a100")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetDriver("550.163.01"); err != nil {
		t.Fatal(err)
	}
	if want := (Driver{"550.163.01", "12.4", "12.550.163.01"}); p.Driver != want {
		t.Errorf("driver %+v, want %+v", p.Driver, want)
	}
	// Branches between the captures' (docs review: 495 was unknown), and
	// one too old for the board, told in one line.
	if err := p.SetDriver("495.29.05"); err != nil || p.Driver.CUDAVersion != "11.5" {
		t.Errorf("driver 495.29.05: %+v, %v; want CUDA 11.5", p.Driver, err)
	}
	if err := p.SetDriver("440.33.01"); err == nil || err.Error() != "driver.version: 440.33.01: Ampere GPUs need a 450-series driver or newer" {
		t.Errorf("an A100 on driver 440: %v", err)
	}
	b, err := Builtin("b200")
	if err != nil {
		t.Fatal(err)
	}
	err = b.SetDriver("535.261.03")
	if err == nil || !strings.Contains(err.Error(), "Blackwell GPUs need a 570-series driver or newer") {
		t.Errorf("b200 on driver 535: %v", err)
	}
}

func TestBadDriversAreNamed(t *testing.T) {
	for _, c := range []struct{ name, driver, want string }{
		{"a CUDA version the branch does not report",
			"{version: 580.105.08, cudaVersion: \"12.2\"}",
			`builtin-x.yaml:3: driver.cudaVersion: "12.2", but driver 580.105.08 reports CUDA 13.0; leave cudaVersion out to take it from the driver`},
		{"an unknown branch without a CUDA version",
			"{version: 600.1.2}",
			"driver.cudaVersion: is required: driver 600.1.2 is of no branch nvmock knows the CUDA version of"},
		{"not a version", "{version: latest}", `driver.version: "latest" is not a driver version such as "580.105.08"`},
		{"a Blackwell board on a driver before 570", "{version: 560.35.03}",
			"driver.version: 560.35.03: Blackwell GPUs need a 570-series driver or newer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("builtin-x.yaml", []byte("name: x\nbase: b200\ndriver: "+c.driver+"\n"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}

// A board run on an older driver answers as that driver did: no GSP
// firmware before 510, application clocks and the display mode not yet
// "deprecated" (QA: a T4 on 418 showed GSP firmware 418.40.04).
func TestAnOlderDriverAnswersAsDriversDidBeforeTheCapture(t *testing.T) {
	p, err := Builtin("t4")
	if err != nil {
		t.Fatal(err)
	}
	b := &p.Board
	for _, c := range []struct {
		driver      string
		gsp         string
		appsDepr    bool
		displayMode string
	}{
		{"418.40.04", "", false, ""},
		{"510.39.01", "510.39.01", false, ""},
		{"570.86.15", "570.86.15", true, ""},
		{"595.91.07", "595.91.07", true, "Deprecated"},
	} {
		if got := b.GSPVersion(c.driver); got != c.gsp {
			t.Errorf("%s: GSP firmware %q, want %q", c.driver, got, c.gsp)
		}
		if got := b.AppClocksDeprecated(c.driver); got != c.appsDepr {
			t.Errorf("%s: application clocks deprecated %v, want %v", c.driver, got, c.appsDepr)
		}
		if got := b.DisplayMode(c.driver); got != c.displayMode {
			t.Errorf("%s: display mode %q, want %q", c.driver, got, c.displayMode)
		}
	}
}
