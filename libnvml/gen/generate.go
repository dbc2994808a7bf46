package gen

import (
	"fmt"
	"os"
)

// Generate reads nvml.h and returns the generated files by path relative
// to the libnvml directory.
func Generate(header string) (map[string][]byte, error) {
	src, err := os.ReadFile(header)
	if err != nil {
		return nil, fmt.Errorf("read nvml.h: %w", err)
	}
	funcs, err := ParseHeader(string(src))
	if err != nil {
		return nil, err
	}
	snapC, err := SnapshotC()
	if err != nil {
		return nil, err
	}
	snapGo, err := SnapshotGo()
	if err != nil {
		return nil, err
	}
	stateC, err := StateC()
	if err != nil {
		return nil, err
	}
	stateGo, err := StateGo()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"state_gen.h":            stateC,
		"../live/layout_gen.go":  stateGo,
		"exports_gen.txt":        Exports(funcs),
		"defaults_gen.c":         Defaults(funcs),
		"test/c/torture_gen.c":   Torture(funcs),
		"snapshot_gen.h":         snapC,
		"snapshot/layout_gen.go": snapGo,
	}, nil
}
