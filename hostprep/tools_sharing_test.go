//go:build integration

package hostprep_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nvmock/nvmock/internal/testenv"
)

// timeSlicing is the device plugin's and GFD's configuration for four
// replicas of each GPU, as NVIDIA's documentation gives it.
const timeSlicing = `version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
`

// sharingCaseEnv marks the re-executed test binary's run in a private
// mount namespace.
const sharingCaseEnv = "NVMOCK_TEST_SHARING_CASE"

// Time-slicing on a mock node, as CI of shared-GPU setups runs it: the
// device plugin offers each GPU four times, Allocate gives a container each
// GPU once however many of its replicas it got, and GFD labels the node
// shared.
func TestTheDevicePluginSharesEachGPUByTimeSlicing(t *testing.T) {
	if os.Getenv(sharingCaseEnv) != "" {
		timeSlicingInNamespace(t)
		return
	}
	inMountNamespace(t, devicePluginHost(t), sharingCaseEnv+"=1")
}

func timeSlicingInNamespace(t *testing.T) {
	privateKubeletDir(t)
	dp := nvidiaTool(t, "nvidia-device-plugin")
	gfd := nvidiaTool(t, "gpu-feature-discovery")
	res, p := installNode(t, "h100", 2)
	config := filepath.Join(t.TempDir(), "config.yaml")
	must(t, os.WriteFile(config, []byte(timeSlicing), 0o644))

	kubelet := startKubelet(t, pluginapi.KubeletSocket)
	logs, exited := startDevicePlugin(t, dp, res, "--config-file", config)

	reg := kubelet.waitRegister(t, time.Minute, exited, logs.String)
	if reg.ResourceName != "nvidia.com/gpu" {
		t.Fatalf("registered %s, want nvidia.com/gpu (time-slicing keeps the name unless renameByDefault)", reg.ResourceName)
	}
	plugin := dialPlugin(t, filepath.Join(pluginapi.DevicePluginPath, reg.Endpoint))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := plugin.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatalf("ListAndWatch: %v\n%s", err, logs.String())
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("ListAndWatch: %v\n%s", err, logs.String())
	}
	var got, want []string
	for _, d := range first.Devices {
		got = append(got, d.ID+" "+d.Health)
	}
	for _, id := range res.GPUs {
		for r := range 4 {
			want = append(want, fmt.Sprintf("%s::%d %s", id.UUID, r, pluginapi.Healthy))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ListAndWatch devices:\n  %v\nwant four replicas of each mock GPU:\n  %v", got, want)
	}

	// Two replicas of GPU 0 and one of GPU 1: each GPU once.
	a, b := res.GPUs[0].UUID, res.GPUs[1].UUID
	alloc, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIDs: []string{a + "::1", a + "::3", b + "::0"}}},
	})
	if err != nil {
		t.Fatalf("Allocate: %v\n%s", err, logs.String())
	}
	if env := alloc.ContainerResponses[0].Envs["NVIDIA_VISIBLE_DEVICES"]; env != a+","+b {
		t.Errorf("Allocate of two replicas of GPU 0 and one of GPU 1: NVIDIA_VISIBLE_DEVICES=%q, want %q", env, a+","+b)
	}

	dir := t.TempDir()
	labels := filepath.Join(dir, "labels")
	mt := filepath.Join(dir, "product_name")
	must(t, os.WriteFile(mt, []byte("NVIDIA DGX H100\n"), 0o644))
	out := inNode(t, res, 2*time.Minute, toolEnv(res), gfd, "--oneshot", "--no-timestamp",
		"--output-file", labels, "--machine-type-file", mt, "--config-file", config)
	l := readLabels(t, labels)
	product := strings.ReplaceAll(p.Board.ProductName, " ", "-") + "-SHARED"
	for k, v := range map[string]string{
		"nvidia.com/gpu.product":          product,
		"nvidia.com/gpu.replicas":         "4",
		"nvidia.com/gpu.sharing-strategy": "time-slicing",
		"nvidia.com/gpu.count":            "2",
	} {
		if l[k] != v {
			t.Errorf("GFD label %s=%q, want %q\nall labels: %v\n%s", k, l[k], v, l, out)
		}
	}
}

// mps is the configuration for two MPS replicas of each GPU.
const mps = `version: v1
sharing:
  mps:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
`

// GFD given an MPS configuration labels the node mps.capable, the label
// NVIDIA's chart runs its MPS control daemon on, and refuses a node with
// a GPU in MIG mode, as on a real one.
func TestGFDLabelsANodeMPSCapableUnlessAGPUIsInMIGMode(t *testing.T) {
	needRoot(t)
	gfd := nvidiaTool(t, "gpu-feature-discovery")
	config := filepath.Join(t.TempDir(), "config.yaml")
	must(t, os.WriteFile(config, []byte(mps), 0o644))
	for _, c := range []struct{ name, layout string }{{"whole GPUs", ""}, {"a GPU in MIG mode", "1=7g.40gb"}} {
		t.Run(c.name, func(t *testing.T) {
			o := newSite(t).options(testenv.Profile(t, "a100", 2), realAssets(t))
			o.Render.MIG = c.layout
			res := install(t, o)
			labels := filepath.Join(t.TempDir(), "labels")
			out, status := inNodeStatus(t, res, 2*time.Minute, toolEnv(res), gfd,
				"--oneshot", "--no-timestamp", "--output-file", labels, "--config-file", config)
			if c.layout != "" {
				if status == 0 || !strings.Contains(string(out), "MPS sharing is not supported for mig devices") {
					t.Errorf("gpu-feature-discovery with MPS on a node with a MIG GPU: status %d, want a failure saying MPS is not supported for MIG devices:\n%s", status, out)
				}
				return
			}
			if status != 0 {
				t.Fatalf("gpu-feature-discovery: status %d\n%s", status, out)
			}
			l := readLabels(t, labels)
			for k, v := range map[string]string{
				"nvidia.com/mps.capable":          "true",
				"nvidia.com/gpu.sharing-strategy": "mps",
				"nvidia.com/gpu.replicas":         "2",
				"nvidia.com/gpu.product":          "NVIDIA-A100-SXM4-40GB-SHARED",
			} {
				if l[k] != v {
					t.Errorf("GFD label %s=%q, want %q\nall labels: %v\n%s", k, l[k], v, l, out)
				}
			}
		})
	}
}
