// Package pcisim renders a node's PCI tree as the kernel shows it in sysfs:
// /sys/devices/pciDDDD:BB/... with root ports, switch ports and endpoints,
// /sys/bus/pci/devices links, drivers and IOMMU groups, each function with
// its attribute files and a binary config space that lspci and hwloc
// decode. Package expose shows a rendered tree at a sysfs mount.
package pcisim
