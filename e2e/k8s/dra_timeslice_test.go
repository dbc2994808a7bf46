//go:build k8s

package k8s

import (
	"regexp"
	"slices"
	"testing"
	"time"
)

// testTimeSlicing: with the driver's TimeSlicingSettings gate, a claim
// whose GpuConfig asks for time-slicing with the Long interval makes the
// kubelet plugin run nvidia-smi -c DEFAULT and compute-policy
// --set-timeslice on the allocated GPU when it prepares the claim (in its
// privileged container, as on a real node): the host's nvidia-smi shows
// that GPU's timeslice Long while the pod runs, and Default again once the
// claim is unprepared.
func (d *draEnv) testTimeSlicing(t *testing.T) {
	c := d.c
	d.withFeatureGates(t, map[string]any{"TimeSlicingSettings": true})
	timeslices := func() []string {
		t.Helper()
		var v []string
		for _, m := range regexp.MustCompile(`\|\s+\d+\s+Timeslice\s+(\S+)\s+\|`).FindAllStringSubmatch(c.mustSMI(t, "compute-policy", "-l"), -1) {
			v = append(v, m[1])
		}
		if len(v) != len(d.gpus) {
			t.Fatalf("compute-policy -l on the node lists %d timeslices, want %d: %v", len(v), len(d.gpus), v)
		}
		return v
	}
	all := slices.Repeat([]string{"Default"}, len(d.gpus))
	if got := timeslices(); !slices.Equal(got, all) {
		t.Fatalf("timeslices before the claim: %v, want Default on every GPU", got)
	}

	ns := d.namespace(t, true)
	c.draCreateTemplate(t, ns, draSharingTemplate("long-slices", `{"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}`))
	out := c.running(t, ns, c.draPod("long", draGPUScript, "long-slices"), "started")
	seen := d.seesItsAllocation(t, ns, "long", out)
	if len(seen) != 1 {
		t.Fatalf("the pod sees %v, want one GPU", seen)
	}
	want := slices.Clone(all)
	for i, g := range d.gpus {
		if g.uuid == seen[0] {
			want[i] = "Long"
		}
	}
	if got := timeslices(); !slices.Equal(got, want) {
		t.Errorf("timeslices while the pod runs: %v, want %v (Long on its GPU %s)", got, want, seen[0])
	}

	c.deletePod(ns, "long")
	deadline := time.Now().Add(2 * time.Minute)
	for got := timeslices(); !slices.Equal(got, all); got = timeslices() {
		if time.Now().After(deadline) {
			t.Fatalf("timeslices after the pod went: %v, want Default again%s", got, c.podLogs(draNS, ""))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
