// Package nsexec runs a command in a private mount namespace where a rendered
// driver overlay appears at a real node's standard places: the library in
// the dynamic loader's cache, nvidia-smi on PATH, /dev/nvidia* and
// /proc/driver/nvidia. The host sees no change. It serves `nvmock exec`.
package nsexec
