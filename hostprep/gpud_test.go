//go:build integration

package hostprep_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
	"github.com/nvmock/nvmock/live"
)

// gpud (v0.4.5), a GPU node health checker, scans a mock H100 node: its
// GPUs through NVML, and the kernel log, where it finds the XID that
// nvmock xidlog wrote as the driver would, once in /dev/kmsg (and in
// dmesg, when gpud reads all of it); then an uncorrectable ECC error,
// which it reports with the reset the pending row remap needs.
func TestGpudScansTheNodeAndFindsItsXIDInTheKernelLog(t *testing.T) {
	needRoot(t)
	kmsg := testenv.OpenKmsg(t)
	gpud := filepath.Join(testenv.CacheDir(), "bin", "gpud")
	if _, err := os.Stat(gpud); err != nil {
		testenv.Missing(t, "%s (run make deps, or hack/fetch-gpud.sh %s)", gpud, testenv.CacheDir())
	}
	res, _ := installNode(t, "h100", 2)
	state := filepath.Join(filepath.Dir(res.Driver), hostprep.StateFile)
	devs, err := live.Snapshot(state)
	if err != nil {
		t.Fatal(err)
	}
	line := fmt.Sprintf("NVRM: Xid (PCI:%04x:%02x:%02x): 45, Ch 00000001", devs[1].PCIDomain, devs[1].PCIBus, devs[1].PCIDevice)
	// gpud finds the GPUs in lspci's output, which it reads racing its
	// own Wait: when it loses every line (seen in CI under load) it skips
	// NVML altogether. Only that is scanned again.
	scan := func() string {
		var out string
		for try := 1; try <= 5; try++ {
			out = string(inNode(t, res, 2*time.Minute, cleanEnv(), gpud, "scan", "--netcheck=false", "--diskcheck=false"))
			if strings.Contains(out, "scanning nvidia accelerators") {
				break
			}
			t.Logf("gpud scan %d lost lspci's output and skipped NVML", try)
		}
		return out
	}
	before := scan()
	for _, want := range []string{"GPU count '2'", "GPU product name 'NVIDIA H100 80GB HBM3'", "driver version: 580.105.08",
		res.GPUs[0].UUID, res.GPUs[1].UUID, "Found no ecc volatile uncorrected error"} {
		if !strings.Contains(before, want) {
			t.Fatalf("gpud scan lacks %q:\n%s", want, before)
		}
	}

	stop, done, started := make(chan struct{}), make(chan error, 1), make(chan struct{})
	x := &live.XIDLog{State: state, Out: "/dev/kmsg", Logf: t.Logf, Started: func() { close(started) }}
	go func() { done <- x.Run(stop) }()
	defer func() { close(stop); <-done }()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("xidlog: %v", err)
	}
	f, err := live.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	written := time.Now()
	if err := f.Update(func(s *live.State, now int64) error { return s.XID(1, 45, now) }); err != nil {
		t.Fatal(err)
	}
	kmsg.Until(t, line, 10*time.Second)
	after := scan()
	// The same line from earlier runs may be in the kernel's ring, and may
	// leave it as the ring wraps: count only the lines gpud dates since
	// the XID was written.
	window := int(time.Since(written)/time.Second) + 1
	// The line in /dev/kmsg ([nvidia xid]), once.
	if n := countSince(after, "[nvidia xid]", line, window); n != 1 {
		t.Errorf("gpud scan lists [nvidia xid] %q %d times in the last %d s: want once\n%s", line, n, window, after)
	}
	// And in dmesg ([XID found]) at most once: gpud v0.4.5 reads dmesg's
	// output while another goroutine's exec Wait closes the pipe at the
	// exit, so the newest lines are sometimes lost (seen in CI: the XID in
	// /dev/kmsg, not in dmesg's output, which ends a few lines before).
	switch n := countSince(after, "[XID found]", line, window); n {
	case 0:
		t.Logf("gpud's dmesg scan lost its newest lines this time (its read races its Wait)")
	case 1:
	default:
		t.Errorf("gpud scan lists [XID found] %q %d times in the last %d s: want once\n%s", line, n, window, after)
	}

	// A double-bit error (nvmock ctl fault 1 ecc_uncorrectable): the
	// counts rise and a row remap is pending, which needs a reset.
	if strings.Contains(after, "needs a reset") {
		t.Fatalf("gpud says a GPU needs a reset before any fault:\n%s", after)
	}
	if err := f.Update(func(s *live.State, now int64) error {
		return s.AddFault(1, live.FaultOf(live.FaultECC, 0, 0, 0, 0), now)
	}); err != nil {
		t.Fatal(err)
	}
	faulted := scan()
	for _, want := range []string{"Found that the GPU needs a reset", "ecc volatile uncorrected error(s)", "uuid: " + res.GPUs[1].UUID} {
		if !strings.Contains(faulted, want) {
			t.Errorf("gpud scan after an uncorrectable ECC error on GPU 1 lacks %q:\n%s", want, faulted)
		}
	}
}

// countSince is the number of lines of gpud's out that start with tag,
// hold s, and are dated at most secs seconds away from the scan, in
// go-humanize's words: "(now)", "(1 second ago)", "(N seconds ago)".
func countSince(out, tag, s string, secs int) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(l, tag+" (")
		if !ok || !strings.Contains(l, s) {
			continue
		}
		age, _, _ := strings.Cut(rest, ")")
		if age == "now" {
			n++
			continue
		}
		var k int
		var unit, dir string
		if _, err := fmt.Sscanf(age, "%d %s %s", &k, &unit, &dir); err == nil && strings.HasPrefix(unit, "second") && k <= secs {
			n++
		}
	}
	return n
}
