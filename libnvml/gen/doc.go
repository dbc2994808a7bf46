// Package gen reads go-nvml's nvml.h, the ABI source of truth, and writes
// the library's export list and its default (not supported) function bodies.
package gen
