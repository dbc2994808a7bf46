// Package hostprep renders the mock node overlay (driver library and
// nvidia-smi under a driver root, inert device nodes, /proc/driver/nvidia,
// the compiled snapshot, a CDI spec, an NFD feature file) and installs it on
// a node atomically and idempotently. The same rendering serves `nvmock exec`.
package hostprep
