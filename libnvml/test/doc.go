// Package test holds the tests that drive the library from C and Python:
// the ABI torture (also under AddressSanitizer), and forked children of
// threaded processes. The C sources live in c/, away from the Go tool.
package test
