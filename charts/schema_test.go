package charts

import (
	"encoding/json"
	"io"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/profile"
)

func TestBadValuesAreRejectedNamingTheField(t *testing.T) {
	const a100 = "{name: a, profile: a100, nodeSelector: {pool: a}}"
	tests := []struct {
		name, values string
		mention      []string // every one must be in the error
	}{
		{"a pool of zero GPUs", "pools: [{name: a, profile: a100, gpus: 0}]", []string{"/pools/0/gpus", "minimum"}},
		{"a pool of more GPUs than a node has", "pools: [{name: a, profile: a100, gpus: 5000}]", []string{"/pools/0/gpus", "maximum"}},
		{"GPUs as a word", "pools: [{name: a, profile: a100, gpus: eight}]", []string{"/pools/0/gpus", "integer"}},
		{"an unknown profile", "pools: [{name: a, profile: a200}]", []string{"/pools/0/profile", "a100"}},
		{"a pool without a profile", "pools: [{name: a}]", []string{"/pools/0", "profile"}},
		{"a pool name that is not a DNS label", "pools: [{name: GPU_pool, profile: t4}]", []string{"/pools/0/name"}},
		{"an unknown top-level key", "pool: [{name: a, profile: a100}]", []string{"pool"}},
		{"a misspelt pool key", "pools: [{name: a, profile: a100, nodeselector: {x: y}}]", []string{"/pools/0", "nodeselector"}},
		{"gpus among the overrides", "pools: [{name: a, profile: a100, overrides: {gpus: 2}}]", []string{"/pools/0/overrides", "gpus"}},
		{"a node selector value that is a number", "pools: [{name: a, profile: a100, nodeSelector: {rack: 7}}]", []string{"/pools/0/nodeSelector/rack", "string"}},
		{"a misspelt topology field in the overrides", "pools: [{name: a, profile: a100, overrides: {topology: {busID: [\"0000:07:00.0\"]}}}]", []string{"/pools/0/overrides/topology", "busID"}},
		{"a NIC without its address", "pools: [{name: a, profile: h100, overrides: {pcie: {nics: [{vendor: \"0x15b3\", device: \"0x1021\"}]}}}]", []string{"/pools/0/overrides/pcie/nics/0", "bdf"}},
		{"a PCIe link of 3 lanes", "pools: [{name: a, profile: h100, overrides: {pcie: {rootPort: {vendor: \"0x8086\", device: \"0x1bbe\", linkWidth: 3}}}}]", []string{"/pools/0/overrides/pcie/rootPort/linkWidth"}},
		{"no pools", "pools: []", []string{"/pools", "minItems"}},
		{"pools as a map", "pools: {a: {profile: a100}}", []string{"/pools", "array"}},
		{"an unknown log level", "logLevel: verbose", []string{"/logLevel", "info"}},
		{"an unknown pull policy", "image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy", "IfNotPresent"}},
		{"a relative overlay root", "overlayRoot: var/lib/nvmock", []string{"/overlayRoot"}},
		{"the host's root as the overlay root", "overlayRoot: /", []string{"/overlayRoot"}},
		{"a path YAML would cut at its #", `overlayRoot: "/var/lib/nv #x"`, []string{"/overlayRoot"}},
		{"a CDI directory with a trailing slash", "cdiDir: /var/run/cdi/", []string{"/cdiDir"}},
		{"an NFD directory with a colon", `nfdDir: "/etc/a: b"`, []string{"/nfdDir"}},
		{"an NRI socket in the host's root", "nri: {socketPath: /nri.sock}", []string{"/nri/socketPath"}},
		{"a three-digit plugin index", `nri: {pluginIndex: "100"}`, []string{"/nri/pluginIndex"}},
		{"a plugin index past 99", `nri: {pluginIndex: 100}`, []string{"/nri/pluginIndex"}},
		{"a one-digit plugin index string", `nri: {pluginIndex: "5"}`, []string{"/nri/pluginIndex"}},
		{"a surge of no nodes", "maxSurge: 0", []string{"/maxSurge", "minimum"}},
		{"a surge of 0%", `maxSurge: "0%"`, []string{"/maxSurge"}},
		{"a surge over 100%", `maxSurge: "150%"`, []string{"/maxSurge"}},
		{"a surge as a word", "maxSurge: all", []string{"/maxSurge"}},
		{"default GPUs as a boolean", "injection: {defaultGPUs: true}", []string{"/injection/defaultGPUs"}},
		{"a namespace label key with a space", `injection: {namespaceLabel: {key: "nvmock inject"}}`, []string{"/injection/namespaceLabel/key"}},
		{"a runtime handler in capitals", "injection: {nvidiaRuntimeHandlers: [Nvidia]}", []string{"/injection/nvidiaRuntimeHandlers/0"}},
		{"runtime handlers as one string", "injection: {nvidiaRuntimeHandlers: nvidia}", []string{"/injection/nvidiaRuntimeHandlers", "array"}},
		{"a fabric peer without a port", "infiniband: {peers: [10.0.0.5]}", []string{"/infiniband/peers/0"}},
		{"a fabric source that is no CIDR", "infiniband: {allowFrom: [10.0.1.5]}", []string{"/infiniband/allowFrom/0"}},
		{"fabric peers as one string", `infiniband: {peers: "10.0.0.5:4791,10.0.0.6:4791"}`, []string{"/infiniband/peers", "array"}},
		{"a digest in the tag's place", `image: {tag: "@sha256:0123"}`, []string{"/image/tag"}},
		{"a digest in the repository", `image: {repository: "ghcr.io/nvmock/nvmock@sha256:0123"}`, []string{"/image/repository"}},
		{"default GPUs as a word", "injection: {defaultGPUs: two}", []string{"/injection/defaultGPUs"}},
		{"a live fault of kind xid without its XID", "live: {faults: [{gpus: all, kind: xid}]}", []string{"/live/faults/0", "xid"}},
		{"a live fault with two triggers", "live: {faults: [{gpus: all, kind: lost, probability: 0.5, afterCalls: 3}]}", []string{"/live/faults/0"}},
		{"a toleration with an unknown operator", "pools: [{name: a, profile: a100, tolerations: [{operator: Maybe}]}]", []string{"/pools/0/tolerations/0/operator"}},
		// Review: these passed the schema, and the API server refuses them.
		{"a toleration of any value with a value", "pools: [{name: a, profile: a100, tolerations: [{key: x, operator: Exists, value: v}]}]", []string{"/pools/0/tolerations/0"}},
		{"a toleration of no key but a value", "pools: [{name: a, profile: a100, tolerations: [{operator: Equal, value: v}]}]", []string{"/pools/0/tolerations/0"}},
		{"toleration seconds on another effect", "pools: [{name: a, profile: a100, tolerations: [{key: x, operator: Exists, effect: NoSchedule, tolerationSeconds: 5}]}]", []string{"/pools/0/tolerations/0"}},
		// Each value valid, together contradictory: the templates say so.
		{"two pools with one name", "pools: [" + a100 + ", {name: a, profile: t4, nodeSelector: {pool: b}}]",
			[]string{`pools[1]: name "a" is already pools[0]'s`}},
		{"two pools with identical node selectors", "pools: [" + a100 + ", {name: b, profile: t4, nodeSelector: {pool: a}}]",
			[]string{"pools[0] (a) and pools[1] (b) have the same nodeSelector", "nodeSelector that tells its nodes apart"}},
		{"two pools without node selectors", "pools: [{name: a, profile: a100}, {name: b, profile: t4}]",
			[]string{"pools[0] (a) and pools[1] (b) have the same nodeSelector {}"}},
		{"the fabric on the metrics port", "infiniband: {peerPort: 9464}", []string{"infiniband.peerPort: 9464 is the plugin's metrics and probe port"}},
		{"two nodes on one slot", "infiniband: {slots: {gpu-a: 0, gpu-b: 0}}", []string{"pools[0] (default): nodes gpu-a and gpu-b both take fabric slot 0 (infiniband.slots)"}},
		{"two nodes on one slot of a pool", "pools: [{name: a, profile: h100, slots: {gpu-a: 1, gpu-b: 1}}]",
			[]string{"pools[0] (a): nodes gpu-a and gpu-b both take fabric slot 1 (pools[].slots)"}},
		{"a GPU's override without its board", "pools: [{name: a, profile: a100, overrides: {devices: [{index: 0}]}}]", []string{"/pools/0/overrides/devices/0", "board"}},
		{"fabric slots for a pool without InfiniBand", "pools: [{name: a, profile: t4, slots: {gpu-a: 0}}]",
			[]string{"pools[0] (a).slots: profile t4 has no InfiniBand, so its nodes take no fabric slots"}},
		{"the chart's own rollout checksum among the pod annotations", "podAnnotations: {checksum/profile: x}",
			[]string{"podAnnotations: checksum/profile is the chart's own"}},
		// Review: these rendered, and no pod could start.
		{"the overlay over the image's nvmock", "overlayRoot: /opt/nvmock", []string{`overlayRoot: "/opt/nvmock" would be mounted over the image's /opt/nvmock`}},
		{"the overlay over all of /opt", "overlayRoot: /opt", []string{`overlayRoot: "/opt" would be mounted over the image's /opt/nvmock`}},
		{"the NFD files in the image's configuration", "nfdDir: /etc/nvmock", []string{`nfdDir: "/etc/nvmock" would be mounted over the image's /etc/nvmock`}},
		{"CDI and NFD in one directory", "cdiDir: /etc/kubernetes/node-feature-discovery/features.d", []string{"cdiDir and nfdDir: both are /etc/kubernetes/node-feature-discovery/features.d"}},
		{"a path with a .. part", "overlayRoot: /var/lib/../nvmock", []string{`overlayRoot: "/var/lib/../nvmock" has a . or .. part`}},
		{"a pool selecting every node of another", "pools: [{name: a, profile: a100, nodeSelector: {gpu: mock}}, {name: b, profile: t4, nodeSelector: {gpu: mock, board: t4}}]",
			[]string{`pools[0] (a): its nodeSelector {"gpu":"mock"} also selects every node of pools[1] (b`}},
	}
	// Helm logs "skipped value ... Not a table" for pools as a map; the
	// schema's error is what the user sees.
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := render(t, tt.values)
			if err == nil {
				t.Fatalf("values %s rendered; want an error", tt.values)
			}
			for _, m := range tt.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error does not mention %q:\n%v", m, err)
				}
			}
		})
	}
}

// Each pool's fabric is numbered from 0: pools with slots of their own
// may use the same numbers. Found in review (one list for all pools
// failed every node of two fabric pools).
func TestEachPoolNumbersItsOwnFabric(t *testing.T) {
	files, err := render(t, `pools:
  - {name: a, profile: h100, nodeSelector: {pool: a}, slots: {h-1: 0, h-2: 1}}
  - {name: b, profile: gb200, nodeSelector: {pool: b}, slots: {g-1: 0, g-2: 1}}
  - {name: c, profile: t4, nodeSelector: {pool: c}}
`)
	if err != nil {
		t.Fatal(err)
	}
	ds := files["nvmock/templates/daemonset.yaml"]
	for _, want := range []string{"--fabric-slots=h-1=0,h-2=1", "--fabric-slots=g-1=0,g-2=1"} {
		if strings.Count(ds, want) != 1 {
			t.Errorf("%s %d times in the DaemonSets, want once", want, strings.Count(ds, want))
		}
	}
	if strings.Count(ds, "--fabric-slots") != 2 {
		t.Errorf("%d --fabric-slots, want the two pools' own", strings.Count(ds, "--fabric-slots"))
	}
	// A pool's own empty slots are its own, not the chart-wide ones
	// (found by a QA pass: default took {} for unset).
	files, err = render(t, "infiniband: {slots: {n1: 0}}\npools: [{name: a, profile: h100, slots: {}}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if ds := files["nvmock/templates/daemonset.yaml"]; strings.Contains(ds, "--fabric-slots") {
		t.Errorf("a pool with slots: {} got the chart-wide slots")
	}
}

// A fabric Service name is a DNS-1035 label: 63 characters at most, a
// letter first. Found in review (helm lint passed both).
func TestFabricServiceNamesAreChecked(t *testing.T) {
	for _, c := range []struct{ release, values, want string }{
		{"ci-gpu-cluster-staging", "pools: [{name: a100-sxm4-40gb-rack-17-east-highmem, profile: a100}]",
			`pools[0].name "a100-sxm4-40gb-rack-17-east-highmem": the pool's fabric Service would be ci-gpu-cluster-staging-nvmock-a100-sxm4-40gb-rack-17-east-highmem-fabric, 72 characters`},
		{"1ci", "", `release name "1ci": the pools' fabric Services (1ci-nvmock-default-fabric) would start with a digit`},
	} {
		_, err := renderRelease(t, c.release, c.values, false)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("release %s: got %v, want an error saying %q", c.release, err, c.want)
		}
	}
	if _, err := renderRelease(t, "1ci", "infiniband: {peerPort: 0}", false); err != nil {
		t.Errorf("without the fabric Service, release 1ci: %v", err)
	}
	// A pool without InfiniBand has no fabric Service to name (review).
	if _, err := renderRelease(t, "1ci", "pools: [{name: t4-pool-for-the-racks-of-building-17, profile: t4}]", false); err != nil {
		t.Errorf("a T4 pool, release 1ci: %v", err)
	}
}

// The templates check the profile name too, for a user who skips schema
// validation (helm --skip-schema-validation).
func TestTemplatesRejectAnUnknownProfileWithoutTheSchema(t *testing.T) {
	_, err := renderWith(t, "pools: [{name: a, profile: a200}]", true)
	want := `pools[0] (a): profile "a200" is not a built-in profile; choose one of a100, b200, gb200, gb300, h100, l40s, t4`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want an error saying %q", err, want)
	}
}

// The schema's enum, the templates' list and the library's built-ins must
// name the same profiles.
func TestProfileListsAgreeWithTheLibrary(t *testing.T) {
	want := profile.Builtins()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Properties struct {
			Pools struct {
				Items struct {
					Properties struct {
						Profile struct{ Enum []string }
					}
				}
			}
		}
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if got := s.Properties.Pools.Items.Properties.Profile.Enum; !reflect.DeepEqual(got, want) {
		t.Errorf("values.schema.json pools[].profile enum %v, want the built-ins %v", got, want)
	}
	helpers, err := os.ReadFile(filepath.Join(chartDir, "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`define "nvmock.builtinProfiles" -}}\n(.*)\n`).FindSubmatch(helpers)
	if m == nil {
		t.Fatal("_helpers.tpl: no nvmock.builtinProfiles")
	}
	if got := strings.Fields(string(m[1])); !reflect.DeepEqual(got, want) {
		t.Errorf("_helpers.tpl nvmock.builtinProfiles %v, want the built-ins %v", got, want)
	}
	var ib []string
	for _, name := range want {
		p, err := profile.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := p.Node(); err != nil {
			t.Fatal(err)
		} else if n.IB != nil {
			ib = append(ib, name)
		}
	}
	m = regexp.MustCompile(`define "nvmock.infinibandProfiles" -}}\n(.*)\n`).FindSubmatch(helpers)
	if m == nil {
		t.Fatal("_helpers.tpl: no nvmock.infinibandProfiles")
	}
	if got := strings.Fields(string(m[1])); !reflect.DeepEqual(got, ib) {
		t.Errorf("_helpers.tpl nvmock.infinibandProfiles %v, want the built-ins with InfiniBand %v", got, ib)
	}
}

// Every property in the schema has a description, a type and, where it is
// an object with fixed properties, additionalProperties false.
func TestSchemaDescribesEveryProperty(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var walk func(at string, s map[string]any)
	walk = func(at string, s map[string]any) {
		if at != "" {
			if d, _ := s["description"].(string); d == "" {
				t.Errorf("schema %s: no description", at)
			}
		}
		if _, ok := s["type"]; !ok {
			t.Errorf("schema %s: no type", at)
		}
		if props, ok := s["properties"].(map[string]any); ok {
			if s["additionalProperties"] != false {
				t.Errorf("schema %s: has properties but allows others; set additionalProperties: false", at)
			}
			for k, v := range props {
				walk(at+"/"+k, v.(map[string]any))
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(at+"/items", items)
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			walk(at+"/*", ap)
		}
	}
	walk("", root)
}

// The overrides' fixed fields in the schema are the profile's own (less
// base and gpus, which are the pool's), so the schema cannot refuse a field
// nvmock accepts, nor accept one it refuses.
func TestOverridesSchemaFollowsTheProfileTypes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Properties struct {
			Pools struct {
				Items struct {
					Properties struct {
						Overrides schemaNode
					}
				}
			}
		}
	}
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	ov := root.Properties.Pools.Items.Properties.Overrides
	check := func(at string, s schemaNode, typ reflect.Type, leaveOut ...string) {
		want := jsonFields(typ, leaveOut...)
		var got []string
		for k := range s.Properties {
			got = append(got, k)
		}
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("schema %s: properties %v, want the profile's %v", at, got, want)
		}
	}
	check("overrides", ov, reflect.TypeOf(profile.Profile{}), "base", "gpus")
	check("overrides/driver", ov.Properties["driver"], reflect.TypeOf(profile.Driver{}))
	check("overrides/topology", ov.Properties["topology"], reflect.TypeOf(profile.Topology{}))
	pcie := ov.Properties["pcie"]
	check("overrides/pcie", pcie, reflect.TypeOf(profile.PCIe{}))
	for _, m := range []string{"rootPort", "switch", "nvswitchDevice"} {
		check("overrides/pcie/"+m, pcie.Properties[m], reflect.TypeOf(profile.PCIModel{}))
	}
	check("overrides/pcie/nics/items", *pcie.Properties["nics"].Items, reflect.TypeOf(profile.NIC{}))
	rc := *pcie.Properties["rootComplexes"].Items
	check("overrides/pcie/rootComplexes/items", rc, reflect.TypeOf(profile.RootComplex{}))
	check("overrides/pcie/rootComplexes/items/ports/items", *rc.Properties["ports"].Items, reflect.TypeOf(profile.PCIePort{}))
	check("overrides/devices/items", *ov.Properties["devices"].Items, reflect.TypeOf(profile.DeviceOverride{}))
	ib := ov.Properties["infiniband"]
	check("overrides/infiniband", ib, reflect.TypeOf(profile.InfiniBand{}))
	check("overrides/infiniband/fabric", ib.Properties["fabric"], reflect.TypeOf(profile.IBFabricSpec{}))
	check("overrides/infiniband/fabric/switch", ib.Properties["fabric"].Properties["switch"], reflect.TypeOf(profile.IBSwitch{}))
}

type schemaNode struct {
	Properties map[string]schemaNode
	Items      *schemaNode
}

// jsonFields lists a struct's JSON field names, embedded structs' included,
// sorted, less leaveOut.
func jsonFields(typ reflect.Type, leaveOut ...string) []string {
	var out []string
	for _, f := range reflect.VisibleFields(typ) {
		if f.Anonymous {
			continue // its fields are visible too
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" && !slices.Contains(leaveOut, name) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Values users write naturally render: live gpus as a number (ctl apply
// takes it), an InfiniBand fault on an HCA a profile names otherwise, and
// a pool named like a number, whose label stays a string (review: the API
// refused the objects, their labels numbers).
func TestNaturalValuesRender(t *testing.T) {
	files, err := render(t, `pools: [{name: "123", profile: h100}]
live: {faults: [{gpus: 3, kind: lost}], loads: [{gpus: 0, percent: 20}]}
infiniband: {faults: {node-1: [ib_a=down]}}
`)
	if err != nil {
		t.Fatal(err)
	}
	ds := files["nvmock/templates/daemonset.yaml"]
	digest := "sha256:" + strings.Repeat("0a", 32)
	pinned, err := render(t, "image: {digest: \""+digest+"\"}")
	if err != nil {
		t.Fatal(err)
	}
	if want := "image: ghcr.io/nvmock/nvmock@" + digest; !strings.Contains(pinned["nvmock/templates/daemonset.yaml"], want) {
		t.Errorf("image.digest: the DaemonSet lacks %q", want)
	}
	if !strings.Contains(ds, `nvmock.io/pool: "123"`) || strings.Contains(ds, "nvmock.io/pool: 123") {
		t.Errorf("the pool label is not a quoted string:\n%s", ds)
	}
}

// A pool's own live values replace the chart's for its nodes (review: a
// fault on GPU 3 failed every pod of a one-GPU pool); the others keep the
// chart's.
func TestAPoolsLiveValuesAreItsOwn(t *testing.T) {
	files, err := render(t, `pools:
  - {name: big, profile: h100, nodeSelector: {pool: big}}
  - {name: small, profile: t4, gpus: 1, nodeSelector: {pool: small}, live: {loads: [{gpus: "0", percent: 10}]}}
live: {faults: [{gpus: "3", kind: lost}]}
`)
	if err != nil {
		t.Fatal(err)
	}
	cms := decode(t, files).configMaps
	got := map[string]string{}
	for _, cm := range cms {
		got[cm.Labels["nvmock.io/pool"]] = cm.Data["live.yaml"]
	}
	if !strings.Contains(got["big"], "kind: lost") || strings.Contains(got["big"], "percent") {
		t.Errorf("pool big's live.yaml:\n%s\nwant the chart's fault", got["big"])
	}
	if strings.Contains(got["small"], "lost") || !strings.Contains(got["small"], "percent: 10") {
		t.Errorf("pool small's live.yaml:\n%s\nwant its own load", got["small"])
	}
}

// A release name YAML would read as another type (on, yes, 123) stays a
// string in every label and selector (review: they came back a bool or a
// number, which no label takes).
func TestReleaseNamesYAMLWouldRetypeStayStrings(t *testing.T) {
	for _, c := range []struct{ release, values string }{
		{"on", ""},
		{"yes", ""},
		{"123", "pools: [{name: t4, profile: t4}]"},
	} {
		files, err := renderRelease(t, c.release, c.values, false)
		if err != nil {
			t.Fatalf("release %s: %v", c.release, err)
		}
		o := decode(t, files)
		for _, ds := range o.daemonSets {
			if got := ds.Spec.Selector.MatchLabels["app.kubernetes.io/instance"]; got != c.release {
				t.Errorf("release %s: DaemonSet %s selects instance %q", c.release, ds.Name, got)
			}
		}
		for _, j := range o.hooks.jobs {
			if got := j.Spec.Template.Labels["app.kubernetes.io/instance"]; got != c.release {
				t.Errorf("release %s: Job %s labelled instance %q", c.release, j.Name, got)
			}
		}
	}
}

// --set nri.pluginIndex=5 gives a number: taken, as two digits (review:
// only --set-string passed the schema).
func TestAPluginIndexMayBeANumber(t *testing.T) {
	for values, want := range map[string]string{`nri: {pluginIndex: 5}`: "--idx=05", `nri: {pluginIndex: 20}`: "--idx=20", `nri: {pluginIndex: "07"}`: "--idx=07"} {
		files, err := render(t, values)
		if err != nil {
			t.Fatalf("%s: %v", values, err)
		}
		if ds := files["nvmock/templates/daemonset.yaml"]; !strings.Contains(ds, "- "+want+"\n") {
			t.Errorf("%s: the plugin has no %s", values, want)
		}
	}
}

// The tolerations the API server takes pass the schema's rules for them.
func TestTolerationsThePodSpecTakesPass(t *testing.T) {
	for _, v := range []string{
		"pools: [{name: a, profile: a100, tolerations: [{key: x, operator: Equal, value: vv, effect: NoSchedule}]}]",
		"pools: [{name: a, profile: a100, tolerations: [{key: x, operator: Exists}]}]",
		"pools: [{name: a, profile: a100, tolerations: [{operator: Exists}]}]",
		"pools: [{name: a, profile: a100, tolerations: [{key: x, value: vv}]}]",
		"pools: [{name: a, profile: a100, tolerations: [{key: x, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]}]",
	} {
		if _, err := render(t, v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// infiniband.allowFrom admits another cluster's nodes to the fabric port
// (review: the policy admitted the pool's own pods only, so two clusters
// running the chart could not join their fabrics).
func TestAllowFromAdmitsOtherNodesToTheFabricPort(t *testing.T) {
	files, err := render(t, "infiniband: {allowFrom: [10.0.1.0/24, \"fd00::/64\"]}")
	if err != nil {
		t.Fatal(err)
	}
	o := decode(t, files)
	if len(o.policies) != 1 {
		t.Fatalf("%d NetworkPolicies, want the default pool's", len(o.policies))
	}
	var cidrs []string
	for _, rule := range o.policies[0].Spec.Ingress {
		if len(rule.Ports) == 0 || rule.Ports[0].Port.String() != "fabric" {
			continue
		}
		for _, from := range rule.From {
			if from.IPBlock != nil {
				cidrs = append(cidrs, from.IPBlock.CIDR)
			} else if from.PodSelector == nil {
				t.Errorf("a source %+v that is neither the pool's pods nor a CIDR", from)
			}
		}
	}
	if strings.Join(cidrs, ",") != "10.0.1.0/24,fd00::/64" {
		t.Errorf("the fabric port admits CIDRs %q, want 10.0.1.0/24 and fd00::/64", cidrs)
	}
}
