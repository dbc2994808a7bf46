package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/live"
	"github.com/nvmock/nvmock/profile"
)

// pool is what a scenario expects of one pool.
type pool struct {
	name, profile string
	gpus          int // GPUs the rendered profile must give
	selector      map[string]string
	overridden    bool              // the fleet's t4 overrides: GPU 0 draws 31 W, GPU 1 is at 61 C
	live          bool              // liveValues: the live init container applies them (else it clears the state)
	slots         string            // --fabric-slots the install gets (fleetValues' infiniband.slots)
	faults        string            // the --ib-fault flags it gets, comma-joined (infiniband.faults)
	peers         string            // the plugin's --ib-peers (infiniband.peers)
	mig           string            // --mig the install gets
	hostCPUs      bool              // --host-cpus the install gets
	annotations   map[string]string // podAnnotations the pod template carries
	xidlog        bool              // kernelLog.xids: the xidlog container runs
	volumeMounts  bool              // injection.acceptVolumeMounts: the plugin reads volume-mounts lists
}

// liveValues set a load and faults at install (nvmock ctl apply).
const liveValues = `
live:
  loads: [{gpus: all, percent: 40, jitter: 5}]
  faults:
    - {gpus: "3", kind: ecc_uncorrectable, in: 10m}
    - {gpus: all, kind: xid, xid: 13, probability: 0.0001}
kernelLog: {xids: true}
`

// fleetValues is a heterogeneous fleet: A100 and T4 nodes told apart by a
// label, the T4s tainted, with a board override.
const fleetValues = `
pools:
  - name: a100
    profile: a100
    gpus: 8
    mig: 0-3=all-1g.5gb;4-7=all-balanced
    nodeSelector: {nvmock.io/pool: a100}
  - name: t4
    profile: t4
    gpus: 2
    overrides:
      board:
        power: {draw: 31}
      devices:
        - index: 1
          board:
            thermal: {gpu: 61}
    hostCPUs: true
    nodeSelector: {nvmock.io/pool: t4, kubernetes.io/arch: amd64}
    tolerations:
      - {key: nvmock.io/t4, operator: Exists, effect: NoSchedule}
injection:
  namespaces: [ml, ci]
  defaultGPUs: "1"
  acceptVolumeMounts: true
infiniband:
  slots: {gpu-b: 1, gpu-a: 0}
  faults: {gpu-b: [mlx5_0=symbol_error:12], gpu-a: [mlx5_3=down, "mlx5_4=link_downed:1"]}
  peers: [10.0.0.5:4791, "[fd00::5]:4791"]
logLevel: debug
podAnnotations: {tolerate-missing-nri-plugins.noderesource.dev: "true"}
`

// fleetAnnotations are fleetValues' podAnnotations.
var fleetAnnotations = map[string]string{"tolerate-missing-nri-plugins.noderesource.dev": "true"}

// fleetFaults are the --ib-fault flags of fleetValues, by node then in order.
const fleetFaults = "gpu-a/mlx5_3=down,gpu-a/mlx5_4=link_downed:1,gpu-b/mlx5_0=symbol_error:12"

// fleetPeers is the --ib-peers of fleetValues' infiniband.peers.
const fleetPeers = "10.0.0.5:4791,[fd00::5]:4791"

func TestChartRendersAndMatchesGoldens(t *testing.T) {
	type scenario struct {
		name, values string
		pools        []pool
	}
	scenarios := []scenario{
		{"default", "", []pool{{name: "default", profile: "a100", gpus: 8}}},
		{"live", liveValues, []pool{{name: "default", profile: "a100", gpus: 8, live: true, xidlog: true}}},
		{"fleet", fleetValues, []pool{
			{name: "a100", profile: "a100", gpus: 8, selector: map[string]string{"nvmock.io/pool": "a100"}, slots: "gpu-a=0,gpu-b=1", mig: "0-3=all-1g.5gb;4-7=all-balanced", faults: fleetFaults, peers: fleetPeers, annotations: fleetAnnotations, volumeMounts: true},
			{name: "t4", profile: "t4", gpus: 2, selector: map[string]string{"nvmock.io/pool": "t4", "kubernetes.io/arch": "amd64"}, overridden: true, hostCPUs: true, annotations: fleetAnnotations, volumeMounts: true}, // no InfiniBand: no peers, slots or port faults
		}},
	}
	for _, name := range profile.Builtins() {
		b, err := profile.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		scenarios = append(scenarios, scenario{"profile-" + name,
			"pools: [{name: " + name + ", profile: " + name + "}]",
			[]pool{{name: name, profile: name, gpus: b.GPUs}}})
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			files, err := render(t, s.values)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			objs := decode(t, files)
			checkPools(t, objs, s.pools)
			checkRBAC(t, objs)
			checkPreDelete(t, objs, s.pools)
			checkFabric(t, objs)
			golden(t, s.name, manifest(files))
		})
	}
}

// checkPools checks each pool's DaemonSet and ConfigMap beyond the golden:
// arguments that the real flag sets accept, a profile the library accepts,
// the mounts those arguments need, and the containers' privileges.
func checkPools(t *testing.T, o objects, pools []pool) {
	t.Helper()
	if len(o.daemonSets) != len(pools) || len(o.configMaps) != len(pools) {
		t.Fatalf("%d DaemonSets and %d ConfigMaps for %d pools", len(o.daemonSets), len(o.configMaps), len(pools))
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].name < pools[j].name })
	for i, p := range pools {
		ds, cm := o.daemonSets[i], o.configMaps[i]
		if want := "nvmock-" + p.name; ds.Name != want || cm.Name != want {
			t.Errorf("pool %s: DaemonSet %q and ConfigMap %q, want both %q", p.name, ds.Name, cm.Name, want)
		}
		checkProfile(t, p, cm)
		checkDaemonSet(t, p, ds)
	}
}

func checkProfile(t *testing.T, p pool, cm corev1.ConfigMap) {
	t.Helper()
	data, ok := cm.Data["profile.yaml"]
	if !ok {
		t.Fatalf("ConfigMap %s: no profile.yaml", cm.Name)
	}
	prof, err := profile.Parse("ConfigMap "+cm.Name, []byte(data))
	if err != nil {
		t.Fatalf("the rendered profile does not load:\n%s\n%v", data, err)
	}
	if errs := prof.Validate(); len(errs) > 0 {
		t.Fatalf("the rendered profile does not validate: %v", errs)
	}
	// Always there: without live values it clears what earlier ones set.
	spec := filepath.Join(t.TempDir(), "live.yaml")
	if err := os.WriteFile(spec, []byte(cm.Data["live.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	sp, err := live.ReadSpec(spec)
	if err != nil {
		t.Fatalf("ConfigMap %s: live.yaml does not read as nvmock ctl apply reads it: %v\n%s", cm.Name, err, cm.Data["live.yaml"])
	}
	if p.live && (len(sp.Loads) != 1 || len(sp.Faults) != 2 || sp.Faults[1].XID != 13) {
		t.Errorf("ConfigMap %s: live spec %+v, want the values' load and two faults", cm.Name, sp)
	}
	if !p.live && (len(sp.Loads) != 0 || len(sp.Faults) != 0) {
		t.Errorf("ConfigMap %s: live spec %+v without live values, want none", cm.Name, sp)
	}
	if prof.Name != p.profile || prof.GPUs != p.gpus {
		t.Errorf("ConfigMap %s: profile %s with %d GPUs, want %s with %d", cm.Name, prof.Name, prof.GPUs, p.profile, p.gpus)
	}
	if p.overridden {
		boards, errs := prof.Boards()
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if d := boards[0].Power.Draw; d == nil || *d != 31 {
			t.Errorf("t4 GPU 0 power draw %v, want the override 31", d)
		}
		if g := boards[1].Thermal.GPU; g == nil || *g != 61 {
			t.Errorf("t4 GPU 1 temperature %v, want the override 61", g)
		}
	}
}

func checkDaemonSet(t *testing.T, p pool, ds appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	// Surge, never a node without a plugin (the handover in plugin/nri).
	if u := ds.Spec.UpdateStrategy.RollingUpdate; ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || u == nil ||
		u.MaxSurge == nil || u.MaxSurge.IntValue() != 1 || u.MaxUnavailable == nil || u.MaxUnavailable.IntValue() != 0 {
		t.Errorf("%s: updateStrategy %+v, want a rolling update with maxSurge 1 and maxUnavailable 0", ds.Name, ds.Spec.UpdateStrategy)
	}
	for k, v := range p.annotations {
		if got, ok := ds.Spec.Template.Annotations[k]; !ok || got != v {
			t.Errorf("%s: pod annotation %s is %q, want %q (podAnnotations)", ds.Name, k, got, v)
		}
	}
	if !reflect.DeepEqual(spec.NodeSelector, p.selector) {
		t.Errorf("%s: nodeSelector %v, want %v", ds.Name, spec.NodeSelector, p.selector)
	}
	if want := map[bool]int{false: 1, true: 2}[p.xidlog]; len(spec.InitContainers) != 3 || len(spec.Containers) != want {
		t.Fatalf("%s: %d init containers and %d containers, want 3 (uninstall, hostprep, live) and %d", ds.Name, len(spec.InitContainers), len(spec.Containers), want)
	}
	if p.xidlog {
		checkXIDLog(t, ds, spec.Containers[1])
	}
	checkLive(t, ds, spec.InitContainers[2])
	unc, init, main := spec.InitContainers[0], spec.InitContainers[1], spec.Containers[0]
	// A sidecar started first: its preStop runs even when the install
	// fails, and after the plugin has stopped.
	if unc.Name != "uninstall" || unc.RestartPolicy == nil || *unc.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("%s: the first init container is %s with restartPolicy %v, want the uninstall sidecar (Always)", ds.Name, unc.Name, unc.RestartPolicy)
	}
	for _, c := range spec.InitContainers[1:] {
		if c.RestartPolicy != nil {
			t.Errorf("%s: init container %s has restartPolicy %s; only the uninstall sidecar runs on", ds.Name, c.Name, *c.RestartPolicy)
		}
	}
	for _, c := range []corev1.Container{init, main, unc} {
		if len(c.Command) != 1 || c.Command[0] != "/opt/nvmock/bin/nvmock" {
			t.Errorf("%s: container %s runs %q, want the image's /opt/nvmock/bin/nvmock", ds.Name, c.Name, c.Command)
		}
		if env := fieldRefs(c); env["NODE_NAME"] != "spec.nodeName" {
			t.Errorf("%s: container %s: NODE_NAME from %q, want spec.nodeName", ds.Name, c.Name, env["NODE_NAME"])
		}
	}

	// hostprep install: exactly the flags cmd/nvmock accepts, the profile
	// from the pool's ConfigMap, and every directory it writes mounted.
	if len(init.Args) < 2 || init.Args[0] != "hostprep" || init.Args[1] != "install" {
		t.Fatalf("%s: init args %q, want hostprep install ...", ds.Name, init.Args)
	}
	set := parseArgs(t, "init container", sourceFlags(t, "hostprep.go", "hostprepInstall"), init.Args[2:])
	want := map[string]string{
		"root": "/var/lib/nvmock", "profile": "/etc/nvmock/profile.yaml", "node-name": "$(NODE_NAME)",
		"cdi-dir": "/var/run/cdi", "nfd-dir": "/etc/kubernetes/node-feature-discovery/features.d",
		// The same DaemonSet its preStop names: an uninstall for another
		// pool leaves this pool's install.
		"owner": releaseNS + "/" + ds.Name,
	}
	if p.slots != "" {
		want["fabric-slots"] = p.slots // sorted by node: renders the same every time
	}
	if p.mig != "" {
		want["mig"] = p.mig
	}
	if p.hostCPUs {
		want["host-cpus"] = "true"
	}
	if p.faults != "" {
		want["ib-fault"] = p.faults
	}
	if !reflect.DeepEqual(set, want) {
		t.Errorf("%s: hostprep install flags %v, want %v", ds.Name, set, want)
	}
	mounts := mountsOf(spec, init)
	for _, dir := range []string{set["root"], set["cdi-dir"], set["nfd-dir"]} {
		if mounts[dir] != "hostPath:"+dir {
			t.Errorf("%s: init container: %s is mounted from %q, want the node's %s", ds.Name, dir, mounts[dir], dir)
		}
	}
	if mounts["/etc/nvmock"] != "configMap:"+ds.Name {
		t.Errorf("%s: /etc/nvmock is mounted from %q, want the pool's ConfigMap", ds.Name, mounts["/etc/nvmock"])
	}

	// nvmock nri: the real flags, the overlay and the socket's directory.
	if len(main.Args) < 1 || main.Args[0] != "nri" {
		t.Fatalf("%s: main args %q, want nri ...", ds.Name, main.Args)
	}
	nri := parseArgs(t, "main container", sourceFlags(t, "nri.go", "nriCmd"), main.Args[1:])
	if nri["namespace-label"] != "nvmock.io/inject=enabled" || nri["plugin-namespace"] != "$(POD_NAMESPACE)" {
		t.Errorf("%s: nri flags %v", ds.Name, nri)
	}
	if got := nri["accept-volume-mounts"] == "true"; got != p.volumeMounts {
		t.Errorf("%s: nri --accept-volume-mounts %v, want %v", ds.Name, got, p.volumeMounts)
	}
	if nri["ib-peers"] != p.peers {
		t.Errorf("%s: nri --ib-peers %q, want %q", ds.Name, nri["ib-peers"], p.peers)
	}
	if env := fieldRefs(main); env["POD_NAMESPACE"] != "metadata.namespace" {
		t.Errorf("%s: POD_NAMESPACE from %q, want metadata.namespace", ds.Name, env["POD_NAMESPACE"])
	}
	mounts = mountsOf(spec, main)
	if mounts["/var/lib/nvmock"] != "hostPath:/var/lib/nvmock" || mounts["/var/run/nri"] != "hostPath:/var/run/nri" {
		t.Errorf("%s: nri container mounts %v, want the overlay root and the socket directory", ds.Name, mounts)
	}
	if main.Lifecycle != nil {
		t.Errorf("%s: the nri container has a lifecycle hook; the uninstall container holds the preStop", ds.Name)
	}

	// The uninstall container waits (hostprep wait) and holds the preStop:
	// hostprep uninstall with its real flags, and what it removes mounted.
	if !reflect.DeepEqual(unc.Args, []string{"hostprep", "wait"}) {
		t.Errorf("%s: uninstall container args %q, want hostprep wait", ds.Name, unc.Args)
	}
	mounts = mountsOf(spec, unc)
	if unc.Lifecycle == nil || unc.Lifecycle.PreStop == nil || unc.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("%s: the uninstall container has no preStop exec", ds.Name)
	}
	hook := unc.Lifecycle.PreStop.Exec.Command
	if len(hook) < 3 || hook[0] != "/opt/nvmock/bin/nvmock" || hook[1] != "hostprep" || hook[2] != "uninstall" {
		t.Fatalf("%s: preStop %q, want nvmock hostprep uninstall", ds.Name, hook)
	}
	un := parseArgs(t, "preStop", sourceFlags(t, "hostprep.go", "hostprepUninstall"), hook[3:])
	if un["root"] != set["root"] || un["cdi-dir"] != set["cdi-dir"] || un["nfd-dir"] != set["nfd-dir"] {
		t.Errorf("%s: uninstall --root %q --cdi-dir %q --nfd-dir %q, install's %q %q %q", ds.Name, un["root"], un["cdi-dir"], un["nfd-dir"], set["root"], set["cdi-dir"], set["nfd-dir"])
	}
	// Rendered, not $(VAR): hooks get no expansion. Its own DaemonSet, so a
	// restart keeps the overlay and only leaving the pool removes it.
	if want := releaseNS + "/" + ds.Name; un["unless-daemonset"] != want || ds.Namespace != releaseNS {
		t.Errorf("%s (namespace %s): uninstall --unless-daemonset %q, want its own DaemonSet %q", ds.Name, ds.Namespace, un["unless-daemonset"], want)
	}
	for _, dir := range []string{set["cdi-dir"], set["nfd-dir"]} {
		if mounts[dir] != "hostPath:"+dir {
			t.Errorf("%s: preStop removes files in %s, which the uninstall container does not mount", ds.Name, dir)
		}
	}
	// The preStop runs beside the plugin's end (KEP-753): it waits on the
	// port the plugin itself listens on, in the pod's network namespace.
	var listen string
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--listen="); ok && c.Name == "nri" {
				listen = v
			}
		}
	}
	if _, port, _ := strings.Cut(listen, ":"); listen == "" || un["after-plugin"] != "127.0.0.1:"+port {
		t.Errorf("%s: uninstall --after-plugin %q, want the plugin's own --listen %q on 127.0.0.1", ds.Name, un["after-plugin"], listen)
	}

	// Least privilege: each container mounts read-write only what it (or
	// its hook) writes. hostprep install writes the overlay, the CDI spec
	// and the NFD file, and the uninstall container's preStop removes them;
	// the plugin only reads the overlay and connects to the runtime's
	// socket (a read-only mount allows connect), and writes the live state
	// (the processes of GPU containers; nvmock ctl run in it) and the
	// fabric daemon's socket.
	wantRW := []string{set["root"], set["cdi-dir"], set["nfd-dir"]}
	sort.Strings(wantRW)
	for _, c := range []struct {
		ctr  corev1.Container
		want []string
	}{{init, wantRW}, {unc, wantRW}, {main, []string{set["root"] + "/ib", set["root"] + "/live"}}} {
		if got := writable(spec, c.ctr); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: container %s mounts %v read-write, want exactly %v", ds.Name, c.ctr.Name, got, c.want)
		}
	}

	// Privileges: the init container only adds MKNOD; the others add none.
	for _, c := range []struct {
		ctr corev1.Container
		add []corev1.Capability
	}{{init, []corev1.Capability{"MKNOD"}}, {main, nil}, {unc, nil}} {
		sc := c.ctr.SecurityContext
		if sc == nil || sc.Capabilities == nil {
			t.Fatalf("%s: container %s has no securityContext capabilities", ds.Name, c.ctr.Name)
		}
		if sc.Privileged != nil && *sc.Privileged ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			!reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
			!reflect.DeepEqual(sc.Capabilities.Add, c.add) {
			t.Errorf("%s: container %s: securityContext %+v, want unprivileged, ALL dropped, adding only %v", ds.Name, c.ctr.Name, sc, c.add)
		}
	}
}

// checkXIDLog: nvmock xidlog with its real flags on the installed node's
// state, privileged (only that opens /dev/kmsg) and writing only the live
// state's directory (its cursor).
func checkXIDLog(t *testing.T, ds appsv1.DaemonSet, c corev1.Container) {
	t.Helper()
	if c.Name != "xidlog" || len(c.Command) != 1 || c.Command[0] != "/opt/nvmock/bin/nvmock" || len(c.Args) < 1 || c.Args[0] != "xidlog" {
		t.Fatalf("%s: second container %s runs %q %q, want nvmock xidlog", ds.Name, c.Name, c.Command, c.Args)
	}
	set := parseArgs(t, "xidlog container", sourceFlags(t, "xidlog.go", "xidlogCmd"), c.Args[1:])
	// Where uninstall looks for what it leaves.
	state := filepath.Join("/var/lib/nvmock", hostprep.StateFile)
	if want := map[string]string{"state": state, "cursor": hostprep.XIDLogCursor(state)}; !reflect.DeepEqual(set, want) {
		t.Errorf("%s: xidlog flags %v, want %v", ds.Name, set, want)
	}
	spec := ds.Spec.Template.Spec
	if m, rw := mountsOf(spec, c), writable(spec, c); m["/var/lib/nvmock"] != "hostPath:/var/lib/nvmock" ||
		!reflect.DeepEqual(rw, []string{"/var/lib/nvmock/live"}) || m["/var/lib/nvmock/live"] != "hostPath:/var/lib/nvmock/live" {
		t.Errorf("%s: xidlog mounts %v (read-write: %v), want the overlay root read-only and its live directory", ds.Name, m, rw)
	}
	if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: xidlog securityContext %+v, want privileged with a read-only root", ds.Name, sc)
	}
}

// fieldRefs maps a container's env names to their downward API field paths.
func fieldRefs(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			m[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	return m
}

// writable are the paths a container mounts read-write, sorted; ConfigMaps
// are read-only whatever the mount says.
func writable(spec corev1.PodSpec, c corev1.Container) []string {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	var rw []string
	for _, vm := range c.VolumeMounts {
		if !vm.ReadOnly && vols[vm.Name].ConfigMap == nil {
			rw = append(rw, vm.MountPath)
		}
	}
	sort.Strings(rw)
	return rw
}

// mountsOf maps a container's mount paths to "hostPath:PATH" or
// "configMap:NAME".
func mountsOf(spec corev1.PodSpec, c corev1.Container) map[string]string {
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	m := map[string]string{}
	for _, vm := range c.VolumeMounts {
		v := vols[vm.Name]
		switch {
		case v.HostPath != nil:
			m[vm.MountPath] = "hostPath:" + v.HostPath.Path
		case v.ConfigMap != nil:
			m[vm.MountPath] = "configMap:" + v.ConfigMap.Name
		default:
			m[vm.MountPath] = "unknown volume " + vm.Name
		}
	}
	return m
}

// checkRBAC: the ServiceAccount the pods run as may patch nodes (hostprep
// labels its node with one PATCH), get nodes (preStop reads its node's
// labels), list and watch namespaces, and get DaemonSets in the release
// namespace only (preStop asks whether its pool still runs on the node), and
// nothing else.
func checkRBAC(t *testing.T, o objects) {
	t.Helper()
	if len(o.accounts) != 1 || len(o.roles) != 1 || len(o.roleBindings) != 1 || len(o.nsRoles) != 1 || len(o.nsBindings) != 1 {
		t.Fatalf("%d ServiceAccounts, %d ClusterRoles, %d ClusterRoleBindings, %d Roles, %d RoleBindings; want one each",
			len(o.accounts), len(o.roles), len(o.roleBindings), len(o.nsRoles), len(o.nsBindings))
	}
	got := grants(t, o.roles[0].Rules)
	want := []string{"/namespaces:list", "/namespaces:watch", "/nodes:get", "/nodes:patch"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole grants %v, want exactly %v", got, want)
	}
	role := o.nsRoles[0]
	if got, want := grants(t, role.Rules), []string{"apps/daemonsets:get", "apps/daemonsets:list"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Role grants %v, want exactly %v", got, want)
	}
	if role.Namespace != releaseNS || o.nsBindings[0].Namespace != releaseNS {
		t.Errorf("Role in %q and RoleBinding in %q, want both in the release namespace %q", role.Namespace, o.nsBindings[0].Namespace, releaseNS)
	}
	if rb := o.nsBindings[0]; rb.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}) ||
		!reflect.DeepEqual(rb.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: o.accounts[0].Name, Namespace: releaseNS}}) {
		t.Errorf("RoleBinding %+v does not bind Role %s to ServiceAccount %s/%s", rb, role.Name, releaseNS, o.accounts[0].Name)
	}
	sa, b := o.accounts[0], o.roleBindings[0]
	if b.RoleRef != (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: o.roles[0].Name}) ||
		!reflect.DeepEqual(b.Subjects, []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: releaseNS}}) {
		t.Errorf("ClusterRoleBinding %+v does not bind ClusterRole %s to ServiceAccount %s/%s", b, o.roles[0].Name, releaseNS, sa.Name)
	}
	for _, ds := range o.daemonSets {
		if ds.Spec.Template.Spec.ServiceAccountName != sa.Name {
			t.Errorf("%s runs as ServiceAccount %q, want %q", ds.Name, ds.Spec.Template.Spec.ServiceAccountName, sa.Name)
		}
	}
	if !strings.HasPrefix(sa.Name, "nvmock") {
		t.Errorf("ServiceAccount %q", sa.Name)
	}
}

// grants flattens rules into sorted "group/resource:verb" strings; a rule
// that names resources or non-resource URLs is an error.
func grants(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	var got []string
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v: resourceNames and nonResourceURLs are not expected", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					got = append(got, g+"/"+res+":"+v)
				}
			}
		}
	}
	sort.Strings(got)
	return got
}

// checkPreDelete checks the pre-delete hook: a Job, as its own ServiceAccount
// allowed only to get and delete the pools' DaemonSets, runs hostprep
// pre-delete with its real flags on each of them, unprivileged.
func checkPreDelete(t *testing.T, o objects, pools []pool) {
	t.Helper()
	h := o.hooks
	if len(h.accounts) != 1 || len(h.nsRoles) != 1 || len(h.nsBindings) != 1 || len(h.jobs) != 1 ||
		len(h.roles)+len(h.roleBindings)+len(h.daemonSets)+len(h.configMaps) != 0 {
		t.Fatalf("pre-delete hook: %d ServiceAccounts, %d Roles, %d RoleBindings, %d Jobs and %d other objects; want one each of the first four",
			len(h.accounts), len(h.nsRoles), len(h.nsBindings), len(h.jobs), len(h.roles)+len(h.roleBindings)+len(h.daemonSets)+len(h.configMaps))
	}
	sa, role, rb, job := h.accounts[0], h.nsRoles[0], h.nsBindings[0], h.jobs[0]
	for _, m := range []metav1.ObjectMeta{sa.ObjectMeta, role.ObjectMeta, rb.ObjectMeta, job.ObjectMeta} {
		if m.Annotations["helm.sh/hook"] != "pre-delete" || m.Namespace != releaseNS {
			t.Errorf("pre-delete hook object %s: hook %q in namespace %q, want pre-delete in %q", m.Name, m.Annotations["helm.sh/hook"], m.Namespace, releaseNS)
		}
	}
	var want []string
	for _, p := range pools {
		want = append(want, "nvmock-"+p.name)
	}
	sort.Strings(want)
	if len(role.Rules) != 1 || !reflect.DeepEqual(role.Rules[0].APIGroups, []string{"apps"}) ||
		!reflect.DeepEqual(role.Rules[0].Resources, []string{"daemonsets"}) ||
		!reflect.DeepEqual(role.Rules[0].Verbs, []string{"get", "delete"}) ||
		!reflect.DeepEqual(sorted(role.Rules[0].ResourceNames), want) {
		t.Errorf("pre-delete Role rules %+v, want get and delete on the DaemonSets %v only", role.Rules, want)
	}
	if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != sa.Name {
		t.Errorf("pre-delete RoleBinding %+v does not bind %s to %s", rb, role.Name, sa.Name)
	}
	spec := job.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name || len(spec.Containers) != 1 {
		t.Fatalf("pre-delete Job runs as %q with %d containers, want %s and one", spec.ServiceAccountName, len(spec.Containers), sa.Name)
	}
	c := spec.Containers[0]
	if len(c.Args) < 2 || c.Args[0] != "hostprep" || c.Args[1] != "pre-delete" {
		t.Fatalf("pre-delete Job args %q, want hostprep pre-delete ...", c.Args)
	}
	set := parseArgs(t, "pre-delete Job", sourceFlags(t, "hostprep.go", "hostprepPreDelete"), c.Args[2:])
	var sets []string
	for _, n := range want {
		sets = append(sets, releaseNS+"/"+n)
	}
	if got := sorted(strings.Split(set["daemonset"], ",")); !reflect.DeepEqual(got, sets) {
		t.Errorf("pre-delete Job deletes %v, want %v", got, sets)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.Capabilities == nil ||
		!reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("pre-delete Job securityContext %+v, want non-root with every capability dropped", sc)
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

// checkLive checks the live init container: nvmock ctl apply with its real
// flags, on the state in the overlay root, of the ConfigMap's live.yaml.
func checkLive(t *testing.T, ds appsv1.DaemonSet, c corev1.Container) {
	t.Helper()
	if len(c.Args) < 1 || c.Args[0] != "ctl" {
		t.Fatalf("%s: live init args %q, want ctl ...", ds.Name, c.Args)
	}
	fs := sourceFlags(t, "ctl.go", "ctlCmd")
	if err := fs.Parse(c.Args[1:]); err != nil {
		t.Fatalf("%s: live init args %q: %v", ds.Name, c.Args, err)
	}
	if fs.Lookup("state").Value.String() != "/var/lib/nvmock/live/state" || !reflect.DeepEqual(fs.Args(), []string{"apply", "/etc/nvmock/live.yaml"}) {
		t.Errorf("%s: live init args %q, want --state=/var/lib/nvmock/live/state apply /etc/nvmock/live.yaml", ds.Name, c.Args)
	}
	mounts := mountsOf(ds.Spec.Template.Spec, c)
	if mounts["/var/lib/nvmock/live"] != "hostPath:/var/lib/nvmock/live" || mounts["/etc/nvmock"] != "configMap:"+ds.Name {
		t.Errorf("%s: live init mounts %v, want the state's directory and the pool's ConfigMap", ds.Name, mounts)
	}
	if got := writable(ds.Spec.Template.Spec, c); !reflect.DeepEqual(got, []string{"/var/lib/nvmock/live"}) {
		t.Errorf("%s: live init mounts %v read-write, want only the state", ds.Name, got)
	}
}

// checkFabric: each pool's fabric daemons find each other through a
// headless Service of the pool's pods, on the port the plugin container
// listens on, and a NetworkPolicy admits that port from the pool's pods
// only.
func checkFabric(t *testing.T, o objects) {
	t.Helper()
	for i, ds := range o.daemonSets {
		pods := ds.Spec.Template.Labels
		var svc *corev1.Service
		for i := range o.services {
			if o.services[i].Name == ds.Name+"-fabric" {
				svc = &o.services[i]
			}
		}
		// A pool without InfiniBand has no fabric to join (review: its
		// Service pointed at a port nothing listens on).
		prof, err := profile.Parse("ConfigMap", []byte(o.configMaps[i].Data["profile.yaml"]))
		if err != nil {
			t.Fatal(err)
		}
		node, err := prof.Node()
		if err != nil {
			t.Fatal(err)
		}
		if node.IB == nil {
			for _, c := range ds.Spec.Template.Spec.Containers {
				for _, a := range c.Args {
					if strings.HasPrefix(a, "--ib-") {
						t.Errorf("%s (no InfiniBand): container %s has %s", ds.Name, c.Name, a)
					}
				}
				if len(c.Ports) > 0 && slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "fabric" }) {
					t.Errorf("%s (no InfiniBand): container %s has a fabric port", ds.Name, c.Name)
				}
			}
			if svc != nil {
				t.Errorf("%s (no InfiniBand): a fabric Service %s", ds.Name, svc.Name)
			}
			for _, pol := range o.policies {
				if pol.Name == ds.Name+"-fabric" {
					t.Errorf("%s (no InfiniBand): a fabric NetworkPolicy", ds.Name)
				}
			}
			continue
		}
		if svc == nil {
			t.Errorf("%s: no Service %s-fabric", ds.Name, ds.Name)
			continue
		}
		if svc.Spec.ClusterIP != "None" || !svc.Spec.PublishNotReadyAddresses || !reflect.DeepEqual(svc.Spec.Selector, pods) {
			t.Errorf("%s: Service %s is not headless over the pool's pods (selector %v, want %v)", ds.Name, svc.Name, svc.Spec.Selector, pods)
		}
		var nri corev1.Container
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "nri" {
				nri = c
			}
		}
		port := svc.Spec.Ports[0]
		listens := slices.Contains(nri.Args, fmt.Sprintf("--ib-listen=:%d", port.Port))
		dns := slices.Contains(nri.Args, fmt.Sprintf("--ib-peers-dns=%s.%s.svc", svc.Name, svc.Namespace))
		named := slices.ContainsFunc(nri.Ports, func(p corev1.ContainerPort) bool { return p.Name == "fabric" && p.ContainerPort == port.Port })
		if !listens || !dns || !named || port.TargetPort.StrVal != "fabric" {
			t.Errorf("%s: the plugin listens %v, looks peers up at the Service %v, names the port %v; Service targets %q", ds.Name, listens, dns, named, port.TargetPort.StrVal)
		}
		var pol *networkingv1.NetworkPolicy
		for i := range o.policies {
			if o.policies[i].Name == svc.Name {
				pol = &o.policies[i]
			}
		}
		if pol == nil || !reflect.DeepEqual(pol.Spec.PodSelector.MatchLabels, pods) || len(pol.Spec.Ingress) == 0 ||
			len(pol.Spec.Ingress[0].From) != 1 || !reflect.DeepEqual(pol.Spec.Ingress[0].From[0].PodSelector.MatchLabels, pods) ||
			pol.Spec.Ingress[0].Ports[0].Port.StrVal != "fabric" {
			t.Errorf("%s: NetworkPolicy %+v: want the fabric port open to the pool's pods only", ds.Name, pol)
		}
	}
}

// maxSurge rolls more nodes at once; maxUnavailable stays 0 whatever it is.
func TestMaxSurge(t *testing.T) {
	for _, c := range []struct{ values, want string }{
		{"maxSurge: 3", "3"},
		{`maxSurge: "25%"`, "25%"},
	} {
		files, err := render(t, c.values)
		if err != nil {
			t.Fatalf("%s: %v", c.values, err)
		}
		for _, ds := range decode(t, files).daemonSets {
			u := ds.Spec.UpdateStrategy.RollingUpdate
			if u == nil || u.MaxSurge == nil || u.MaxSurge.String() != c.want || u.MaxUnavailable == nil || u.MaxUnavailable.IntValue() != 0 {
				t.Errorf("%s: %s updateStrategy %+v, want maxSurge %s and maxUnavailable 0", c.values, ds.Name, ds.Spec.UpdateStrategy, c.want)
			}
		}
	}
}

// Two releases of one name in two namespaces share no cluster-scoped object
// (helm refuses to install the second over the first's).
func TestClusterObjectsNamedByNamespace(t *testing.T) {
	names := map[string]string{}
	// And release a in b-c and a-nvmock-b in c (review: joined by "-",
	// both were a-nvmock-b-c).
	for _, r := range [][2]string{{releaseName, "team-a"}, {releaseName, "team-b"}, {"a", "b-c"}, {"a-nvmock-b", "c"}} {
		release, ns := r[0], r[1]
		files, err := renderIn(t, release, ns, "", false)
		if err != nil {
			t.Fatal(err)
		}
		o := decode(t, files)
		for _, n := range []string{"ClusterRole " + o.roles[0].Name, "ClusterRoleBinding " + o.roleBindings[0].Name} {
			if other, ok := names[n]; ok {
				t.Errorf("release %s in %s and %s both make the cluster object %s", release, ns, other, n)
			}
			names[n] = release + " in " + ns
		}
		if b := o.roleBindings[0]; b.RoleRef.Name != o.roles[0].Name || b.Subjects[0].Namespace != ns {
			t.Errorf("%s: binding %+v", ns, b)
		}
	}
}
