package profile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// cudaOfBranch is the CUDA version each driver branch reports through
// nvmlSystemGetCudaDriverVersion: the newest CUDA it runs. Facts from
// NVIDIA's CUDA toolkit release notes (minimum driver per toolkit) and the
// reference captures (570: 12.8, 580: 13.0, 595: 13.2).
var cudaOfBranch = map[int]string{
	410: "10.0", 418: "10.1", 430: "10.1", 435: "10.1", 440: "10.2", 450: "11.0", 455: "11.1",
	460: "11.2", 465: "11.3", 470: "11.4", 495: "11.5", 510: "11.6", 515: "11.7", 520: "11.8", 525: "12.0",
	530: "12.1", 535: "12.2", 545: "12.3", 550: "12.4", 555: "12.5",
	560: "12.6", 565: "12.7", 570: "12.8", 575: "12.9", 580: "13.0",
	590: "13.1", 595: "13.2",
}

// firstBranch is the first driver branch that runs each architecture (the
// CUDA release that added its compute capability, and that release's
// driver): a real node with an older driver shows no GPU.
var firstBranch = map[string]int{
	"Volta": 384, "Turing": 410, "Ampere": 450, "Ada Lovelace": 520, "Hopper": 520, "Blackwell": 570,
}

// lastBranch is the last driver branch that runs an architecture NVIDIA
// has retired: R470 for Kepler, R580 for Maxwell, Pascal and Volta.
var lastBranch = map[string]int{"Kepler": 470, "Maxwell": 580, "Pascal": 580, "Volta": 580}

// driverBranch is the branch of a driver version: 580 for 580.105.08.
func driverBranch(version string) int {
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// CUDAForDriver is the CUDA version a driver reports, if its branch is known.
func CUDAForDriver(version string) (string, bool) {
	c, ok := cudaOfBranch[driverBranch(version)]
	return c, ok
}

// resolve fills what the driver version decides when a profile leaves it
// out: the CUDA version its branch reports, and NVML's version string
// (<CUDA major>.<driver version>, as nvmlSystemGetNVMLVersion gives it).
func (d *Driver) resolve() {
	if d.CUDAVersion == "" {
		d.CUDAVersion, _ = CUDAForDriver(d.Version)
	}
	if d.NVMLVersion == "" && d.CUDAVersion != "" {
		major, _, _ := strings.Cut(d.CUDAVersion, ".")
		d.NVMLVersion = major + "." + d.Version
	}
}

// SetDriver replaces the profile's driver with version (as --driver-version
// does): the CUDA and NVML versions follow it, as on a real node.
func (p *Profile) SetDriver(version string) error {
	p.Driver = Driver{Version: version}
	p.Driver.resolve()
	if p.Driver.CUDAVersion == "" && driverVersionRE.MatchString(version) {
		// No flag gives it: a profile file must.
		return fmt.Errorf("driver %s is of no branch nvmock knows the CUDA version of; give driver: {version: %q, cudaVersion: ...} in a profile file (base: %s)", version, version, p.Name)
	}
	return errors.Join(p.Validate()...)
}

func (d *Driver) validate(c *checker) {
	if d.Version == "" {
		c.fail("driver.version", "is required, such as \"580.105.08\"")
		return
	}
	if !driverVersionRE.MatchString(d.Version) || len(d.Version) > maxVersionLen {
		c.fail("driver.version", "%q is not a driver version such as \"580.105.08\"", d.Version)
		return
	}
	if d.CUDAVersion == "" {
		c.fail("driver.cudaVersion", "is required: driver %s is of no branch nvmock knows the CUDA version of; give it, such as \"13.0\"", d.Version)
		return
	}
	if _, err := CUDAVersionNumber(d.CUDAVersion); err != nil {
		c.fail("driver.cudaVersion", "%v", err)
		return
	}
	// A real driver reports exactly its branch's CUDA version.
	if want, ok := CUDAForDriver(d.Version); ok && want != d.CUDAVersion {
		c.fail("driver.cudaVersion", "%q, but driver %s reports CUDA %s; leave cudaVersion out to take it from the driver", d.CUDAVersion, d.Version, want)
	}
	c.str("driver.nvmlVersion", d.NVMLVersion, maxVersionLen, true)
	// NVML's version is the driver's, after CUDA's major: nothing else.
	major, _, _ := strings.Cut(d.CUDAVersion, ".")
	if want := major + "." + d.Version; d.NVMLVersion != "" && d.NVMLVersion != want {
		c.fail("driver.nvmlVersion", "%q, but driver %s with CUDA %s reports %q; leave nvmlVersion out", d.NVMLVersion, d.Version, d.CUDAVersion, want)
	}
}

// validateDriverRunsBoard checks that the driver knows the board at all.
func (p *Profile) validateDriverRunsBoard(c *checker) {
	if !driverVersionRE.MatchString(p.Driver.Version) {
		return // driver.version says what is wrong
	}
	if first, ok := firstBranch[p.Board.Architecture]; ok && driverBranch(p.Driver.Version) < first {
		c.fail("driver.version", "%s: %s GPUs need a %d-series driver or newer", p.Driver.Version, p.Board.Architecture, first)
	}
	if last, ok := lastBranch[p.Board.Architecture]; ok && driverBranch(p.Driver.Version) > last {
		c.fail("driver.version", "%s: the %d series is the last driver for %s GPUs", p.Driver.Version, last, p.Board.Architecture)
	}
}

// GSPVersion is the GSP firmware version the board reports under driver:
// the driver's own where the board runs GSP firmware, "" (N/A) where not.
func (b *Board) GSPVersion(driver string) string {
	switch {
	case driverBranch(driver) < gspBranch:
		return ""
	case b.GSPFirmwareVersion != "":
		return b.GSPFirmwareVersion
	case b.GSPFirmware:
		return driver
	}
	return ""
}

// The first branches whose drivers answer as the captures do; a board run
// on an older driver (--driver-version) answers as drivers did before.
// GSP firmware: the driver README's GSP chapter begins with 510.39.01,
// which uses it by default on T4 and A100; before, only when a module
// parameter asks. The display mode: A100 on 570.148.08 reports it, H100
// and B200 on 580.105.08 answer "deprecated". Application clocks: L40S and
// T4 answer "deprecated" from 570 on.
const (
	gspBranch                   = 510
	appClocksDeprecatedBranch   = 570
	displayModeDeprecatedBranch = 580
)

// AppClocksDeprecated says whether application clocks answer "deprecated"
// on this board under driver.
func (b *Board) AppClocksDeprecated(driver string) bool {
	return b.Clocks.ApplicationsDeprecated && driverBranch(driver) >= appClocksDeprecatedBranch
}

// DisplayMode is the display mode the board reports under driver: one a
// newer driver calls deprecated is not known for an older one ("": N/A).
func (b *Board) DisplayMode(driver string) string {
	if b.Modes.DisplayMode == "Deprecated" && driverBranch(driver) < displayModeDeprecatedBranch {
		return ""
	}
	return b.Modes.DisplayMode
}
