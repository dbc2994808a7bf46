package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/ibshim/fabric"
)

// ctlIB changes the node's InfiniBand port faults while it runs: `ib`
// lists them; `ib down HCA`, `ib up HCA`, `ib errors HCA COUNTER:N,...`,
// `ib clear [HCA]` change them (docs/infiniband.md).
func ctlIB(statePath string, args []string, out io.Writer) error {
	faults, err := hostprep.IBFaults(statePath)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		if len(faults) == 0 {
			fmt.Fprintln(out, "no InfiniBand port faults")
		}
		for _, ft := range faults {
			fmt.Fprintln(out, ft)
		}
		return nil
	}
	verb, rest := args[0], args[1:]
	usage, ok := map[string]string{"down": "HCA", "up": "HCA", "errors": "HCA COUNTER:N,...", "clear": "[HCA]"}[verb]
	switch {
	case !ok:
		return fmt.Errorf("unknown command %q; use down HCA, up HCA, errors HCA COUNTER:N,..., or clear [HCA]", verb)
	case verb == "clear" && len(rest) > 1, verb != "clear" && len(rest) != len(strings.Fields(usage)):
		return fmt.Errorf("use ib %s %s", verb, usage)
	}
	return hostprep.UpdateIBFaults(statePath, func(f *fabric.Fabric, faults []fabric.Fault) ([]fabric.Fault, error) {
		return changeIB(f, faults, verb, rest)
	})
}

// changeIB is faults after the ib command verb with its arguments rest.
func changeIB(f *fabric.Fabric, faults []fabric.Fault, verb string, rest []string) ([]fabric.Fault, error) {
	if len(rest) > 0 {
		if err := f.Apply([]fabric.Fault{{HCA: rest[0]}}); err != nil {
			return nil, err
		}
	}
	// One fault a port: a fault naming this node is this node's (the
	// chart gives every node the fleet's, node-qualified), and installs
	// before Merge could list a port twice.
	var merged []fabric.Fault
	for _, ft := range faults {
		if ft.Node == f.Hosts[f.Local] {
			ft.Node = ""
		}
		merged = fabric.Merge(merged, ft)
	}
	faults = merged
	at := func(hca string) *fabric.Fault {
		for i := range faults {
			if faults[i].HCA == hca && faults[i].Node == "" {
				return &faults[i]
			}
		}
		faults = append(faults, fabric.Fault{HCA: hca})
		return &faults[len(faults)-1]
	}
	switch verb {
	case "down":
		ft := at(rest[0])
		if !ft.Down {
			// The PMA counts each time the link goes down.
			ft.Down = true
			setCounter(ft, "link_downed", min(ft.Counters["link_downed"]+1, 0xff))
		}
	case "up":
		at(rest[0]).Down = false
	case "errors":
		parsed, err := fabric.ParseFault(rest[0] + "=" + rest[1])
		if err != nil {
			return nil, err
		}
		if parsed.Down {
			return nil, fmt.Errorf("%q: down is its own command (ib down %s)", rest[1], rest[0])
		}
		ft := at(rest[0])
		for k, v := range parsed.Counters {
			setCounter(ft, k, v)
		}
	case "clear":
		faults = slices.DeleteFunc(faults, func(ft fabric.Fault) bool { return ft.Node == "" && (len(rest) == 0 || ft.HCA == rest[0]) })
	}
	return slices.DeleteFunc(faults, func(ft fabric.Fault) bool { return !ft.Down && len(ft.Counters) == 0 }), nil
}

func setCounter(ft *fabric.Fault, name string, v uint64) {
	if ft.Counters == nil {
		ft.Counters = map[string]uint64{}
	}
	ft.Counters[name] = v
}
