// Package gonvml holds the go-nvml test client: the real consumer library
// loading the built mock. Its tests (build tag integration) check every
// getter against the profile the snapshot was compiled from, and init,
// visibility and identity through NVIDIA's own Go bindings.
package gonvml
