// Package ibshim holds what the InfiniBand planes share: where the umad
// shim and the verbs provider live in a driver tree, and the environment
// that gives a program the node's fabric. Its packages build the fabric
// (fabric), render sysfs (sysfs) and answer MADs (ibd).
package ibshim
