// Package fidelity scores a mock's `nvidia-smi -q -x` against a real capture
// of the same board: both documents are reduced to the leaf fields of their
// first <gpu>, each field both print is classed as identity, dynamic or
// static, and the score is the share of static fields whose text matches.
// Its rules are those of the original Python tool (shared/tools/nvsmi-fidelity),
// against which its results on the real captures were cross-checked.
package fidelity
