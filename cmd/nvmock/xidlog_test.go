package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestXIDLogRejectsBadArgumentsWithOneLine(t *testing.T) {
	state := ctlNode(t, "2")
	missing := filepath.Join(t.TempDir(), "state")
	log := filepath.Join(t.TempDir(), "xid.log")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"xidlog", "--state", state, "stray"}, `xidlog: unexpected argument "stray"`},
		{[]string{"xidlog", "--state", state, "--out", "/dev/null"}, "xidlog: /dev/null: a device other than the kernel log (/dev/kmsg is char 1:11)"},
		{[]string{"xidlog", "--state", state, "--out", t.TempDir()}, "not a file, a pipe or the kernel log"},
		{[]string{"xidlog", "--state", state, "--out", "/dev/kmsg-none"}, "/dev/kmsg-none: no such device here; the kernel log is /dev/kmsg, which only a privileged container sees"},
		{[]string{"xidlog", "--state", missing, "--out", filepath.Join(t.TempDir(), "log")}, "xidlog: state " + missing + ": no such file"},
		// Review: the cursor overwrote the lines.
		{[]string{"xidlog", "--state", state, "--out", log, "--cursor", log}, "xidlog: --out and --cursor are one file, " + log + "; give each its own"},
		{[]string{"xidlog", "--state", state, "--out", state}, "xidlog: --out and the state are one file"},
	} {
		err := run(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("nvmock %s: %v, want one line with %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}
