package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/hostprep/nsexec"
	"github.com/nvmock/nvmock/pcisim"
)

// execChildArg is the hidden subcommand `nvmock exec` re-executes itself
// with, inside the new mount namespace.
const execChildArg = "__exec-child"

// execCmd runs a command on a mock node private to it: `nvmock exec
// [--profile P] [--gpus N] -- CMD ARGS...`. It exits with the command's
// status (128+n for signal n) once the temporary overlay is gone.
func execCmd(args []string) error {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	name := fs.String("profile", "a100", "built-in profile name or profile file")
	assets := fs.String("assets", "", "driver tree holding usr/lib64/libnvidia-ml.so.* and usr/bin/nvidia-smi\n(default $NVMOCK_ASSETS, else ../driver beside this binary)")
	var lf loadFlags
	lf.add(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("exec: no command given; use nvmock exec [--profile P] [--gpus N] -- CMD ARGS...")
	}
	p, seed, err := lf.load(*name)
	if err != nil {
		return err
	}
	if *assets == "" {
		if *assets, err = defaultAssets(); err != nil {
			return err
		}
	}
	// The PCI tree has thousands of files and depends only on the profile:
	// rendered once into the cache, not on every run.
	node, err := p.Node()
	if err != nil {
		return err
	}
	pci := pcisim.Files(node)
	sys, err := nsexec.Cached("pci-"+pcisim.Hash(pci), func(dir string) error { return pcisim.Write(pci, dir) })
	if err != nil {
		return fmt.Errorf("exec: PCI tree: %w", err)
	}
	render := func(dir string) (string, error) {
		ov, err := hostprep.Render(dir, hostprep.Options{
			Profile: p, NodeName: seed, Assets: *assets,
			// Without root the namespace cannot hold device nodes anyway.
			PlainDevFiles: os.Geteuid() != 0,
			NoPCI:         true,
		})
		if err != nil {
			return "", fmt.Errorf("render overlay: %w", err)
		}
		return filepath.Join(ov.Dir, "driver"), nil
	}
	status, err := nsexec.RunRendered(render, nsexec.Options{
		Args: fs.Args(),
		Sys:  sys,
		Self: []string{"/proc/self/exe", execChildArg},
		Note: func(s string) { fmt.Fprintln(os.Stderr, "nvmock: exec:", s) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "nvmock: exec:", err)
	}
	// The overlay is already removed; the status is the command's.
	if status != 0 {
		os.Exit(status)
	}
	return nil
}

// execChild is the re-executed half of execCmd; on success it becomes the
// command and does not return.
func execChild(args []string) error {
	return nsexec.Child(args)
}
