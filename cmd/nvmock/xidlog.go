package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/nvmock/nvmock/live"
)

const xidlogUsage = "Usage: nvmock xidlog [flags]\n" +
	"  Writes the XIDs of the node's GPUs to the kernel log, as the driver does, until\n" +
	"  SIGINT or SIGTERM: nvmock ctl xid's, and node-wide faults' as they take effect.\n"

func xidlogCmd(args []string) error {
	fs := flag.NewFlagSet("xidlog", flag.ContinueOnError)
	state := fs.String("state", "", "the node's state file (default: as nvmock ctl finds it)")
	out := fs.String("out", "/dev/kmsg", "the kernel log, or a file to append the lines to")
	cursor := fs.String("cursor", "", "a file to keep the place in, locked while this runs: another xidlog\n"+
		"waits for this one to end and goes on from there (the chart's rolling update)")
	if err := parseFlags(fs, args, os.Stdout, xidlogUsage); err != nil {
		return helpShown(err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("xidlog: unexpected argument %q", fs.Arg(0))
	}
	path, err := live.Find(*state)
	if err != nil {
		return fmt.Errorf("xidlog: %w", err)
	}
	// One file in two roles: the cursor would overwrite the lines, or the
	// lines the state (review: the lines were lost).
	files := []struct{ flag, path string }{{"--out", *out}, {"--cursor", *cursor}, {"the state", path}}
	for i, a := range files {
		for _, b := range files[i+1:] {
			if a.path != "" && b.path != "" && sameFile(a.path, b.path) {
				return fmt.Errorf("xidlog: %s and %s are one file, %s; give each its own", a.flag, b.flag, a.path)
			}
		}
	}
	log := logrus.New()
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigs; close(stop) }()
	x := &live.XIDLog{State: path, Out: *out, Cursor: *cursor, Logf: log.Warnf}
	if err := x.Run(stop); err != nil {
		return fmt.Errorf("xidlog: %w", err)
	}
	return nil
}
