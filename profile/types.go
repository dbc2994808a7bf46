package profile

import "encoding/json"

// Profile describes one node: how many GPUs of which board, with which driver.
// A field left out means the board reports it as N/A.
type Profile struct {
	Name        string           `json:"name"`
	Description string           `json:"description,omitempty"`
	Base        string           `json:"base,omitempty"` // built-in this profile changes
	GPUs        int              `json:"gpus"`
	Driver      Driver           `json:"driver"`
	Board       Board            `json:"board"`
	Devices     []DeviceOverride `json:"devices,omitempty"` // per-GPU changes to board
	Topology    Topology         `json:"topology"`
	PCIe        *PCIe            `json:"pcie,omitempty"` // absent: each GPU alone on a root bus
	InfiniBand  *InfiniBand      `json:"infiniband,omitempty"`
}

// DeviceOverride changes some board fields of one GPU (by node index).
type DeviceOverride struct {
	Index int        `json:"index"`
	Board BoardPatch `json:"board"`
}

// BoardPatch is a partial board, laid over Board for one GPU.
type BoardPatch json.RawMessage

// MarshalJSON writes the patch as it was given.
func (b BoardPatch) MarshalJSON() ([]byte, error) {
	if b == nil {
		return []byte("{}"), nil
	}
	return b, nil
}

// UnmarshalJSON keeps the patch raw; Boards applies it.
func (b *BoardPatch) UnmarshalJSON(data []byte) error {
	*b = append((*b)[:0], data...)
	return nil
}

// Driver is what the mock driver reports about itself. CUDA and NVML
// versions follow from the driver's branch when left out.
type Driver struct {
	Version     string `json:"version"`               // e.g. 580.105.08
	CUDAVersion string `json:"cudaVersion,omitempty"` // e.g. "13.0"
	NVMLVersion string `json:"nvmlVersion,omitempty"` // e.g. 13.580.105.08
}

// Board holds what every GPU of the node shares.
type Board struct {
	ProductName        string       `json:"productName"`
	Brand              string       `json:"brand"`
	Architecture       string       `json:"architecture"`
	ComputeCapability  string       `json:"computeCapability"`
	SerialPrefix       string       `json:"serialPrefix"`
	VBIOSVersion       string       `json:"vbiosVersion,omitempty"`
	BoardPartNumber    string       `json:"boardPartNumber,omitempty"`
	GPUPartNumber      string       `json:"gpuPartNumber,omitempty"`
	BoardID            *uint32      `json:"boardId,omitempty"` // default: from the PCI address
	MultiGPUBoard      bool         `json:"multiGpuBoard"`
	GSPFirmware        bool         `json:"gspFirmware,omitempty"`        // runs the driver's GSP firmware: its version is the driver's
	GSPFirmwareVersion string       `json:"gspFirmwareVersion,omitempty"` // another GSP firmware version than the driver's
	AddressingMode     string       `json:"addressingMode,omitempty"`     // None, HMM, ATS
	C2C                string       `json:"c2c,omitempty"`                // chip-to-chip link to a Grace CPU: Enabled, Disabled
	C2CLinks           *C2CLinks    `json:"c2cLinks,omitempty"`           // its links, where known
	Inforom            Inforom      `json:"inforom"`
	PCI                PCI          `json:"pci"`
	Memory             Memory       `json:"memory"`
	BAR1               BAR1         `json:"bar1"`
	Clocks             Clocks       `json:"clocks"`
	Power              Power        `json:"power"`
	Thermal            Thermal      `json:"thermal"`
	Modes              Modes        `json:"modes"`
	Utilization        Utilization  `json:"utilization"`
	MemoryErrors       MemoryErrors `json:"memoryErrors"`
	NVLink             *NVLink      `json:"nvlink,omitempty"`
	MemoryPower        *MemoryPower `json:"memoryPower,omitempty"` // the GPU memory's own (HBM boards)
	ModulePower        *Power       `json:"modulePower,omitempty"` // Grace boards: GPU+CPU+memory
	Fabric             *Fabric      `json:"fabric,omitempty"`      // NVLink fabric (NVSwitch, NVL72)
	// What the chip is, from public specifications; absent: N/A.
	MemoryBusWidth *uint32 `json:"memoryBusWidth,omitempty"` // bits
	CUDACores      *uint32 `json:"cudaCores,omitempty"`      // SMs x cores per SM
	BusType        string  `json:"busType,omitempty"`        // PCIe, PCI, AGP, FPCI
	PowerSource    string  `json:"powerSource,omitempty"`    // AC, Battery, Undersized
	EGM            string  `json:"egm,omitempty"`            // extended GPU memory: Enabled, Disabled
	// ClockEventReasons are the clock event (throttle) reasons the board
	// reports, by nvidia-smi's names; others show as N/A.
	ClockEventReasons []string `json:"clockEventReasons,omitempty"`
}

// Fabric is the GPU's registration with the NVLink fabric manager.
type Fabric struct {
	State       string `json:"state"`       // Completed, In Progress, Not Started
	Status      string `json:"status"`      // Success, or an NVML error name
	CliqueID    uint32 `json:"cliqueId"`    // NVLink clique (partition)
	ClusterUUID string `json:"clusterUuid"` // e.g. 00000001-0000-0000-0000-000000000001
	// HealthMask is NVML's fabric health mask (NVML_GPU_FABRIC_HEALTH_MASK_*:
	// two bits each for degraded bandwidth, route recovery, route unhealthy,
	// access-timeout recovery, then four for the configuration); 0: none
	// reported. HealthSummary is Healthy, Unhealthy or Limited Capacity;
	// absent: not reported.
	HealthMask    Hex32  `json:"healthMask,omitempty"`
	HealthSummary string `json:"healthSummary,omitempty"`
}

// Inforom versions; empty means N/A.
type Inforom struct {
	Image string `json:"image,omitempty"`
	OEM   string `json:"oem,omitempty"`
	ECC   string `json:"ecc,omitempty"`
	Power string `json:"power,omitempty"`
	// The duration of the BBX (black box) object's flush, which the mock
	// makes at driver load; absent: the board does not report it.
	BBXFlushUs *uint32 `json:"bbxFlushUs,omitempty"`
}

// MemoryPower is the GPU memory's draw in watts, as nvidia-smi's "GPU
// Memory Power Readings" shows it: its 1 s average.
type MemoryPower struct {
	Average *float64 `json:"average,omitempty"`
}

// PCI identity and link state.
type PCI struct {
	DeviceID       Hex32      `json:"deviceId"`    // device<<16 | vendor, e.g. 0x20B010DE
	SubsystemID    Hex32      `json:"subsystemId"` // e.g. 0x134F10DE
	BaseClass      uint32     `json:"baseClass"`
	SubClass       uint32     `json:"subClass"`
	MaxLinkGen     uint32     `json:"maxLinkGen"`
	GPUMaxLinkGen  uint32     `json:"gpuMaxLinkGen"`
	LinkGen        uint32     `json:"linkGen"`
	MaxLinkWidth   uint32     `json:"maxLinkWidth"`
	LinkWidth      uint32     `json:"linkWidth"`
	HostMaxLinkGen *uint32    `json:"hostMaxLinkGen,omitempty"` // the host side's maximum
	AtomicCaps     *AtomicOps `json:"atomicCaps,omitempty"`
	TxKBps         *uint32    `json:"txKBps,omitempty"`
	RxKBps         *uint32    `json:"rxKBps,omitempty"`
}

// AtomicOps lists the PCIe atomic operations each way, by nvidia-smi's names:
// FETCHADD_32, FETCHADD_64, SWAP_32, SWAP_64, CAS_32, CAS_64, CAS_128.
type AtomicOps struct {
	Inbound  []string `json:"inbound,omitempty"`
	Outbound []string `json:"outbound,omitempty"`
}

// Memory is the framebuffer as NVML reports it, in bytes.
type Memory struct {
	Total    Quantity `json:"total"`
	Reserved Quantity `json:"reserved"`
	Used     Quantity `json:"used"`
}

// BAR1 memory in bytes.
type BAR1 struct {
	Total Quantity `json:"total"`
	Used  Quantity `json:"used"`
}

// ClockSet is one clock per domain, in MHz; a missing domain is N/A.
type ClockSet struct {
	Graphics *uint32 `json:"graphics,omitempty"`
	SM       *uint32 `json:"sm,omitempty"`
	Memory   *uint32 `json:"memory,omitempty"`
	Video    *uint32 `json:"video,omitempty"`
}

// Clocks in MHz.
type Clocks struct {
	Current             ClockSet          `json:"current"`
	Applications        ClockSet          `json:"applications"`
	DefaultApplications ClockSet          `json:"defaultApplications"`
	Max                 ClockSet          `json:"max"`
	MaxBoost            ClockSet          `json:"maxBoost"`
	Supported           []SupportedClocks `json:"supported,omitempty"`
	// ApplicationsDeprecated makes the application clocks (current and
	// default) answer "deprecated", as drivers from 570 on do on boards
	// without settable application clocks.
	ApplicationsDeprecated bool `json:"applicationsDeprecated,omitempty"`
}

// SupportedClocks lists the graphics clocks allowed at one memory clock,
// either explicitly or as a range from Max down to Min by Step.
type SupportedClocks struct {
	Memory   uint32   `json:"memory"`
	Graphics []uint32 `json:"graphics,omitempty"`
	Max      uint32   `json:"max,omitempty"`
	Min      uint32   `json:"min,omitempty"`
	Step     uint32   `json:"step,omitempty"`
}

// Power in watts.
type Power struct {
	Draw          *float64 `json:"draw,omitempty"`
	Average       *float64 `json:"average,omitempty"` // the 1 s average; absent: N/A (GA100, Turing)
	Limit         *float64 `json:"limit,omitempty"`
	EnforcedLimit *float64 `json:"enforcedLimit,omitempty"`
	DefaultLimit  *float64 `json:"defaultLimit,omitempty"`
	MinLimit      *float64 `json:"minLimit,omitempty"`
	MaxLimit      *float64 `json:"maxLimit,omitempty"`
}

// Thermal readings and thresholds in degrees C. Boards from Ada and Hopper
// on report the margin to their T.Limit and thresholds relative to it
// instead of absolute thresholds.
type Thermal struct {
	GPU           *uint32        `json:"gpu,omitempty"`
	Memory        *uint32        `json:"memory,omitempty"`
	Shutdown      *uint32        `json:"shutdown,omitempty"`
	Slowdown      *uint32        `json:"slowdown,omitempty"`
	GPUMax        *uint32        `json:"gpuMax,omitempty"`
	MemoryMax     *uint32        `json:"memoryMax,omitempty"`
	TLimit        *uint32        `json:"tlimit,omitempty"`        // margin below T.Limit
	TLimitOffsets *TLimitOffsets `json:"tlimitOffsets,omitempty"` // thresholds relative to T.Limit
}

// TLimitOffsets are thresholds in degrees relative to T.Limit (often negative).
type TLimitOffsets struct {
	Shutdown  *int32 `json:"shutdown,omitempty"`
	Slowdown  *int32 `json:"slowdown,omitempty"`
	GPUMax    *int32 `json:"gpuMax,omitempty"`
	MemoryMax *int32 `json:"memoryMax,omitempty"`
}

// Modes are the GPU's settings; enums take nvidia-smi's words.
type Modes struct {
	Persistence      bool   `json:"persistence"`
	ComputeMode      string `json:"computeMode"`               // Default, Exclusive_Process, Prohibited
	Virtualization   string `json:"virtualization"`            // None, Pass-Through, VGPU, Host VGPU, Host VSGA
	PerformanceState string `json:"performanceState"`          // P0..P15
	DisplayMode      string `json:"displayMode,omitempty"`     // Enabled, Disabled, Deprecated; absent: N/A
	SparseOperation  string `json:"sparseOperation,omitempty"` // Enabled, Disabled; absent: N/A
	// PowerStateDeprecated makes the power-state readings answer "deprecated",
	// as drivers from 570 on do for newer boards.
	PowerStateDeprecated bool    `json:"powerStateDeprecated,omitempty"`
	DisplayActive        bool    `json:"displayActive"`
	ECC                  *ECC    `json:"ecc,omitempty"` // absent: no ECC
	MIG                  *MIG    `json:"mig,omitempty"` // absent: not MIG capable
	FanSpeed             *uint32 `json:"fanSpeed,omitempty"`
	Accounting           bool    `json:"accounting"`
	AccountingBuffer     *uint32 `json:"accountingBuffer,omitempty"`
}

// ECC modes.
type ECC struct {
	Current bool `json:"current"`
	Pending bool `json:"pending"`
	Default bool `json:"default"` // as the board ships
}

// MIG modes, capacity and the board's instance profiles (profile/mig.go).
type MIG struct {
	Current    bool   `json:"current"`
	Pending    bool   `json:"pending"`
	MaxDevices uint32 `json:"maxDevices"`
	// GPUInstances are the GPU-instance profiles, in the order
	// `nvidia-smi mig -lgip` lists them. Absent: MIG mode cannot be enabled.
	GPUInstances []GPUInstanceProfile `json:"gpuInstances,omitempty"`
	// Layout partitions the GPUs at install (profile.MIGLayout); hostprep
	// install --mig overrides it.
	Layout string `json:"layout,omitempty"`
}

// Utilization in percent; absent means N/A.
type Utilization struct {
	GPU     *uint32 `json:"gpu,omitempty"`
	Memory  *uint32 `json:"memory,omitempty"`
	Encoder *uint32 `json:"encoder,omitempty"`
	Decoder *uint32 `json:"decoder,omitempty"`
	JPEG    *uint32 `json:"jpeg,omitempty"`
	OFA     *uint32 `json:"ofa,omitempty"`
}

// MemoryErrors says which page-retirement mechanism the board has, and
// the ECC errors it has counted.
type MemoryErrors struct {
	RetiredPages  bool       `json:"retiredPages"`
	RemappedRows  bool       `json:"remappedRows"`
	RemapperBanks *uint32    `json:"remapperBanks,omitempty"`
	ECC           *ECCCounts `json:"ecc,omitempty"`
}

// ECCCounts are ECC error counters: volatile (since boot) and aggregate
// (over the board's life).
type ECCCounts struct {
	Volatile  ECCCount `json:"volatile"`
	Aggregate ECCCount `json:"aggregate"`
}

// ECCCount counts errors by kind and memory.
type ECCCount struct {
	DRAMCorrected   uint32 `json:"dramCorrected,omitempty"`
	DRAMUncorrected uint32 `json:"dramUncorrected,omitempty"`
	SRAMCorrected   uint32 `json:"sramCorrected,omitempty"`
	SRAMUncorrected uint32 `json:"sramUncorrected,omitempty"`
}

// NVLink of every GPU.
type NVLink struct {
	Version   string `json:"version"` // as NVML reports it: "3.1" on A100
	Links     uint32 `json:"links"`
	SpeedMBps uint32 `json:"speedMBps"` // per link
	Remote    string `json:"remote"`    // switch or gpu
	// RemoteDeviceID is the PCI id of the NVSwitch the links reach.
	RemoteDeviceID Hex32 `json:"remoteDeviceId,omitempty"`
	// Firmware are the NVLink firmware images nvmlDeviceGetNvLinkInfo
	// reports (R580 on; nvidia-smi nvlink -info), in its order. Absent:
	// the call answers Not Supported. Encryption is NVLE's state.
	Firmware   []NVLinkFirmware `json:"firmware,omitempty"`
	Encryption bool             `json:"encryption,omitempty"`
}

// MaxNVLinkFirmware bounds board.nvlink.firmware (the snapshot's room; a
// real GB200 reports five).
const MaxNVLinkFirmware = 8

// NVLinkFirmware is one NVLink firmware image: its ucode by nvidia-smi's
// name and its version, major.minor.subminor (nvidia-smi prints colons).
type NVLinkFirmware struct {
	Ucode   string `json:"ucode"`   // MSE, NETIR, NETIR UPHY, NETIR CLN, NETIR DLN
	Version string `json:"version"` // e.g. 36.2014.1862
}

// Socket is one CPU socket: its CPUs and NUMA nodes.
type Socket struct {
	CPUs      string   `json:"cpus"`      // CPU list, e.g. "0-63,128-191"
	NUMANodes []uint32 `json:"numaNodes"` // e.g. [0, 1, 2, 3]
}

// Topology places the GPUs. Lists shorter than the GPU count repeat: GPU i
// takes entry i mod len; repeats of busIds move to PCI domain + 0x10000 * (i / len).
type Topology struct {
	BusIDs      []string `json:"busIds"`      // PCI addresses, e.g. "0000:07:00.0"
	NUMANodes   []uint32 `json:"numaNodes"`   // one per GPU
	CPUAffinity []string `json:"cpuAffinity"` // CPU lists, e.g. "0-63,128-191"
	// Sockets group NUMA nodes where a socket has several (AMD's NPS2 and
	// NPS4), for NVML's socket scope. Empty: each NUMA node is a socket.
	Sockets []Socket `json:"sockets,omitempty"`
	// GPUNUMANodes are, on coherent (Grace) boards, each GPU's own memory
	// NUMA node, as nvmlDeviceGetNumaNodeId reports it. Empty: none (x86).
	GPUNUMANodes []uint32 `json:"gpuNumaNodes,omitempty"`
	// NUMAAffinity are, per GPU, the NUMA nodes NVML calls nearest (topo
	// -m's NUMA Affinity), e.g. "0,3-9,11-17". Empty: the GPU's NUMA node.
	NUMAAffinity []string `json:"numaAffinity,omitempty"`
	// NVSwitches are the node's NVLink switches as PCI devices. Every GPU's
	// links spread over them in order, in blocks of LinksPerSwitch (default:
	// an even split). Empty where the switches are outside the node (an
	// NVL72 compute tray): a link's remote PCI device is then not reported.
	NVSwitches     []string `json:"nvswitches,omitempty"`
	LinksPerSwitch []uint32 `json:"linksPerSwitch,omitempty"`
	// ModuleIDs are, per GPU (entry i mod len), the baseboard module
	// nvmlDeviceGetModuleId reports. Empty: not reported (N/A).
	ModuleIDs []uint32 `json:"moduleIds,omitempty"`
}

// C2CLinks are the NVLink-C2C links of a GPU to its Grace CPU, as NVML's
// C2C fields give them (NCCL reads them for the GPU-CPU bandwidth).
type C2CLinks struct {
	Count uint32 `json:"count"` // links, all active
	MBps  uint32 `json:"mbps"`  // each link's bandwidth, MB/s
}
