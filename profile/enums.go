package profile

// Deprecated marks a snapshot value NVML answers with NVML_ERROR_DEPRECATED.
const Deprecated = 0xfffffffe

// NVML enum values for the words profiles use (values from nvml.h).
var (
	Brands = map[string]uint32{
		"Unknown": 0, "Quadro": 1, "Tesla": 2, "NVS": 3, "GeForce": 5, "Titan": 6,
		"Quadro RTX": 12, "NVIDIA RTX": 13, "NVIDIA": 14,
	}
	Architectures = map[string]uint32{
		"Kepler": 2, "Maxwell": 3, "Pascal": 4, "Volta": 5, "Turing": 6,
		"Ampere": 7, "Ada Lovelace": 8, "Hopper": 9, "Blackwell": 10,
	}
	ComputeModes = map[string]uint32{
		"Default": 0, "Prohibited": 2, "Exclusive_Process": 3,
	}
	VirtualizationModes = map[string]uint32{
		"None": 0, "Pass-Through": 1, "VGPU": 2, "Host VGPU": 3, "Host VSGA": 4,
	}
	NVLinkRemotes = map[string]uint32{"gpu": 0, "switch": 2}
	// FeatureStates are answers about a feature; Deprecated is the newer
	// drivers' NVML_ERROR_DEPRECATED.
	FeatureStates   = map[string]uint32{"Disabled": 0, "Enabled": 1, "Deprecated": Deprecated}
	AddressingModes = map[string]uint32{"None": 0, "HMM": 1, "ATS": 2}
	// AtomicOpBits are the bits nvidia-smi 535 names PCIe atomic ops by.
	AtomicOpBits = map[string]uint32{
		"FETCHADD_32": 1 << 0, "FETCHADD_64": 1 << 1, "SWAP_32": 1 << 2, "SWAP_64": 1 << 3,
		"CAS_32": 1 << 4, "CAS_64": 1 << 5, "CAS_128": 1 << 6,
	}
	FabricStates = map[string]uint32{"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
	// FabricStatuses are the nvmlReturn_t a finished registration reports.
	FabricStatuses = map[string]uint32{"Success": 0, "Not Supported": 3, "Unknown Error": 999}
	// FabricHealthSummaries are NVML_GPU_FABRIC_HEALTH_SUMMARY_* by name.
	FabricHealthSummaries = map[string]uint32{"Healthy": 1, "Unhealthy": 2, "Limited Capacity": 3}
	// NVLinkVersions are nvmlNvlinkVersion_t codes, not generations: a real
	// A100 reports 5 ("3.1").
	NVLinkVersions = map[string]uint32{
		"1.0": 1, "2.0": 2, "2.2": 3, "3.0": 4, "3.1": 5, "4.0": 6, "5.0": 7, "6.0": 8,
	}
	// NVLinkUcodes are NVML_NVLINK_FIRMWARE_UCODE_TYPE_* by nvidia-smi's names.
	NVLinkUcodes = map[string]uint32{"MSE": 1, "NETIR": 2, "NETIR UPHY": 3, "NETIR CLN": 4, "NETIR DLN": 5}
)

// Chip facts by NVML's names.
var (
	BusTypes     = map[string]uint32{"PCI": 1, "PCIe": 2, "FPCI": 3, "AGP": 4}
	PowerSources = map[string]uint32{"AC": 0, "Battery": 1, "Undersized": 2}
	// ClockEventReasonBits are nvmlClocksEventReason* bits by name.
	ClockEventReasonBits = map[string]uint32{
		"GpuIdle": 0x1, "ApplicationsClocksSetting": 0x2, "SwPowerCap": 0x4, "HwSlowdown": 0x8,
		"SyncBoost": 0x10, "SwThermalSlowdown": 0x20, "HwThermalSlowdown": 0x40,
		"HwPowerBrakeSlowdown": 0x80, "DisplayClockSetting": 0x100,
	}
)
