package profile

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/validate/content"
)

// Limits of the snapshot's fixed-size fields and sane bounds.
const (
	// MaxGPUs: a real node has at most 32 (NV_MAX_DEVICES in NVIDIA's
	// nvlimits.h); the real nvidia-smi 535 handles 64 mock GPUs and no more
	// (topo -m crashes and topo -p2p fails at 65), and GPU minors must stay
	// below nvidia-modeset's 254 and nvidiactl's 255.
	MaxGPUs      = 64
	MaxMemClocks = 8
	// MaxGraphicsClocks bounds the graphics clocks per memory clock, so a
	// mistyped range (min 1, step 1) cannot compile into megabytes. Real
	// boards list at most 261 (GB300; 260 on GB200, 247 on B200): 1024
	// leaves four times that. nvidia-smi 535 shows only lists of up to 256.
	MaxGraphicsClocks = 1024
	// nvidia-smi reads a GPU's name into NVML_DEVICE_NAME_BUFFER_SIZE
	// (64): a longer one is "Insufficient Size" in every view.
	maxNameLen      = 63
	maxVersionLen   = 79
	maxPartLen      = 79
	maxShortStrLen  = 15
	maxMidStrLen    = 31
	maxSerialPrefix = 12
)

var (
	driverVersionRE = regexp.MustCompile(`^\d+\.\d+(\.\d+)?$`)
	majorMinorRE    = regexp.MustCompile(`^(\d+)\.(\d+)$`)
	pstateRE        = regexp.MustCompile(`^P([0-9]|1[0-5])$`)
	digitsRE        = regexp.MustCompile(`^[0-9]*$`)
)

type checker struct{ errs []error }

// maxBBXFlushUs bounds the BBX flush: real boards take 24 to 134 ms
// (the captures); 10 s catches a value given in the wrong unit.
const maxBBXFlushUs = 10_000_000

// maxModuleID bounds module ids: a baseboard's slots count from 1 (8 on
// HGX, 4 on an NVL72 tray).
const maxModuleID = 64

// maxTemperature bounds temperatures a profile may give: every board's
// shutdown threshold lies below it.
const maxTemperature = 150

func (c *checker) fail(field, format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (c *checker) str(field, v string, maxLen int, required bool) {
	switch {
	case required && v == "":
		c.fail(field, "is required")
	case required && strings.TrimSpace(v) == "":
		c.fail(field, "%q is blank", v)
	case required && strings.TrimSpace(v) != v:
		c.fail(field, "%q begins or ends with a space", v)
	case len(v) > maxLen:
		n := maxLen
		for n > 0 && !utf8.RuneStart(v[n]) {
			n-- // not in the middle of a character
		}
		c.fail(field, "%q... is longer than %d bytes", v[:n], maxLen)
	}
}

func (c *checker) enum(field, v string, m map[string]uint32) {
	if _, ok := m[v]; !ok {
		c.fail(field, "%s is not one of %s", clipped(v), keys(m))
	}
}

// clipped quotes v for a message, its first 64 bytes if it is longer
// (review: a 3 MB value made a 3 MB line).
func clipped(v string) string {
	const most = 64
	if len(v) <= most {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%q... (%d bytes)", v[:most], len(v))
}

func (c *checker) percent(field string, v *uint32) {
	if v != nil && *v > 100 {
		c.fail(field, "%d is over 100%%", *v)
	}
}

func keys(m map[string]uint32) string {
	var ks []string
	for k := range m {
		ks = append(ks, strconv.Quote(k))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// Validate returns every problem of the profile, each naming its field.
func (p *Profile) Validate() []error {
	c := &checker{}
	c.str("name", p.Name, 63, true)
	if strings.ContainsFunc(p.Name, unicode.IsControl) {
		c.fail("name", "%q has a control character", p.Name)
	}
	if p.GPUs < 1 || p.GPUs > MaxGPUs {
		c.fail("gpus", "%d is out of range; use 1 to %d", p.GPUs, MaxGPUs)
	} else if n := len(p.Topology.GPUNUMANodes); n > 0 && p.GPUs > n {
		// A repeat would give two GPUs one memory node.
		c.fail("gpus", "%d, but topology.gpuNumaNodes lists %d: each GPU of a coherent board has its memory's own NUMA node; list one per GPU", p.GPUs, n)
	}
	p.Driver.validate(c)
	p.validateDriverRunsBoard(c)
	p.Board.validate(c)
	p.Board.validateLabel(c)
	if p.GPUs > MaxGPUs {
		return c.errs // the other checks size lists by the count
	}
	p.validateDevices(c)
	p.Topology.validate(c)
	p.validateNVSwitches(c)
	p.validatePCIe(c)
	p.validateInfiniBand(c)
	if m := p.Board.Modes.MIG; m != nil && m.Layout != "" && len(c.errs) == 0 {
		if _, err := ParseMIGLayout(m.Layout, m, p.GPUs); err != nil {
			c.fail("board.modes.mig.layout", "%v", err)
		}
	}
	if len(c.errs) == 0 {
		// The bus numbering and NUMA agreement show only when resolving.
		if _, err := p.Node(); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	return c.errs
}

// CUDAVersionNumber turns "12.2" into NVML's 12020.
func CUDAVersionNumber(s string) (uint32, error) {
	m := majorMinorRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a CUDA version such as \"12.2\"", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major > 99 || minor > 99 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return uint32(major*1000 + minor*10), nil
}

// ComputeCapability splits "8.0".
func (b *Board) ComputeCapabilityParts() (major, minor uint32, err error) {
	m := majorMinorRE.FindStringSubmatch(b.ComputeCapability)
	if m == nil {
		return 0, 0, fmt.Errorf("%q is not a compute capability such as \"8.0\"", b.ComputeCapability)
	}
	ma, _ := strconv.Atoi(m[1])
	mi, _ := strconv.Atoi(m[2])
	return uint32(ma), uint32(mi), nil
}

func (b *Board) validate(c *checker) {
	c.str("board.productName", b.ProductName, maxNameLen, true)
	c.enum("board.brand", b.Brand, Brands)
	c.enum("board.architecture", b.Architecture, Architectures)
	if major, minor, err := b.ComputeCapabilityParts(); err != nil {
		c.fail("board.computeCapability", "%v", err)
	} else if ccs, ok := archCapabilities[b.Architecture]; ok && !slices.Contains(ccs, fmt.Sprintf("%d.%d", major, minor)) {
		c.fail("board.computeCapability", "%d.%d is not among %s GPUs' compute capabilities (%s)", major, minor, b.Architecture, strings.Join(ccs, ", "))
	}
	if !digitsRE.MatchString(b.SerialPrefix) || len(b.SerialPrefix) > maxSerialPrefix {
		c.fail("board.serialPrefix", "%q must be digits, at most %d of them", b.SerialPrefix, maxSerialPrefix)
	}
	c.str("board.vbiosVersion", b.VBIOSVersion, maxMidStrLen, false)
	c.str("board.boardPartNumber", b.BoardPartNumber, maxPartLen, false)
	c.str("board.gpuPartNumber", b.GPUPartNumber, maxPartLen, false)
	c.str("board.gspFirmwareVersion", b.GSPFirmwareVersion, 39, false)
	c.str("board.inforom.image", b.Inforom.Image, maxMidStrLen, false)
	c.str("board.inforom.oem", b.Inforom.OEM, maxShortStrLen, false)
	c.str("board.inforom.ecc", b.Inforom.ECC, maxShortStrLen, false)
	c.str("board.inforom.power", b.Inforom.Power, maxShortStrLen, false)
	if f := b.Inforom.BBXFlushUs; f != nil && (*f == 0 || *f > maxBBXFlushUs) {
		c.fail("board.inforom.bbxFlushUs", "%d us is out of range; use 1 to %d", *f, maxBBXFlushUs)
	}

	pci := b.PCI
	if pci.DeviceID&0xffff != 0x10de {
		c.fail("board.pci.deviceId", "0x%08X does not end in NVIDIA's vendor id 10DE", uint32(pci.DeviceID))
	}
	// lspci, hwloc and go-nvlib tell a GPU by its class; sysfs has no N/A.
	if pci.BaseClass != 3 {
		c.fail("board.pci.baseClass", "%d: a GPU is a display controller, class 3 (give baseClass: 3)", pci.BaseClass)
	}
	if pci.SubClass != 0 && pci.SubClass != 2 {
		c.fail("board.pci.subClass", "%d: a GPU is a VGA (0) or 3D controller (2)", pci.SubClass)
	}
	for _, g := range []struct {
		f string
		v uint32
	}{{"maxLinkGen", pci.MaxLinkGen}, {"gpuMaxLinkGen", pci.GPUMaxLinkGen}, {"linkGen", pci.LinkGen}} {
		if g.v < 1 || g.v > 6 {
			c.fail("board.pci."+g.f, "%d is not a PCIe generation (1 to 6)", g.v)
		}
	}
	if g := pci.HostMaxLinkGen; g != nil && (*g < 1 || *g > 6) {
		c.fail("board.pci.hostMaxLinkGen", "%d is not a PCIe generation (1 to 6)", *g)
	}
	if a := pci.AtomicCaps; a != nil {
		for dir, ops := range map[string][]string{"inbound": a.Inbound, "outbound": a.Outbound} {
			for i, op := range ops {
				c.enum(fmt.Sprintf("board.pci.atomicCaps.%s[%d]", dir, i), op, AtomicOpBits)
			}
		}
	}
	if pci.LinkGen <= 6 && pci.LinkGen > pci.MaxLinkGen {
		c.fail("board.pci.linkGen", "%d is above maxLinkGen %d", pci.LinkGen, pci.MaxLinkGen)
	}
	for _, w := range []struct {
		f string
		v uint32
	}{{"maxLinkWidth", pci.MaxLinkWidth}, {"linkWidth", pci.LinkWidth}} {
		switch w.v {
		case 1, 2, 4, 8, 16, 32:
		default:
			c.fail("board.pci."+w.f, "%d is not a PCIe link width (1, 2, 4, 8, 16 or 32)", w.v)
		}
	}
	if pci.LinkWidth <= 32 && pci.LinkWidth > pci.MaxLinkWidth {
		c.fail("board.pci.linkWidth", "%d is above maxLinkWidth %d", pci.LinkWidth, pci.MaxLinkWidth)
	}

	m := b.Memory
	if m.Total == 0 {
		c.fail("board.memory.total", "is required and must be above 0")
	}
	if m.Reserved > m.Total {
		c.fail("board.memory.reserved", "%s is above total %s", m.Reserved, m.Total)
	} else if m.Used > m.Total-m.Reserved {
		c.fail("board.memory.used", "%s is above total minus reserved (%s)", m.Used, m.Total-m.Reserved)
	}
	if t := uint64(b.BAR1.Total); t != 0 && (t&(t-1) != 0 || t < 1<<20) {
		// lspci shows the BAR, whose size is a power of two.
		c.fail("board.bar1.total", "%s is not a PCI BAR's size: a power of two, 1Mi or more (256Mi, 64Gi, ...)", b.BAR1.Total)
	}
	if b.BAR1.Used > b.BAR1.Total {
		c.fail("board.bar1.used", "%s is above total %s", b.BAR1.Used, b.BAR1.Total)
	}

	b.Clocks.validate(c)
	b.validateChip(c)
	b.Power.validate(c, "board.power.")
	if b.ModulePower != nil {
		b.ModulePower.validate(c, "board.modulePower.")
	}
	if mp := b.MemoryPower; mp != nil && mp.Average != nil {
		// The memory draws its share of the board's power.
		if a := *mp.Average; a < 0 || a > 100000 {
			c.fail("board.memoryPower.average", "%g W is out of range; use 0 to 100000", a)
		} else if l := b.Power.EnforcedLimit; l != nil && a > *l {
			c.fail("board.memoryPower.average", "%g W is above the board's power.enforcedLimit %g W", a, *l)
		}
	}
	if f := b.Fabric; f != nil {
		c.enum("board.fabric.state", f.State, FabricStates)
		c.enum("board.fabric.status", f.Status, FabricStatuses)
		if _, err := ParseUUID(f.ClusterUUID); err != nil {
			c.fail("board.fabric.clusterUuid", "%v", err)
		}
		f.validateHealth(c)
	}
	t := b.Thermal
	if t.Shutdown != nil && t.Slowdown != nil && *t.Slowdown > *t.Shutdown {
		c.fail("board.thermal.slowdown", "%d C is above shutdown %d C", *t.Slowdown, *t.Shutdown)
	}
	if t.GPU != nil && t.Shutdown != nil && *t.GPU >= *t.Shutdown {
		c.fail("board.thermal.gpu", "%d C is at or above shutdown %d C", *t.GPU, *t.Shutdown)
	}
	// Boards that give thresholds relative to T.Limit have no absolute
	// shutdown here; no GPU runs near this.
	for _, v := range []struct {
		field string
		t     *uint32
	}{{"board.thermal.gpu", t.GPU}, {"board.thermal.memory", t.Memory}} {
		if v.t != nil && *v.t > maxTemperature {
			c.fail(v.field, "%d C is above %d C, where every GPU has long shut down", *v.t, maxTemperature)
		}
	}

	md := b.Modes
	c.enum("board.modes.computeMode", md.ComputeMode, ComputeModes)
	if md.DisplayMode != "" {
		c.enum("board.modes.displayMode", md.DisplayMode, FeatureStates)
	}
	if md.SparseOperation != "" {
		c.enum("board.modes.sparseOperation", md.SparseOperation, FeatureStates)
	}
	if b.C2C != "" {
		c.enum("board.c2c", b.C2C, FeatureStates)
	}
	if l := b.C2CLinks; l != nil {
		switch {
		case b.C2C != "Enabled":
			c.fail("board.c2cLinks", "needs board.c2c: Enabled (a GPU without C2C has no C2C links)")
		case l.Count == 0 || l.Count > 16:
			c.fail("board.c2cLinks.count", "%d is not 1 to 16", l.Count)
		case l.MBps == 0:
			c.fail("board.c2cLinks.mbps", "must be more than 0")
		}
	}
	if b.AddressingMode != "" {
		c.enum("board.addressingMode", b.AddressingMode, AddressingModes)
	}
	c.enum("board.modes.virtualization", md.Virtualization, VirtualizationModes)
	if !pstateRE.MatchString(md.PerformanceState) {
		c.fail("board.modes.performanceState", "%q is not P0 to P15", md.PerformanceState)
	}
	if md.MIG != nil {
		var maxSMs uint32 // no board has fewer than 64 cores an SM
		if b.CUDACores != nil {
			maxSMs = *b.CUDACores / 64
		}
		c.mig("board.modes.mig", md.MIG, uint64(b.Memory.Total)>>20, uint64(b.BAR1.Total)>>20, maxSMs)
	}
	c.percent("board.modes.fanSpeed", md.FanSpeed)
	u := b.Utilization
	c.percent("board.utilization.gpu", u.GPU)
	c.percent("board.utilization.memory", u.Memory)
	c.percent("board.utilization.encoder", u.Encoder)
	c.percent("board.utilization.decoder", u.Decoder)
	c.percent("board.utilization.jpeg", u.JPEG)
	c.percent("board.utilization.ofa", u.OFA)
	if b.MemoryErrors.RetiredPages && b.MemoryErrors.RemappedRows {
		c.fail("board.memoryErrors", "a board has either retiredPages or remappedRows, not both")
	}
	if l := b.NVLink; l != nil {
		if l.Links < 1 || l.Links > 18 {
			c.fail("board.nvlink.links", "%d is out of range; use 1 to 18", l.Links)
		}
		c.enum("board.nvlink.version", l.Version, NVLinkVersions)
		c.enum("board.nvlink.remote", l.Remote, NVLinkRemotes)
		c.nvlinkFirmware(l)
	}
}

func (c *checker) nvlinkFirmware(l *NVLink) {
	if len(l.Firmware) > MaxNVLinkFirmware {
		c.fail("board.nvlink.firmware", "%d images; at most %d", len(l.Firmware), MaxNVLinkFirmware)
	}
	if l.Encryption && len(l.Firmware) == 0 {
		c.fail("board.nvlink.encryption", "needs board.nvlink.firmware (both come from one call)")
	}
	for i, f := range l.Firmware {
		field := fmt.Sprintf("board.nvlink.firmware[%d]", i)
		c.enum(field+".ucode", f.Ucode, NVLinkUcodes)
		if _, ok := FirmwareVersion(f.Version); !ok {
			c.fail(field+".version", "%q is not major.minor.subminor, such as \"36.2014.1862\"", f.Version)
		}
	}
}

// FirmwareVersion parses an NVLink firmware version, major.minor.subminor.
func FirmwareVersion(v string) ([3]uint32, bool) {
	var out [3]uint32
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return out, false
		}
		out[i] = uint32(n)
	}
	return out, true
}

func (cl *Clocks) validate(c *checker) {
	max := map[string]*uint32{"graphics": cl.Max.Graphics, "sm": cl.Max.SM, "memory": cl.Max.Memory, "video": cl.Max.Video}
	for name, cur := range map[string]*uint32{"graphics": cl.Current.Graphics, "sm": cl.Current.SM, "memory": cl.Current.Memory, "video": cl.Current.Video} {
		if cur != nil && max[name] != nil && *cur > *max[name] {
			c.fail("board.clocks.current."+name, "%d MHz is above max %d MHz", *cur, *max[name])
		}
	}
	if len(cl.Supported) > MaxMemClocks {
		c.fail("board.clocks.supported", "has %d memory clocks; at most %d", len(cl.Supported), MaxMemClocks)
	}
	firstMem := map[uint32]int{}
	for i, s := range cl.Supported {
		f := fmt.Sprintf("board.clocks.supported[%d]", i)
		if s.Memory == 0 {
			c.fail(f+".memory", "is required")
		}
		// Review: a second entry for one memory clock was never shown.
		if j, ok := firstMem[s.Memory]; ok && s.Memory != 0 {
			c.fail(f+".memory", "%d MHz is supported[%d]'s already; list its graphics clocks there", s.Memory, j)
		}
		firstMem[s.Memory] = i
		seen := map[uint32]bool{}
		for k, g := range s.Graphics {
			if seen[g] {
				c.fail(fmt.Sprintf("%s.graphics[%d]", f, k), "%d MHz is listed twice", g)
			}
			seen[g] = true
		}
		ranged := s.Max != 0 || s.Min != 0 || s.Step != 0
		switch {
		case ranged && len(s.Graphics) > 0:
			c.fail(f, "give either graphics or max/min/step, not both")
		case ranged && (s.Step == 0 || s.Min == 0 || s.Max < s.Min):
			c.fail(f, "max %d, min %d, step %d is not a range; need max >= min > 0 and step > 0", s.Max, s.Min, s.Step)
		case ranged && RangeLen(s) > MaxGraphicsClocks:
			c.fail(f, "range %d MHz down to %d by %d gives %d clocks; at most %d", s.Max, s.Min, s.Step, RangeLen(s), MaxGraphicsClocks)
		case !ranged && len(s.Graphics) == 0:
			c.fail(f+".graphics", "is required (or max/min/step)")
		case len(s.Graphics) > MaxGraphicsClocks:
			c.fail(f+".graphics", "has %d clocks; at most %d", len(s.Graphics), MaxGraphicsClocks)
		}
	}
}

// RangeLen is how many graphics clocks a max/min/step range gives.
func RangeLen(s SupportedClocks) uint64 {
	if s.Step == 0 || s.Max < s.Min {
		return 0
	}
	return uint64(s.Max-s.Min)/uint64(s.Step) + 1
}

// ProductLabel is the node label value gpu-feature-discovery makes of a
// product name (sanitise in k8s-device-plugin's internal/lm): it drops
// every character but letters, digits, '-', '_', '.' and spaces, and joins
// the words with '-'. It does not shorten: GFD's label for a longer name is
// one Kubernetes refuses, which validation rejects.
func ProductLabel(name string) string {
	kept := strings.Map(func(r rune) rune {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ' ':
			return r
		}
		return -1
	}, name)
	return strings.Join(strings.Fields(kept), "-")
}

// validateLabel rejects a product name whose node label (nvidia.com/gpu.product,
// set by hostprep install as GFD would) Kubernetes would refuse: the install
// would fail on every try, after the overlay is in place.
func (b *Board) validateLabel(c *checker) {
	v := ProductLabel(b.ProductName)
	if v == "" && strings.TrimSpace(b.ProductName) != "" {
		c.fail("board.productName", "%q makes an empty node label nvidia.com/gpu.product (a label keeps ASCII letters, digits, '-', '_' and '.'); give a name with some", b.ProductName)
		return
	}
	// A name short enough for nvidia-smi makes a label short enough.
	if len(b.ProductName) > maxNameLen || len(content.IsLabelValue(v)) == 0 {
		return
	}
	c.fail("board.productName", "%q makes the node label nvidia.com/gpu.product=%q, which Kubernetes refuses (it must start and end with a letter or digit); begin and end the name with one", b.ProductName, v)
}

func (pw *Power) validate(c *checker, at string) {
	for _, f := range []struct {
		n string
		v *float64
	}{{"draw", pw.Draw}, {"average", pw.Average}, {"limit", pw.Limit}, {"enforcedLimit", pw.EnforcedLimit}, {"defaultLimit", pw.DefaultLimit}, {"minLimit", pw.MinLimit}, {"maxLimit", pw.MaxLimit}} {
		if f.v != nil && (*f.v < 0 || *f.v > 100000) {
			c.fail(at+f.n, "%g W is out of range; use 0 to 100000", *f.v)
		}
	}
	// A reading above the limit the GPU enforces is one no GPU gives.
	for _, r := range []struct {
		n string
		v *float64
	}{{"draw", pw.Draw}, {"average", pw.Average}} {
		for _, l := range []struct {
			n string
			v *float64
		}{{"enforcedLimit", pw.EnforcedLimit}, {"limit", pw.Limit}} {
			if r.v != nil && l.v != nil && *r.v > *l.v && *r.v <= 100000 { // past that, out of range above
				c.fail(at+r.n, "%g W is above %s %g W", *r.v, l.n, *l.v)
				break
			}
		}
	}
	if pw.MinLimit != nil && pw.MaxLimit != nil {
		if *pw.MinLimit > *pw.MaxLimit {
			c.fail(at+"minLimit", "%g W is above maxLimit %g W", *pw.MinLimit, *pw.MaxLimit)
		}
		for _, f := range []struct {
			n string
			v *float64
		}{{"limit", pw.Limit}, {"defaultLimit", pw.DefaultLimit}, {"enforcedLimit", pw.EnforcedLimit}} {
			if f.v != nil && (*f.v < *pw.MinLimit || *f.v > *pw.MaxLimit) {
				c.fail(at+f.n, "%g W is outside minLimit..maxLimit (%g..%g W)", *f.v, *pw.MinLimit, *pw.MaxLimit)
			}
		}
	}
}

func (t *Topology) validate(c *checker) {
	if len(t.BusIDs) == 0 {
		c.fail("topology.busIds", "is required (PCI addresses, e.g. [\"0000:07:00.0\", \"0000:0F:00.0\"])")
	}
	seen := map[PCIAddress]bool{}
	for i, s := range t.BusIDs {
		a, err := ParsePCIAddress(s)
		if err != nil {
			c.fail(fmt.Sprintf("topology.busIds[%d]", i), "%v", err)
			continue
		}
		if seen[a] {
			c.fail(fmt.Sprintf("topology.busIds[%d]", i), "%q appears twice", s)
		}
		if a.Function != 0 {
			// NVML's PCI info has no function for a GPU.
			c.fail(fmt.Sprintf("topology.busIds[%d]", i), "%q: a GPU is function 0 of its PCI device (the others are its audio and USB controllers)", s)
		}
		seen[a] = true
	}
	firstModule := map[uint32]int{}
	for i, m := range t.ModuleIDs {
		if m < 1 || m > maxModuleID {
			c.fail(fmt.Sprintf("topology.moduleIds[%d]", i), "%d: module ids are 1 to %d", m, maxModuleID)
		}
		if j, ok := firstModule[m]; ok {
			c.fail(fmt.Sprintf("topology.moduleIds[%d]", i), "%d is GPU %d's already; each GPU sits in a module of its own", m, j)
		}
		firstModule[m] = i
	}
	for i, s := range t.CPUAffinity {
		if _, err := ParseCPUList(s); err != nil {
			c.fail(fmt.Sprintf("topology.cpuAffinity[%d]", i), "%v", err)
		}
	}
	t.validateNUMA(c)
}

// maxNUMANode is the largest NUMA node id: the snapshot's node masks are
// 64 bits.
const maxNUMANode = 63

// validateNUMA checks the NUMA fields: ids the snapshot can hold, node
// lists, and sockets that own their nodes and CPUs alone.
func (t *Topology) validateNUMA(c *checker) {
	node := func(field string, n uint32) {
		if n > maxNUMANode {
			c.fail(field, "NUMA node %d: NUMA nodes go up to %d", n, maxNUMANode)
		}
	}
	for i, n := range t.NUMANodes {
		node(fmt.Sprintf("topology.numaNodes[%d]", i), n)
	}
	for i, n := range t.GPUNUMANodes {
		node(fmt.Sprintf("topology.gpuNumaNodes[%d]", i), n)
	}
	for i, s := range t.NUMAAffinity {
		if _, err := ParseNodeList(s); err != nil {
			c.fail(fmt.Sprintf("topology.numaAffinity[%d]", i), "%v", err)
		}
	}
	if len(t.NUMANodes) == 0 {
		for _, f := range []struct {
			name string
			set  bool
		}{{"sockets", len(t.Sockets) > 0}, {"gpuNumaNodes", len(t.GPUNUMANodes) > 0}, {"numaAffinity", len(t.NUMAAffinity) > 0}} {
			if f.set {
				c.fail("topology."+f.name, "needs topology.numaNodes (each GPU's NUMA node)")
			}
		}
	}
	owner := map[uint32]int{}
	var cpus []CPUSet
	for i, s := range t.Sockets {
		m, err := ParseCPUList(s.CPUs)
		if err != nil {
			c.fail(fmt.Sprintf("topology.sockets[%d].cpus", i), "%v", err)
		}
		for j, o := range cpus {
			if o.Intersects(CPUSet(m)) {
				c.fail(fmt.Sprintf("topology.sockets[%d].cpus", i), "%q shares CPUs with sockets[%d]", s.CPUs, j)
			}
		}
		cpus = append(cpus, CPUSet(m))
		if len(s.NUMANodes) == 0 {
			c.fail(fmt.Sprintf("topology.sockets[%d].numaNodes", i), "is required (the socket's NUMA nodes, e.g. [0, 1, 2, 3])")
		}
		for _, n := range s.NUMANodes {
			if j, ok := owner[n]; ok {
				c.fail(fmt.Sprintf("topology.sockets[%d].numaNodes", i), "NUMA node %d is already in sockets[%d]", n, j)
			}
			node(fmt.Sprintf("topology.sockets[%d].numaNodes", i), n)
			owner[n] = i
		}
	}
}

// ParseNodeList reads a NUMA node list such as "0,3-9,11-17" into a bit
// mask, node n at bit n.
func ParseNodeList(s string) (uint64, error) {
	m, err := ParseCPUList(s)
	if err != nil || slices.ContainsFunc(m[1:], func(w uint64) bool { return w != 0 }) {
		return 0, fmt.Errorf("%q is not a NUMA node list such as \"0,3-9,11-17\" (nodes 0 to %d)", s, maxNUMANode)
	}
	return m[0], nil
}

// MaxCPUs is the size of the CPU affinity mask in the snapshot.
const MaxCPUs = 1024

// ParseCPUList reads "0-63,128-191" into a bit mask.
func ParseCPUList(s string) ([MaxCPUs / 64]uint64, error) {
	var mask [MaxCPUs / 64]uint64
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= MaxCPUs {
			return mask, fmt.Errorf("%q is not a CPU list such as \"0-63,128-191\" (CPUs 0 to %d)", s, MaxCPUs-1)
		}
		for cpu := a; cpu <= b; cpu++ {
			mask[cpu/64] |= 1 << (cpu % 64)
		}
	}
	return mask, nil
}

// PCIAddress is a PCI function's location.
type PCIAddress struct{ Domain, Bus, Device, Function uint32 }

var pciAddressRE = regexp.MustCompile(`^(?:([0-9a-fA-F]{4}|[0-9a-fA-F]{8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// ParsePCIAddress reads "0000:07:00.0", "00000000:07:00.0" or "07:00.0".
func ParsePCIAddress(s string) (PCIAddress, error) {
	m := pciAddressRE.FindStringSubmatch(s)
	if m == nil {
		return PCIAddress{}, fmt.Errorf("%q is not a PCI address such as \"0000:07:00.0\"", s)
	}
	var a PCIAddress
	for i, p := range []*uint32{&a.Domain, &a.Bus, &a.Device, &a.Function} {
		if m[i+1] != "" {
			v, _ := strconv.ParseUint(m[i+1], 16, 32)
			*p = uint32(v)
		}
	}
	if a.Device > 0x1f {
		return a, fmt.Errorf("%q: device %02x is above 1f", s, a.Device)
	}
	return a, nil
}

// ParseUUID reads a UUID such as 00000001-0000-0000-0000-000000000001.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(s) != 36 || len(h) != 32 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, fmt.Errorf("%q is not a UUID such as 00000001-0000-0000-0000-000000000001", s)
	}
	for i := range u {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return u, fmt.Errorf("%q is not a UUID such as 00000001-0000-0000-0000-000000000001", s)
		}
		u[i] = byte(v)
	}
	return u, nil
}

// archCapabilities are the compute capabilities each architecture's chips
// have (CUDA's programming guide; Blackwell's data-center parts 10.x,
// Thor 11.0, the RTX parts 12.x).
var archCapabilities = map[string][]string{
	"Kepler": {"3.0", "3.2", "3.5", "3.7"}, "Maxwell": {"5.0", "5.2", "5.3"}, "Pascal": {"6.0", "6.1", "6.2"},
	"Volta": {"7.0", "7.2"}, "Turing": {"7.5"}, "Ampere": {"8.0", "8.6", "8.7"}, "Ada Lovelace": {"8.9"},
	"Hopper": {"9.0"}, "Blackwell": {"10.0", "10.1", "10.3", "11.0", "12.0", "12.1"},
}
