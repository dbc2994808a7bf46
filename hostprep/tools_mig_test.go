//go:build integration

package hostprep_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/internal/testenv"
)

// nvidia-ctk lists the MIG devices of a partitioned node in its CDI spec,
// by GPU:MIG index and by MIG UUID, each with its GPU's node and the two
// capability nodes mig-minors names for its GPU and compute instance.
func TestNvidiaCTKGeneratesCDIDevicesForEveryMIGDevice(t *testing.T) {
	needRoot(t)
	ctk := nvidiaTool(t, "nvidia-ctk")
	o := newSite(t).options(testenv.Profile(t, "a100", 2), realAssets(t))
	o.Render.MIG = "0=all-balanced;1=7g.40gb"
	res := install(t, o)
	root, err := filepath.EvalSymlinks(res.Driver)
	if err != nil {
		t.Fatal(err)
	}
	// The MIG devices as nvidia-smi -L shows them: GPU, index, UUID, and
	// the GPU and compute instance ids from -q's MIG sections.
	type mig struct{ gpu, index, gi, ci int }
	uuids := map[string]mig{}
	smi := filepath.Join(root, "usr", "bin", "nvidia-smi")
	list := string(runTool(t, time.Minute, toolEnv(res), smi, "-L"))
	for gpu, part := range strings.Split(list, "GPU ")[1:] {
		q := string(runTool(t, time.Minute, toolEnv(res), smi, "-q", "-i", fmt.Sprint(gpu)))
		ids := regexp.MustCompile(`GPU Instance ID\s+: (\d+)\n\s+Compute Instance ID\s+: (\d+)`).FindAllStringSubmatch(q, -1)
		for i, m := range regexp.MustCompile(`Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]+)\)`).FindAllStringSubmatch(part, -1) {
			var d mig
			fmt.Sscan(m[1], &d.index)
			fmt.Sscan(ids[i][1], &d.gi)
			fmt.Sscan(ids[i][2], &d.ci)
			d.gpu = gpu
			uuids[m[2]] = d
		}
	}
	if len(uuids) != 5 {
		t.Fatalf("%d MIG devices in nvidia-smi, want 5: %v", len(uuids), uuids)
	}

	out := filepath.Join(t.TempDir(), "nvidia.yaml")
	log := inNode(t, res, 2*time.Minute, cleanEnv(), ctk, "cdi", "generate", "--driver-root", root, "--dev-root", root, "--output", out)
	spec, err := cdi.ReadSpec(out, 0)
	if err != nil {
		t.Fatalf("read the generated spec: %v\nnvidia-ctk said:\n%s", err, log)
	}
	for uuid, d := range uuids {
		want := []string{
			fmt.Sprintf("/dev/nvidia%d", d.gpu),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", hostprep.MIGCapMinor(d.gpu, d.gi, -1)),
			fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", hostprep.MIGCapMinor(d.gpu, d.gi, d.ci)),
		}
		for _, name := range []string{uuid, fmt.Sprintf("%d:%d", d.gpu, d.index)} {
			dev := spec.GetDevice(name)
			if dev == nil {
				t.Errorf("no CDI device %s (GPU %d GI %d CI %d); devices: %v", name, d.gpu, d.gi, d.ci, deviceNames(spec))
				continue
			}
			var nodes []string
			for _, n := range dev.ContainerEdits.DeviceNodes {
				nodes = append(nodes, n.Path)
				if n.HostPath != filepath.Join(root, n.Path) {
					t.Errorf("%s: node %s from %s, not from the overlay", name, n.Path, n.HostPath)
				}
			}
			slices.Sort(nodes)
			slices.Sort(want)
			if !slices.Equal(nodes, want) {
				t.Errorf("%s: nodes %v, want %v", name, nodes, want)
			}
		}
	}
}

func deviceNames(spec *cdi.Spec) string {
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	return strings.Join(names, " ")
}

// gpu-feature-discovery labels a partitioned node as it does a real one:
// with mig-strategy=mixed a set of labels per MIG profile, and with single
// (every GPU of one profile) the GPU labels become the MIG device's.
func TestGPUFeatureDiscoveryLabelsTheMIGDevices(t *testing.T) {
	needRoot(t)
	gfd := nvidiaTool(t, "gpu-feature-discovery")
	for _, c := range []struct {
		strategy, layout string
		want             map[string]string
	}{
		{"mixed", "0=all-balanced;1=7g.40gb", map[string]string{
			"nvidia.com/mig.strategy": "mixed", "nvidia.com/mig.capable": "true",
			"nvidia.com/mig-1g.5gb.count": "2", "nvidia.com/mig-2g.10gb.count": "1", "nvidia.com/mig-3g.20gb.count": "1", "nvidia.com/mig-7g.40gb.count": "1",
			"nvidia.com/mig-3g.20gb.memory": "20096", "nvidia.com/mig-3g.20gb.multiprocessors": "42", "nvidia.com/mig-3g.20gb.slices.gi": "3",
			"nvidia.com/mig-3g.20gb.slices.ci": "3", "nvidia.com/mig-3g.20gb.engines.copy": "3", "nvidia.com/mig-3g.20gb.engines.decoder": "2",
			"nvidia.com/mig-7g.40gb.engines.jpeg": "1", "nvidia.com/mig-7g.40gb.engines.ofa": "1", "nvidia.com/mig-1g.5gb.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
		}},
		{"single", "all-1g.5gb", map[string]string{
			"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.count": "14", "nvidia.com/gpu.memory": "4864",
			"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu.multiprocessors": "14", "nvidia.com/gpu.slices.gi": "1",
		}},
	} {
		t.Run(c.strategy, func(t *testing.T) {
			o := newSite(t).options(testenv.Profile(t, "a100", 2), realAssets(t))
			o.Render.MIG = c.layout
			res := install(t, o)
			labels := filepath.Join(t.TempDir(), "labels")
			log := inNode(t, res, 2*time.Minute, toolEnv(res), gfd,
				"--oneshot", "--no-timestamp", "--output-file", labels, "--mig-strategy", c.strategy)
			got := readLabels(t, labels)
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s=%q, want %q", k, got[k], v)
				}
			}
			if t.Failed() {
				t.Logf("labels: %v\ngpu-feature-discovery said:\n%s", got, log)
			}
		})
	}
}

// migPluginCaseEnv carries a MIG case (strategy:layout) into the test
// binary re-executed in a private mount namespace.
const migPluginCaseEnv = "NVMOCK_TEST_MIG_PLUGIN_CASE"

// The device plugin on a partitioned node: with mig-strategy=mixed one
// resource per MIG profile, with single nvidia.com/gpu made of MIG
// devices; ListAndWatch lists the MIG UUIDs nvidia-smi shows, and Allocate
// hands a container the one asked for.
func TestTheDevicePluginAdvertisesAndAllocatesMIGDevices(t *testing.T) {
	if c := os.Getenv(migPluginCaseEnv); c != "" {
		migPluginInNamespace(t, c)
		return
	}
	hostNS := devicePluginHost(t)
	for _, c := range []string{"mixed:0=all-balanced;1=7g.40gb", "single:all-1g.5gb"} {
		t.Run(strings.Split(c, ":")[0], func(t *testing.T) { inMountNamespace(t, hostNS, migPluginCaseEnv+"="+c) })
	}
}

func migPluginInNamespace(t *testing.T, c string) {
	strategy, layout, _ := strings.Cut(c, ":")
	privateKubeletDir(t)
	dp := nvidiaTool(t, "nvidia-device-plugin")
	o := newSite(t).options(testenv.Profile(t, "a100", 2), realAssets(t))
	o.Render.MIG = layout
	res := install(t, o)
	// The plugin reads /proc/driver/nvidia-caps/mig-minors, as on a real
	// node: the overlay's, on a tmpfs over /proc/driver in this namespace.
	must(t, syscall.Mount("tmpfs", "/proc/driver", "tmpfs", 0, "mode=0755"))
	must(t, os.Mkdir("/proc/driver/nvidia-caps", 0o755))
	must(t, syscall.Mount(filepath.Join(res.Driver, "proc", "driver", "nvidia-caps"), "/proc/driver/nvidia-caps", "", syscall.MS_BIND, ""))

	// What nvidia-smi -L says the MIG devices are, by profile.
	byProfile := map[string][]string{}
	list := string(runTool(t, time.Minute, toolEnv(res), filepath.Join(res.Driver, "usr", "bin", "nvidia-smi"), "-L"))
	for _, m := range regexp.MustCompile(`MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[0-9a-f-]+)\)`).FindAllStringSubmatch(list, -1) {
		byProfile[m[1]] = append(byProfile[m[1]], m[2])
	}

	kubelet := startKubelet(t, pluginapi.KubeletSocket)
	log, exited := startDevicePlugin(t, dp, res, "--mig-strategy", strategy)

	want := map[string][]string{} // resource: MIG UUIDs
	if strategy == "single" {
		want["nvidia.com/gpu"] = byProfile["1g.5gb"]
	} else {
		for p, ids := range byProfile {
			want["nvidia.com/mig-"+p] = ids
		}
	}
	if len(want) == 0 || len(want["nvidia.com/gpu"]) == 0 && strategy == "single" {
		t.Fatalf("no MIG devices in nvidia-smi -L:\n%s", list)
	}
	for range len(want) {
		reg := kubelet.waitRegister(t, time.Minute, exited, log.String)
		t.Logf("registered %s", reg.ResourceName)
		ids, ok := want[reg.ResourceName]
		if !ok {
			t.Errorf("registered %s, want one of %v", reg.ResourceName, want)
			continue
		}
		plugin := dialPlugin(t, filepath.Join(pluginapi.DevicePluginPath, reg.Endpoint))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		stream, err := plugin.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			t.Fatalf("%s: ListAndWatch: %v\n%s", reg.ResourceName, err, log.String())
		}
		first, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: ListAndWatch: %v\n%s", reg.ResourceName, err, log.String())
		}
		var got []string
		for _, d := range first.Devices {
			got = append(got, d.ID)
		}
		slices.Sort(got)
		slices.Sort(ids)
		if !slices.Equal(got, ids) {
			t.Errorf("%s: ListAndWatch %v, want the MIG devices %v", reg.ResourceName, got, ids)
		}
		alloc, err := plugin.Allocate(ctx, &pluginapi.AllocateRequest{
			ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIDs: []string{ids[0]}}},
		})
		if err != nil || len(alloc.ContainerResponses) != 1 || alloc.ContainerResponses[0].Envs["NVIDIA_VISIBLE_DEVICES"] != ids[0] {
			t.Errorf("%s: Allocate %s: %v %v, want NVIDIA_VISIBLE_DEVICES=%s", reg.ResourceName, ids[0], alloc, err, ids[0])
		}
		cancel()
		delete(want, reg.ResourceName)
	}
}
