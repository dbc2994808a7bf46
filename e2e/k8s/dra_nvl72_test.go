//go:build k8s

package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A ComputeDomain on an NVL72 tray (gb200: a multi-node NVLink clique): the
// DRA driver's daemon pod runs the driver root's nvidia-imex (nvmock's,
// imex/imex.c) and probes it with nvidia-imex-ctl -q until READY; the
// ComputeDomain becomes Ready, and the pod that claims its channel gets
// the IMEX channel's device node, as on a real tray. Before nvidia-imex
// was in the overlay, the daemon pod never became Ready.
func TestAComputeDomainOnAnNVL72TrayGetsItsIMEXChannel(t *testing.T) {
	c := theCluster
	t.Cleanup(func() {
		if err := c.installNvmock(context.Background(), c.nvmockValues(nil)); err != nil {
			t.Errorf("restore the suite's values: %v", err)
		}
	})
	if err := c.installNvmock(ctxT(t, 4*time.Minute), c.nvmockValues(map[string]any{"pools": []any{map[string]any{"name": nvmockPool, "profile": "gb200"}}})); err != nil {
		t.Fatal(err)
	}
	d := draDeploy(t, c)
	if !d.computeDomains {
		t.Fatalf("the gb200 overlay has no %s", c.draProcDevices())
	}
	if err := c.draWaitSlices(ctxT(t, time.Minute), draCDDriver, 2); err != nil {
		t.Fatal(err)
	}

	ns := d.namespace(t, false)
	dyn, label := c.draComputeDomain(t, ns, "nvl72", 1)

	const script = "ls /dev/nvidia-caps-imex-channels 2>&1; echo started; exec sleep 3600"
	c.create(t, ns, c.draPod("imex", script, "nvl72-channel"))
	c.waitPod(t, ns, "imex", 3*time.Minute, "Running", podRunning)
	if out := c.waitLog(t, ns, "imex", "started"); out != "channel0\nstarted\n" {
		t.Errorf("the ComputeDomain's pod on a tray with a clique lists:\n%swant its channel, channel0", out)
	}

	// The daemon pod: Ready only once nvidia-imex-ctl -q printed READY.
	ctx := ctxT(t, 2*time.Minute)
	var daemon string
	for daemon == "" {
		pods, err := c.cs.CoreV1().Pods(draNS).List(ctx, metav1.ListOptions{LabelSelector: label})
		if err == nil && len(pods.Items) == 1 {
			if ok, _ := podReady(&pods.Items[0]); ok {
				daemon = pods.Items[0].Name
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no Ready IMEX daemon pod of the ComputeDomain (%s)%s", label, c.podLogs(draNS, label))
		case <-time.After(500 * time.Millisecond):
		}
	}
	if log := c.logs(t, draNS, daemon, ""); !strings.Contains(log, "IMEX daemon (nvmock) ready") {
		t.Errorf("the daemon pod's log has no line of nvmock's nvidia-imex:\n%s", tail(log, 30))
	}
	for {
		got, err := dyn.Resource(draComputeDomains).Namespace(ns).Get(ctx, "nvl72", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, _, _ := unstructured.NestedString(got.Object, "status", "status")
		if st == "Ready" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ComputeDomain status %q, want Ready", st)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
