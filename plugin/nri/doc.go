// Package nri runs the injection decision (plugin/inject) as an NRI plugin:
// it wires containerd/nri's stub to inject.Decide, keeps the node state and
// the GPU use counts the decision needs, reconnects when the runtime goes
// away, and serves health and Prometheus metrics. Nothing it does may block
// a pod: on any error a container starts untouched.
package nri
