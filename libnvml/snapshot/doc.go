// Package snapshot compiles a validated profile into the fixed-layout file
// the C library maps read-only, and derives each GPU's identity (UUID,
// serial, PCI bus id) from the profile, the node seed and the GPU index.
package snapshot
