// Package live is the node's live GPU state: loads that move the readings,
// injected faults, XID events and running processes. It lives in one small
// file beside the snapshot that every process using the mock library maps
// and reads without locks (a seqlock); only nvmock's own tools write it,
// through this package.
package live

// FieldOffset pins one field of a record.
type FieldOffset struct {
	C, Go  string
	Offset uintptr
}
