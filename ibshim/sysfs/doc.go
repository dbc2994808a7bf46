// Package sysfs renders the node's RDMA devices as the kernel shows them in
// /sys: class/infiniband, infiniband_mad and infiniband_verbs, each device
// under its PCI function of the pcisim tree, with values from the fabric.
package sysfs
