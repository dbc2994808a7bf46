// Command nvmlgen writes the generated parts of libnvml from go-nvml's nvml.h.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nvmock/nvmock/libnvml/gen"
)

func main() {
	header := flag.String("header", "", "path to go-nvml's nvml.h")
	out := flag.String("out", "libnvml", "libnvml source directory")
	flag.Parse()
	if err := run(*header, *out); err != nil {
		fmt.Fprintln(os.Stderr, "nvmlgen:", err)
		os.Exit(1)
	}
}

func run(header, out string) error {
	if header == "" {
		return fmt.Errorf("-header is required")
	}
	files, err := gen.Generate(header)
	if err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
