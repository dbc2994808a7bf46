// Package inject decides, in one pure function, what the NRI plugin changes
// in a container on a mock GPU node: whether the container is injected, which
// GPUs it gets, and the mounts, device nodes and environment that give them.
// It knows nothing of NRI's types; a later package converts an Adjustment.
package inject
