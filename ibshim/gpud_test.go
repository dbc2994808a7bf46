//go:build integration

package ibshim_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// gpud (v0.4.5), a GPU node health checker, checks a node's InfiniBand as
// for a DGX H100 (at least 8 ports up at 400 Gb/s, by ibstat): the mock
// node passes, and with five cables out it fails, naming those ports as
// Polling, as a real port without a link shows.
func TestGpudsInfiniBandCheckSeesPortsGoDown(t *testing.T) {
	gpud := filepath.Join(testenv.CacheDir(), "bin", "gpud")
	if _, err := os.Stat(gpud); err != nil {
		testenv.Missing(t, "%s (run make deps, or hack/fetch-gpud.sh %s)", gpud, testenv.CacheDir())
	}
	// gpud finds the GPUs in lspci's output, which it reads racing its
	// own Wait; when it loses every line it skips its NVIDIA checks, this
	// one among them (seen in CI under load). Only that is scanned again.
	scan := `for try in 1 2 3 4 5; do out=$(` + gpud + ` scan --check-ib --netcheck=false --diskcheck=false 2>&1)
	case $out in *"ibstat ports"*) break;; esac
done
printf '%s\n' "$out" | grep 'ibstat ports'`
	healthy := nodeOf(t, "h100", "ibstat; echo ==; "+scan)
	listing, verdict, _ := strings.Cut(healthy, "==\n")
	if !strings.Contains(verdict, "ibstat ports/rates check passed (at least ports: 8, rate: 400)") {
		t.Fatalf("gpud on a healthy node:\n%s", verdict)
	}
	// The ports up at 400 Gb/s, and the first five InfiniBand HCAs (the
	// Ethernet ones are in no fabric, and take no port fault).
	upPorts, ib := 0, []string(nil)
	for _, ca := range regexp.MustCompile(`(?m)^CA '`).Split(listing, -1)[1:] {
		name := ca[:strings.IndexByte(ca, '\'')]
		if strings.Contains(ca, "Physical state: LinkUp") && strings.Contains(ca, "Rate: 400\n") {
			upPorts++
		}
		if strings.Contains(ca, "Link layer: InfiniBand") && len(ib) < 5 {
			ib = append(ib, name)
		}
	}
	var faults []string
	for _, h := range ib {
		faults = append(faults, "--ib-fault", h+"=down")
	}
	broken := nodeOf(t, "h100", scan, faults...)
	want := fmt.Sprintf("only %d ports (>= 400 Gb/s) are active, expect at least 8; 5 device(s) found Polling (%s)", upPorts-5, strings.Join(ib, ", "))
	if !strings.Contains(broken, "ibstat ports/rates check failed") || !strings.Contains(broken, want) {
		t.Errorf("gpud with %v down:\n%s\nwant it to fail with %q", ib, broken, want)
	}
}
