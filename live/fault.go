package live

import (
	"fmt"
	"runtime/debug"
)

// GuardFaults makes a fault on memory (a state file cut short in place
// under its mapping, a SIGBUS) panic in the calling goroutine, instead of
// ending the process, until the returned function runs. Pair it with
// FaultError in a deferred recover:
//
//	defer live.GuardFaults()()
//	defer func() {
//		if r := recover(); r != nil {
//			err = live.FaultError(r, path)
//		}
//	}()
func GuardFaults() (restore func()) {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}

// FaultError is the error for a fault GuardFaults turned into a panic;
// any other panic goes on.
func FaultError(r any, path string) error {
	if _, fault := r.(interface{ Addr() uintptr }); !fault {
		panic(r)
	}
	return fmt.Errorf("state %s: cut short while in use (%v); make it again with nvmock ctl create", path, r)
}
