package snapshot

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/nvmock/nvmock/profile"
)

// Options change how a profile compiles.
type Options struct {
	Seed     string // node seed; ignored when Unseeded
	Unseeded bool   // leave identities to the library (its built-in default)
}

// Compile turns a validated profile into snapshot bytes.
func Compile(p *profile.Profile, opt Options) ([]byte, error) {
	if errs := p.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("profile %s: %w", p.Name, errs[0])
	}
	cuda, _ := profile.CUDAVersionNumber(p.Driver.CUDAVersion)
	h := Header{
		Version:     Version,
		HeaderSize:  HeaderSize,
		DeviceSize:  DeviceSize,
		DeviceCount: uint32(p.GPUs),
		CudaVersion: cuda,
	}
	copy(h.Magic[:], Magic)
	put(h.DriverVersion[:], p.Driver.Version)
	put(h.NvmlVersion[:], p.Driver.NVMLVersion)
	put(h.Profile[:], p.Name)
	if opt.Unseeded {
		h.Flags |= FlagUnseeded
	} else {
		h.NodeSeedHash = uint32(hash(opt.Seed))
	}

	node, err := p.Node()
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	boards := make([]profile.Board, len(node.GPUs))
	for i := range node.GPUs {
		boards[i] = *node.GPUs[i].Board
	}
	nics := node.PCIe.NICs()
	if err := checkSize(p.Name, Size(boards, len(nics))); err != nil {
		return nil, err
	}
	at := places(node.PCIe)
	var pool []uint32
	devs := make([]Device, p.GPUs)
	for i := range devs {
		d, err := device(p, &node.GPUs[i], at, opt, &pool)
		if err != nil {
			return nil, err
		}
		devs[i] = d
	}
	h.PoolCount = uint32(len(pool))
	h.NICSize, h.NICCount = NICSize, uint32(len(nics))
	recs := make([]NIC, len(nics))
	for i, f := range nics {
		a := f.Address
		r := NIC{PCIDomain: a.Domain, PCIBDF: a.Bus<<8 | a.Device<<3 | a.Function, NUMANode: NA}
		r.PcieRoot, r.PcieSwitchTop, r.PcieSwitchLeaf = at(f)
		if f.NUMANode >= 0 {
			r.NUMANode = uint32(f.NUMANode)
		}
		recs[i] = r
	}

	var buf bytes.Buffer
	buf.Grow(HeaderSize + len(devs)*DeviceSize + len(recs)*NICSize + 4*len(pool))
	for _, v := range []any{&h, devs, recs, pool} {
		if err := binary.Write(&buf, binary.LittleEndian, v); err != nil {
			return nil, fmt.Errorf("encode snapshot: %w", err)
		}
	}
	return buf.Bytes(), nil
}

// Size is the length of the snapshot of these GPUs' boards and a node of
// nics NIC functions: the header, a record per GPU and NIC, and the pool of
// the GPUs' supported clocks.
func Size(boards []profile.Board, nics int) uint64 {
	n := uint64(HeaderSize) + uint64(len(boards))*DeviceSize + uint64(nics)*NICSize
	for i := range boards {
		for _, s := range boards[i].Clocks.Supported {
			n += 4 * (1 + uint64(len(s.Graphics)) + profile.RangeLen(s))
		}
	}
	return n
}

// checkSize refuses a snapshot over MaxBytes, which the library would not
// map; it is checked before anything is built.
func checkSize(name string, n uint64) error {
	if n <= MaxBytes {
		return nil
	}
	return fmt.Errorf("profile %s: the snapshot would be %d bytes, over the limit of %d (%d MiB) the library maps; use fewer GPUs or shorter board.clocks.supported lists", name, n, MaxBytes, MaxBytes>>20)
}

func put(dst []byte, s string) { copy(dst[:len(dst)-1], s) }

// places numbers the tree's host bridges and switches over the node, for
// the library's topology levels, and gives a function's: its host bridge,
// the top-most and the nearest switch above it (NA: none).
func places(t *profile.PCITree) func(*profile.PCIFunction) (root, top, leaf uint32) {
	roots := map[*profile.PCIRoot]uint32{}
	for i, r := range t.Roots {
		roots[r] = uint32(i)
	}
	switches := map[*profile.PCIFunction]uint32{}
	id := func(f *profile.PCIFunction) uint32 {
		if f == nil {
			return NA
		}
		n, ok := switches[f]
		if !ok {
			n = uint32(len(switches))
			switches[f] = n
		}
		return n
	}
	return func(f *profile.PCIFunction) (uint32, uint32, uint32) {
		r, top, leaf := f.Placement()
		return roots[r], id(top), id(leaf)
	}
}

func opt32(v *uint32) uint32 {
	if v == nil {
		return NA
	}
	return *v
}

func milliwatts(w *float64) uint32 {
	if w == nil {
		return NA
	}
	return uint32(math.Round(*w * 1000))
}

// atomicBits is the caps mask; no ops at all is N/A, as real boards say.
func atomicBits(ops []string) uint32 {
	if len(ops) == 0 {
		return NA
	}
	var m uint32
	for _, op := range ops {
		m |= profile.AtomicOpBits[op]
	}
	return m
}

func bool32(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

func clockSet(c profile.ClockSet) [4]uint32 {
	return [4]uint32{opt32(c.Graphics), opt32(c.SM), opt32(c.Memory), opt32(c.Video)}
}

func device(p *profile.Profile, g *profile.GPU, at func(*profile.PCIFunction) (uint32, uint32, uint32), opt Options, pool *[]uint32) (Device, error) {
	b, i := g.Board, g.Index
	var d Device
	put(d.Name[:], b.ProductName)
	if opt.Unseeded {
		put(d.Serial[:], b.SerialPrefix) // the library derives the rest
	} else {
		put(d.UUID[:], UUID(p.Name, opt.Seed, i))
		put(d.Serial[:], Serial(b.SerialPrefix, p.Name, opt.Seed, i))
	}
	put(d.BoardPartNumber[:], b.BoardPartNumber)
	put(d.GPUPartNumber[:], b.GPUPartNumber)
	put(d.VbiosVersion[:], b.VBIOSVersion)
	put(d.InforomImage[:], b.Inforom.Image)
	put(d.InforomOem[:], b.Inforom.OEM)
	put(d.InforomECC[:], b.Inforom.ECC)
	put(d.InforomPower[:], b.Inforom.Power)
	d.InforomBbxFlushUs = opt32(b.Inforom.BBXFlushUs)
	put(d.GspFirmware[:], b.GSPVersion(p.Driver.Version))

	addr := g.Address
	d.PCIDomain, d.PCIBus, d.PCIDevice = addr.Domain, addr.Bus, addr.Device
	put(d.PCIBusID[:], addr.BusID())
	d.Brand = profile.Brands[b.Brand]
	d.Architecture = profile.Architectures[b.Architecture]
	d.CcMajor, d.CcMinor, _ = b.ComputeCapabilityParts()
	d.Minor = uint32(i)
	// Real boards' ids follow their PCI address: domain<<16 | bus<<8 | device.
	// A copy of the tree (domain + 0x10000) folds its domain's high half
	// in: its boards stay apart from the first copy's.
	d.BoardID = addr.Domain<<16 | addr.Bus<<8 | addr.Device ^ addr.Domain>>16
	if b.BoardID != nil {
		d.BoardID = *b.BoardID
	}
	d.MultiGPUBoard = bool32(b.MultiGPUBoard)
	d.ModuleID = NA
	if g.ModuleID != 0 {
		d.ModuleID = g.ModuleID
	}
	d.PCIDeviceID = uint32(b.PCI.DeviceID)
	d.PCISubsystemID = uint32(b.PCI.SubsystemID)
	d.PCIBaseClass = b.PCI.BaseClass
	d.PCISubClass = b.PCI.SubClass
	d.PcieMaxGen = b.PCI.MaxLinkGen
	d.PcieGPUMaxGen = b.PCI.GPUMaxLinkGen
	d.PcieGen = b.PCI.LinkGen
	d.PcieMaxWidth = b.PCI.MaxLinkWidth
	d.PcieWidth = b.PCI.LinkWidth
	// Behind a slower port the link trains down, as the PCI tree shows it;
	// "max" is the device's and the system's together.
	if f := g.Function; f != nil && f.Parent != nil {
		d.PcieGen, d.PcieWidth = f.TrainedLink()
		d.PcieMaxGen = min(d.PcieMaxGen, f.Parent.MaxLinkGen)
		d.PcieMaxWidth = min(d.PcieMaxWidth, f.Parent.MaxLinkWidth)
	}
	d.PcieHostMaxGen = opt32(b.PCI.HostMaxLinkGen)
	d.PcieAtomicsOut, d.PcieAtomicsIn = NA, NA
	if a := b.PCI.AtomicCaps; a != nil {
		d.PcieAtomicsOut, d.PcieAtomicsIn = atomicBits(a.Outbound), atomicBits(a.Inbound)
	}
	d.PcieTxKbps = opt32(b.PCI.TxKBps)
	d.PcieRxKbps = opt32(b.PCI.RxKBps)

	c := &b.Clocks
	d.Clock = clockSet(c.Current)
	d.AppClock = clockSet(c.Applications)
	d.DefaultAppClock = clockSet(c.DefaultApplications)
	if b.AppClocksDeprecated(p.Driver.Version) {
		for k := range d.AppClock {
			d.AppClock[k], d.DefaultAppClock[k] = profile.Deprecated, profile.Deprecated
		}
	}
	d.MaxClock = clockSet(c.Max)
	d.MaxBoostClock = clockSet(c.MaxBoost)
	d.SupportedMemCount = uint32(len(c.Supported))
	d.SupportedMemFirst = uint32(len(*pool))
	for _, s := range c.Supported {
		*pool = append(*pool, s.Memory)
	}
	for k, s := range c.Supported {
		gfx := s.Graphics
		if len(gfx) == 0 {
			for f := s.Max; f >= s.Min && f > 0; f -= s.Step {
				gfx = append(gfx, f)
				if f < s.Step {
					break
				}
			}
		}
		d.SupportedGfxFirst[k] = uint32(len(*pool))
		d.SupportedGfxCount[k] = uint32(len(gfx))
		*pool = append(*pool, gfx...)
	}

	pw := &b.Power
	d.PowerDrawMW = milliwatts(pw.Draw)
	d.PowerAverageMW = milliwatts(pw.Average)
	d.PowerLimitMW = milliwatts(pw.Limit)
	d.PowerEnforcedMW = milliwatts(pw.EnforcedLimit)
	d.PowerDefaultMW = milliwatts(pw.DefaultLimit)
	d.PowerMinMW = milliwatts(pw.MinLimit)
	d.PowerMaxMW = milliwatts(pw.MaxLimit)

	th := &b.Thermal
	d.TempGPU = opt32(th.GPU)
	d.TempMemory = opt32(th.Memory)
	for k := range d.TempThreshold {
		d.TempThreshold[k] = NA
	}
	// Indices are nvmlTemperatureThresholds_t.
	d.TempThreshold[0] = opt32(th.Shutdown)
	d.TempThreshold[1] = opt32(th.Slowdown)
	d.TempThreshold[2] = opt32(th.MemoryMax)
	d.TempThreshold[3] = opt32(th.GPUMax)
	d.TempTlimit = opt32(th.TLimit)
	if o := th.TLimitOffsets; o != nil {
		// Order as NVML's fields 193..196: shutdown, slowdown, memory max, GPU max.
		for k, v := range []*int32{o.Shutdown, o.Slowdown, o.MemoryMax, o.GPUMax} {
			if v != nil {
				d.TlimitOffsetMask |= 1 << k
				d.TlimitOffset[k] = uint32(*v)
			}
		}
	}
	d.MemoryPowerAverageMW = NA
	if mp := b.MemoryPower; mp != nil {
		d.MemoryPowerAverageMW = milliwatts(mp.Average)
	}
	d.ModulePowerDrawMW, d.ModulePowerLimitMW, d.ModulePowerDefaultMW, d.ModulePowerMinMW, d.ModulePowerMaxMW = NA, NA, NA, NA, NA
	if mp := b.ModulePower; mp != nil {
		d.ModulePowerDrawMW = milliwatts(mp.Draw)
		d.ModulePowerLimitMW = milliwatts(mp.Limit)
		d.ModulePowerDefaultMW = milliwatts(mp.DefaultLimit)
		d.ModulePowerMinMW = milliwatts(mp.MinLimit)
		d.ModulePowerMaxMW = milliwatts(mp.MaxLimit)
	}
	d.FabricState = NA
	if f := b.Fabric; f != nil {
		d.FabricState = profile.FabricStates[f.State]
		d.FabricStatus = profile.FabricStatuses[f.Status]
		d.FabricClique = f.CliqueID
		d.FabricHealthMask = uint32(f.HealthMask)
		d.FabricHealthSummary = profile.FabricHealthSummaries[f.HealthSummary] // absent: 0, not supported
		u, _ := profile.ParseUUID(f.ClusterUUID)                               // validated
		for k := range d.FabricClusterUUID {
			d.FabricClusterUUID[k] = binary.LittleEndian.Uint32(u[4*k:])
		}
	}

	m := &b.Modes
	d.PersistenceMode = bool32(m.Persistence)
	d.ComputeMode = profile.ComputeModes[m.ComputeMode]
	d.ECCCurrent, d.ECCPending, d.ECCDefault = NA, NA, NA
	if m.ECC != nil {
		d.ECCCurrent, d.ECCPending, d.ECCDefault = bool32(m.ECC.Current), bool32(m.ECC.Pending), bool32(m.ECC.Default)
	}
	d.MIGCurrent, d.MIGPending, d.MaxMIGDevices = NA, NA, 0
	// A block with no profiles and no devices is only a layout for a pool
	// of boards (all-disabled): the board has no MIG.
	if m.MIG != nil && (m.MIG.MaxDevices > 0 || len(m.MIG.GPUInstances) > 0) {
		d.MIGCurrent, d.MIGPending, d.MaxMIGDevices = bool32(m.MIG.Current), bool32(m.MIG.Pending), m.MIG.MaxDevices
		compileMIG(&d, m.MIG)
	}
	d.DisplayMode = NA
	if dm := b.DisplayMode(p.Driver.Version); dm != "" {
		d.DisplayMode = profile.FeatureStates[dm]
	}
	d.DisplayActive = bool32(m.DisplayActive)
	d.VirtualizationMode = profile.VirtualizationModes[m.Virtualization]
	fmt.Sscanf(m.PerformanceState, "P%d", &d.PerformanceState)
	d.SparseMode = NA
	if m.SparseOperation != "" {
		d.SparseMode = profile.FeatureStates[m.SparseOperation]
	}
	d.AddressingMode = NA
	if b.AddressingMode != "" {
		d.AddressingMode = profile.AddressingModes[b.AddressingMode]
	}
	d.PowerState = d.PerformanceState
	if m.PowerStateDeprecated {
		d.PowerState = profile.Deprecated
	}
	d.FanSpeed = opt32(m.FanSpeed)
	d.AccountingMode = bool32(m.Accounting)
	d.AccountingBuffer = opt32(m.AccountingBuffer)

	u := &b.Utilization
	d.UtilGPU, d.UtilMemory = opt32(u.GPU), opt32(u.Memory)
	d.UtilEncoder, d.UtilDecoder = opt32(u.Encoder), opt32(u.Decoder)
	d.UtilJpeg, d.UtilOFA = opt32(u.JPEG), opt32(u.OFA)
	if e := b.MemoryErrors.ECC; e != nil {
		for k, c := range []profile.ECCCount{e.Volatile, e.Aggregate} {
			d.ECCCount[4*k+0], d.ECCCount[4*k+1] = c.DRAMCorrected, c.SRAMCorrected
			d.ECCCount[4*k+2], d.ECCCount[4*k+3] = c.DRAMUncorrected, c.SRAMUncorrected
		}
	}
	d.RetiredPages = bool32(b.MemoryErrors.RetiredPages)
	d.RemappedRows = bool32(b.MemoryErrors.RemappedRows)
	d.RemapperBanks = opt32(b.MemoryErrors.RemapperBanks)

	d.NUMANode = NA
	if g.NUMANode >= 0 {
		d.NUMANode = uint32(g.NUMANode)
	}
	d.PcieRoot, d.PcieSwitchTop, d.PcieSwitchLeaf = at(g.Function)
	d.C2cMode, d.C2cLinks = NA, NA
	if b.C2C != "" {
		d.C2cMode = profile.FeatureStates[b.C2C]
	}
	if l := b.C2CLinks; l != nil {
		d.C2cLinks, d.C2cLinkMbps = l.Count, l.MBps
	}
	if g.CPUs != nil {
		d.CPUAffinity = *g.CPUs
	}
	if g.SocketCPUs != nil {
		d.CPUAffinitySocket = *g.SocketCPUs
	}
	d.NUMASocketMask = g.SocketNodes
	d.NUMANearMask = g.NearNodes
	d.GPUNUMANode = NA
	if g.MemoryNode >= 0 {
		d.GPUNUMANode = uint32(g.MemoryNode)
	}
	if l := b.NVLink; l != nil {
		d.NvlinkCount = l.Links
		d.NvlinkVersion = profile.NVLinkVersions[l.Version]
		d.NvlinkSpeedMbps = l.SpeedMBps
		d.NvlinkRemote = profile.NVLinkRemotes[l.Remote]
		d.NvlinkRemoteDeviceID = uint32(l.RemoteDeviceID)
		d.NvlinkFwCount = uint32(len(l.Firmware))
		if l.Encryption {
			d.NvlinkNvle = 1
		}
		for i, f := range l.Firmware {
			v, _ := profile.FirmwareVersion(f.Version)
			copy(d.NvlinkFw[4*i:], []uint32{profile.NVLinkUcodes[f.Ucode], v[0], v[1], v[2]})
		}
	}
	for k := range d.NvlinkRemoteAddr {
		d.NvlinkRemoteAddr[k] = NA
	}
	for link, a := range g.NVLinkSwitches {
		// The library adds the GPU's copy (its domain above ffff).
		d.NvlinkRemoteAddr[link] = (a.Domain&0xffff)<<16 | a.Bus<<8 | a.Device<<3 | a.Function
	}
	d.ClockReasonsSupported = b.ClockEventReasonMask()
	d.MemoryBusWidth = opt32(b.MemoryBusWidth)
	d.GPUCores = opt32(b.CUDACores)
	d.BusType, d.PowerSource, d.Egm = NA, NA, NA
	if b.BusType != "" {
		d.BusType = profile.BusTypes[b.BusType]
	}
	if b.PowerSource != "" {
		d.PowerSource = profile.PowerSources[b.PowerSource]
	}
	if b.EGM != "" {
		d.Egm = profile.FeatureStates[b.EGM]
	}

	d.MemoryTotal = uint64(b.Memory.Total)
	d.MemoryReserved = uint64(b.Memory.Reserved)
	d.MemoryUsed = uint64(b.Memory.Used)
	d.Bar1Total = uint64(b.BAR1.Total)
	d.Bar1Used = uint64(b.BAR1.Used)
	return d, nil
}
