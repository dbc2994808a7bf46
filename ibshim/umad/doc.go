// Package umad holds libnvmock-umad.so (umad.c), the LD_PRELOAD shim that
// turns /dev/infiniband/umadN into a connection to the fabric daemon so
// unmodified libibumad tools (smpquery, saquery, ibnetdiscover, ibping,
// opensm) exchange MADs with it, and the wire protocol both sides share
// (proto.h, mirrored in Go by proto.go). Its tests run those real tools
// against a fake daemon.
package umad
