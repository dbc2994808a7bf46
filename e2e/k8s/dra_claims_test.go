//go:build k8s

package k8s

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nvmock/nvmock/internal/testenv"
)

// ResourceClaims and the pods that use them, for TestDRADriver's checks.

// draTemplate is a ResourceClaimTemplate for count GPUs of the driver's
// class, with a CEL selector if cel is not empty.
func draTemplate(name, cel string, count int64) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: draClaimSpec(cel, count)},
	}
}

// draSharingTemplate is a ResourceClaimTemplate for one GPU with the
// driver's GpuConfig asking for sharing (its JSON).
func draSharingTemplate(name, sharing string) *resourcev1.ResourceClaimTemplate {
	tmpl := draTemplate(name, "", 1)
	tmpl.Spec.Spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{
		Requests: []string{"gpu"},
		DeviceConfiguration: resourcev1.DeviceConfiguration{Opaque: &resourcev1.OpaqueDeviceConfiguration{
			Driver:     draGPUDriver,
			Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": ` + sharing + `}`)},
		}},
	}}
	return tmpl
}

func draClaimSpec(cel string, count int64) resourcev1.ResourceClaimSpec {
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: draGPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	if cel != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: cel}}}
	}
	return resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: req}}}}
}

// draPod is a pod of the glibc test image whose container uses the claims:
// template names (from a ResourceClaimTemplate) or, prefixed "claim:",
// ResourceClaim names.
func (c *cluster) draPod(name, script string, claims ...string) *corev1.Pod {
	p := c.pod(name, script, 0)
	for i, cl := range claims {
		rc := corev1.PodResourceClaim{Name: fmt.Sprintf("gpu%d", i)}
		if n, ok := strings.CutPrefix(cl, "claim:"); ok {
			rc.ResourceClaimName = &n
		} else {
			rc.ResourceClaimTemplateName = &cl
		}
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, rc)
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: rc.Name})
	}
	return p
}

func (c *cluster) draCreateTemplate(t testing.TB, ns string, tmpl *resourcev1.ResourceClaimTemplate) {
	t.Helper()
	if _, err := c.cs.ResourceV1().ResourceClaimTemplates(ns).Create(ctxT(t, 10*time.Second), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceClaimTemplate %s/%s: %v", ns, tmpl.Name, err)
	}
}

func (c *cluster) draCreateClaim(t testing.TB, ns, name string, spec resourcev1.ResourceClaimSpec) {
	t.Helper()
	cl := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if _, err := c.cs.ResourceV1().ResourceClaims(ns).Create(ctxT(t, 10*time.Second), cl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ResourceClaim %s/%s: %v", ns, name, err)
	}
}

// allocated are the UUIDs of the GPUs the scheduler allocated to a pod's
// claims, in the order of its spec, read from the claims' allocation and
// the ResourceSlices (device name -> uuid attribute).
func (d *draEnv) allocated(t testing.TB, ns, pod string) []string {
	t.Helper()
	c := d.c
	ctx := ctxT(t, 10*time.Second)
	p, err := c.cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	devs, err := c.draSlices(ctx, draGPUDriver)
	if err != nil {
		t.Fatal(err)
	}
	uuidOf := map[string]string{}
	for _, dev := range devs {
		if a, ok := dev.Attributes["uuid"]; ok && a.StringValue != nil {
			uuidOf[dev.Name] = *a.StringValue
		}
	}
	var uuids []string
	for _, rc := range p.Spec.ResourceClaims {
		name := ""
		if rc.ResourceClaimName != nil {
			name = *rc.ResourceClaimName
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == rc.Name && s.ResourceClaimName != nil {
				name = *s.ResourceClaimName
			}
		}
		cl, err := c.cs.ResourceV1().ResourceClaims(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: claim %s (%q): %v", pod, rc.Name, name, err)
		}
		if cl.Status.Allocation == nil {
			t.Fatalf("pod %s: claim %s is not allocated", pod, name)
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if r.Driver != draGPUDriver || r.Pool != c.node {
				t.Errorf("claim %s: device %s/%s/%s, want one of %s on %s", name, r.Driver, r.Pool, r.Device, draGPUDriver, c.node)
			}
			uuids = append(uuids, uuidOf[r.Device])
		}
	}
	return uuids
}

// seesItsAllocation checks that a pod printed (nvidia-smi -L) exactly the
// GPUs the scheduler allocated to it, each as the node's nvidia-smi names
// it, renumbered from 0 in node order, and returns their UUIDs.
func (d *draEnv) seesItsAllocation(t testing.TB, ns, pod, out string) []string {
	t.Helper()
	seen, alloc := uuidsIn(out), d.allocated(t, ns, pod)
	if len(seen) == 0 || !draSameSet(seen, alloc) {
		t.Errorf("pod %s sees %v; the scheduler allocated %v. It printed:\n%s", pod, seen, alloc, out)
		return seen
	}
	var want []string
	for _, g := range d.gpus {
		if slices.Contains(seen, g.uuid) {
			_, rest, _ := strings.Cut(g.line, ": ")
			want = append(want, fmt.Sprintf("GPU %d: %s", len(want), rest))
		}
	}
	if got := testenv.Lines(out); !slices.Equal(got[:min(len(got), len(want))], want) {
		t.Errorf("pod %s printed:\n%s\nwant first:\n%s", pod, out, strings.Join(want, "\n"))
	}
	return seen
}

func draSameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// namespace is a namespace for one subtest (c.namespace); when the subtest
// ends, after its pods and the namespace are deleted, it waits until the
// GPU plugin has unprepared every claim. The tests delete pods at once
// (grace period 0): the API frees a claim's GPU then, before the kubelet
// has unprepared it, and the next subtest's claim could get that GPU while
// the plugin still holds it for the old claim; the plugin refuses ("already
// allocated to different claim") and the kubelet retries the prepare with
// back-off, about a minute. Subtests run one at a time, so none is left.
func (d *draEnv) namespace(t *testing.T, optedIn bool) string {
	t.Helper()
	t.Cleanup(func() {
		if err := d.c.draWaitUnprepared(t, 2*time.Minute); err != nil {
			t.Error(err)
		}
	})
	return d.c.namespace(t, optedIn)
}

// draWaitUnprepared waits until the GPU plugin's checkpoint lists no claim.
func (c *cluster) draWaitUnprepared(t testing.TB, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		left := c.draPrepared(t)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("claims still prepared %v after their pods were deleted: %v", timeout, left)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
