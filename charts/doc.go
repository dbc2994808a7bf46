// Package charts holds nvmock's Helm chart (charts/nvmock) and its tests,
// which render it with the Helm Go SDK, decode every object strictly into
// k8s.io/api types and compare the result with golden files. It has no code
// of its own.
package charts
