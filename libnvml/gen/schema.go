package gen

// The snapshot schema: one list of fields per record. From it come the C
// header the library reads and the Go structs the compiler writes, so the two
// cannot drift. Bump SnapshotVersion on any change.

// SnapshotVersion is the layout version written into every snapshot.
const SnapshotVersion = 13

// Kind is the storage type of a field.
type Kind int

const (
	U32  Kind = iota // uint32; 0xffffffff means "not available" unless noted
	U64              // uint64; all ones means "not available"
	Str              // NUL-terminated char[Count]; empty means "not available"
	U32s             // uint32[Count]
	U64s             // uint64[Count]
)

// Field is one member of a record.
type Field struct {
	Name  string // snake_case in C, CamelCase in Go
	Kind  Kind
	Count int // for Str, U32s and U64s
	Doc   string
}

// Record is one fixed-layout struct of the snapshot file.
type Record struct {
	Name   string
	Doc    string
	Fields []Field
}

// MaxMemClocks bounds the supported memory clocks per device; graphics
// clock lists live in the file's clock pool.
const MaxMemClocks = 8

// MaxNVLinkFirmware bounds a board's NVLink firmware images
// (profile.MaxNVLinkFirmware).
const MaxNVLinkFirmware = 8

// MaxMIGProfiles bounds a board's GPU-instance profiles (profile.MIGMaxProfiles).
const MaxMIGProfiles = 8

// Schema is the snapshot layout: a Header, Header.DeviceCount Devices,
// Header.NICCount NICs, then Header.PoolCount uint32 values.
var Schema = []Record{
	{Name: "header", Doc: "starts the file", Fields: []Field{
		{"magic", Str, 8, `"NVMOCKSS"`},
		{"version", U32, 0, "SnapshotVersion"},
		{"header_size", U32, 0, "sizeof header"},
		{"device_size", U32, 0, "sizeof device"},
		{"device_count", U32, 0, "devices on the node"},
		{"pool_count", U32, 0, "uint32 values after the NICs"},
		{"nic_size", U32, 0, "sizeof nic"},
		{"nic_count", U32, 0, "NIC functions in the node's PCI tree"},
		{"flags", U32, 0, "FLAG_*"},
		{"cuda_version", U32, 0, "e.g. 12020"},
		{"node_seed_hash", U32, 0, "low bits of the seed hash, for display"},
		{"driver_version", Str, 80, "e.g. 535.261.03"},
		{"nvml_version", Str, 80, "e.g. 12.535.261.03"},
		{"profile", Str, 64, "profile name"},
	}},
	{Name: "device", Doc: "one GPU of the node", Fields: []Field{
		{"name", Str, 96, "product name"},
		{"uuid", Str, 96, "GPU-..."},
		{"serial", Str, 32, ""},
		{"board_part_number", Str, 80, ""},
		{"gpu_part_number", Str, 80, ""},
		{"vbios_version", Str, 32, ""},
		{"inforom_image", Str, 32, ""},
		{"inforom_oem", Str, 16, ""},
		{"inforom_ecc", Str, 16, ""},
		{"inforom_power", Str, 16, ""},
		{"gsp_firmware", Str, 40, ""},
		{"pci_bus_id", Str, 32, "00000000:07:00.0"},
		{"brand", U32, 0, "nvmlBrandType_t"},
		{"architecture", U32, 0, "nvmlDeviceArchitecture_t"},
		{"cc_major", U32, 0, ""},
		{"cc_minor", U32, 0, ""},
		{"minor", U32, 0, "/dev/nvidiaN"},
		{"board_id", U32, 0, ""},
		{"multi_gpu_board", U32, 0, ""},
		{"module_id", U32, 0, ""},
		{"pci_domain", U32, 0, ""},
		{"pci_bus", U32, 0, ""},
		{"pci_device", U32, 0, ""},
		{"pci_device_id", U32, 0, "device<<16 | vendor"},
		{"pci_subsystem_id", U32, 0, ""},
		{"pci_base_class", U32, 0, ""},
		{"pci_sub_class", U32, 0, ""},
		{"pcie_max_gen", U32, 0, "max of GPU and host"},
		{"pcie_gpu_max_gen", U32, 0, ""},
		{"pcie_gen", U32, 0, "current"},
		{"pcie_max_width", U32, 0, ""},
		{"pcie_width", U32, 0, "current"},
		{"pcie_host_max_gen", U32, 0, "max generation of the host side of the link"},
		{"pcie_atomics_out", U32, 0, "outbound atomic ops: bit 0 FETCHADD_32 .. bit 6 CAS_128"},
		{"pcie_atomics_in", U32, 0, "inbound atomic ops, same bits"},
		{"pad1", U32, 0, "keeps the layout 8-aligned"},
		{"pcie_tx_kbps", U32, 0, "throughput"},
		{"pcie_rx_kbps", U32, 0, "throughput"},
		{"clock", U32s, 4, "current MHz by nvmlClockType_t"},
		{"app_clock", U32s, 4, ""},
		{"default_app_clock", U32s, 4, ""},
		{"max_clock", U32s, 4, ""},
		{"max_boost_clock", U32s, 4, ""},
		{"supported_mem_count", U32, 0, "entries in the pool"},
		{"supported_mem_first", U32, 0, "pool index"},
		{"supported_gfx_first", U32s, MaxMemClocks, "pool index per memory clock"},
		{"supported_gfx_count", U32s, MaxMemClocks, ""},
		{"power_draw_mw", U32, 0, ""},
		{"power_average_mw", U32, 0, "1 s average"},
		{"pad2", U32, 0, "keeps the layout 8-aligned"},
		{"power_limit_mw", U32, 0, "management limit"},
		{"power_enforced_mw", U32, 0, ""},
		{"power_default_mw", U32, 0, ""},
		{"power_min_mw", U32, 0, ""},
		{"power_max_mw", U32, 0, ""},
		{"temp_gpu", U32, 0, "C"},
		{"temp_memory", U32, 0, "C"},
		{"temp_threshold", U32s, 16, "C by nvmlTemperatureThresholds_t"},
		{"temp_tlimit", U32, 0, "C below T.Limit; not available: no T.Limit sensor"},
		{"tlimit_offset_mask", U32, 0, "bit k: tlimit_offset[k] is set"},
		{"tlimit_offset", U32s, 4, "int32 C relative to T.Limit: shutdown, slowdown, mem max, gpu max"},
		{"memory_power_average_mw", U32, 0, "the GPU memory's 1 s average power; not available: none"},
		{"inforom_bbx_flush_us", U32, 0, "duration of the BBX object's flush at driver load; not available: not supported"},
		{"module_power_draw_mw", U32, 0, "module (GPU+CPU+memory) power; not available: none"},
		{"module_power_limit_mw", U32, 0, ""},
		{"module_power_default_mw", U32, 0, ""},
		{"module_power_min_mw", U32, 0, ""},
		{"module_power_max_mw", U32, 0, ""},
		{"fabric_state", U32, 0, "nvmlGpuFabricState_t; not available: no fabric"},
		{"fabric_status", U32, 0, "nvmlReturn_t"},
		{"fabric_clique", U32, 0, ""},
		{"fabric_cluster_uuid", U32s, 4, "16 raw bytes"},
		{"fabric_health_mask", U32, 0, "NVML_GPU_FABRIC_HEALTH_MASK_* bits"},
		{"fabric_health_summary", U32, 0, "NVML_GPU_FABRIC_HEALTH_SUMMARY_*"},
		{"persistence_mode", U32, 0, ""},
		{"compute_mode", U32, 0, ""},
		{"ecc_current", U32, 0, ""},
		{"ecc_pending", U32, 0, ""},
		{"ecc_default", U32, 0, "as the board ships"},
		{"mig_current", U32, 0, "not available: not MIG capable"},
		{"mig_pending", U32, 0, ""},
		{"max_mig_devices", U32, 0, ""},
		{"mig_gi_count", U32, 0, "GPU-instance profiles, in -lgip order"},
		{"mig_gi_id", U32s, MaxMIGProfiles, "profile id as nvidia-smi shows it"},
		{"mig_gi_nvml", U32s, MaxMIGProfiles, "NVML_GPU_INSTANCE_PROFILE_*"},
		{"mig_gi_memory_slices", U32s, MaxMIGProfiles, "of 8"},
		{"mig_gi_compute_slices", U32s, MaxMIGProfiles, "of 7"},
		{"mig_gi_instances", U32s, MaxMIGProfiles, ""},
		{"mig_gi_memory_mib", U32s, MaxMIGProfiles, ""},
		{"mig_gi_sms", U32s, MaxMIGProfiles, ""},
		{"mig_gi_copy_engines", U32s, MaxMIGProfiles, ""},
		{"mig_gi_decoders", U32s, MaxMIGProfiles, ""},
		{"mig_gi_encoders", U32s, MaxMIGProfiles, ""},
		{"mig_gi_jpegs", U32s, MaxMIGProfiles, ""},
		{"mig_gi_ofas", U32s, MaxMIGProfiles, ""},
		{"mig_gi_placements", U32s, MaxMIGProfiles, "bit n: may start at memory slice n"},
		{"mig_gi_ci_sizes", U32s, MaxMIGProfiles, "bit c: holds compute instances of c slices"},
		{"mig_ci_sms", U32s, 8, "SMs of a c-slice compute instance smaller than its GPU instance, by c"},
		{"mig_gi_bar1_mib", U32s, MaxMIGProfiles, "BAR1 of its MIG devices from driver 580 on; 0: the GPU's share less 1 MiB"},
		{"mig_gi_used_mib", U32s, MaxMIGProfiles, "memory an idle instance shows used: the driver's"},
		{"mig_gi_names", Str, 8 * MaxMIGProfiles * 3, "profile names, each ended by a newline"},
		{"mig_pad", U32, 0, ""},
		{"display_mode", U32, 0, ""},
		{"display_active", U32, 0, ""},
		{"virtualization_mode", U32, 0, ""},
		{"performance_state", U32, 0, ""},
		{"power_state", U32, 0, "P-state of the power readings, or deprecated"},
		{"fan_speed", U32, 0, "%"},
		{"util_gpu", U32, 0, "%"},
		{"util_memory", U32, 0, "%"},
		{"util_encoder", U32, 0, "%"},
		{"util_decoder", U32, 0, "%"},
		{"util_jpeg", U32, 0, "%"},
		{"util_ofa", U32, 0, "%"},
		{"ecc_count", U32s, 8, "[volatile, aggregate][corrected, uncorrected][DRAM, SRAM]"},
		{"retired_pages", U32, 0, "1: supported"},
		{"remapped_rows", U32, 0, "1: supported"},
		{"remapper_banks", U32, 0, "histogram max"},
		{"accounting_mode", U32, 0, ""},
		{"accounting_buffer", U32, 0, ""},
		{"numa_node", U32, 0, ""},
		{"nvlink_count", U32, 0, "0: no NVLink"},
		{"nvlink_version", U32, 0, "nvmlNvlinkVersion_t"},
		{"nvlink_speed_mbps", U32, 0, "per link"},
		{"nvlink_remote", U32, 0, "nvmlIntNvLinkDeviceType_t"},
		{"nvlink_remote_device_id", U32, 0, "PCI id of the peer (switch)"},
		{"nvlink_remote_addr", U32s, 18, "per link: the NVSwitch's domain<<16 | bus<<8 | device<<3 | function; not available: not on the node"},
		{"nvlink_fw_count", U32, 0, "NVLink firmware images (nvmlDeviceGetNvLinkInfo); 0: the call is not supported"},
		{"nvlink_nvle", U32, 0, "NVLink encryption: 0 disabled, 1 enabled"},
		{"nvlink_fw", U32s, 4 * MaxNVLinkFirmware, "per image: ucode type, major, minor, subminor"},
		{"addressing_mode", U32, 0, "nvmlDeviceAddressingModeType_t"},
		{"sparse_mode", U32, 0, "sparse operation mode: 0 disabled, 1 enabled"},
		{"c2c_mode", U32, 0, "chip-to-chip link to the CPU: 0 disabled, 1 enabled"},
		{"c2c_links", U32, 0, "active C2C links; not available: not known"},
		{"c2c_link_mbps", U32, 0, "each C2C link's bandwidth, MB/s"},
		{"pcie_root", U32, 0, "the GPU's PCI host bridge, numbered over the node"},
		{"pcie_switch_top", U32, 0, "the top-most PCIe switch above the GPU, numbered over the node; not available: none"},
		{"pcie_switch_leaf", U32, 0, "the nearest PCIe switch above the GPU, numbered over the node; not available: none"},
		{"gpu_numa_node", U32, 0, "the GPU's own memory NUMA node (coherent boards); not available: none"},
		{"clock_reasons_supported", U32, 0, "nvmlClocksEventReason* bits"},
		{"memory_bus_width", U32, 0, "bits"},
		{"gpu_cores", U32, 0, "CUDA cores"},
		{"bus_type", U32, 0, "nvmlBusType_t"},
		{"power_source", U32, 0, "nvmlPowerSource_t"},
		{"egm", U32, 0, "extended GPU memory: 0 disabled, 1 enabled"},
		{"cpu_affinity", U64s, 16, "bit mask of CPUs"},
		{"cpu_affinity_socket", U64s, 16, "bit mask of the socket's CPUs"},
		{"numa_socket_mask", U64, 0, "bit mask of the socket's NUMA nodes"},
		{"numa_near_mask", U64, 0, "bit mask of the NUMA nodes nearest the GPU"},
		{"memory_total", U64, 0, "bytes"},
		{"memory_reserved", U64, 0, "bytes"},
		{"memory_used", U64, 0, "bytes"},
		{"bar1_total", U64, 0, "bytes"},
		{"bar1_used", U64, 0, "bytes"},
	}},
	{Name: "nic", Doc: "one NIC function: where it sits, for the PCIe path nvidia-smi topo -m asks between a GPU and a NIC", Fields: []Field{
		{"pci_domain", U32, 0, ""},
		{"pci_bdf", U32, 0, "bus<<8 | device<<3 | function"},
		{"pcie_root", U32, 0, "as the device's"},
		{"pcie_switch_top", U32, 0, "as the device's"},
		{"pcie_switch_leaf", U32, 0, "as the device's"},
		{"numa_node", U32, 0, "not available: none"},
	}},
}
