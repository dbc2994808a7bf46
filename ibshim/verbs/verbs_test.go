//go:build integration

package verbs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nvmock/nvmock/internal/testenv"
)

// fixture is the sysfs tree the tools see (SYSFS_PATH); see testdata/README.md.
const fixture = "testdata/sys"

// nsScript runs a tool as on a mock node: in a private mount namespace,
// /dev is a tmpfs holding /dev/null and the /dev/infiniband/uverbsN nodes
// with the numbers sysfs gives them (libibverbs opens that hard-coded path
// and compares its rdev with sysfs), and /etc/libibverbs.d may be replaced.
const nsScript = `fail() { echo "nvmock-test: namespace setup: $*" >&2; exit 125; }
mount -t tmpfs -o mode=755 nvmock-test-dev /dev || fail "tmpfs on /dev"
mknod -m 666 /dev/null c 1 3 || fail "mknod /dev/null"
mkdir /dev/infiniband || fail "mkdir /dev/infiniband"
for n in $NVMOCK_TEST_CDEVS; do
	mm=${n#*=}
	mknod -m 666 "/dev/infiniband/${n%%=*}" c "${mm%%:*}" "${mm#*:}" || fail "mknod $n"
done
if [ -n "$NVMOCK_TEST_CONFDIR" ]; then
	mount --bind "$NVMOCK_TEST_CONFDIR" /etc/libibverbs.d || fail "bind $NVMOCK_TEST_CONFDIR on /etc/libibverbs.d"
fi
exec "$@"
`

// setup is how libibverbs is pointed at the provider for one run.
type setup struct {
	drivers string // RDMAV_DRIVERS
	confDir string // replaces /etc/libibverbs.d when set
	sysfs   string // SYSFS_PATH; the fixture when empty
	preload string // LD_PRELOAD
}

type result struct {
	stdout, stderr string
	code           int
}

// provider is what libibverbs is told to load: the built .so without the
// "-rdmav34.so" it appends.
func provider(t *testing.T) string {
	t.Helper()
	so := filepath.Join(testenv.BuildDir(), "driver", "usr", "lib64", "libibverbs", "libnvmock-rdmav34.so")
	if _, err := os.Stat(so); err != nil {
		testenv.Missing(t, "provider %s (run make build)", so)
	}
	abs, err := filepath.Abs(so)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(abs, "-rdmav34.so")
}

// run runs a real tool against a sysfs tree with NVMOCK_TRACE on, so that
// stderr says which CAs the provider opened.
func run(t *testing.T, s setup, tool string, args ...string) result {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "root, for a private mount namespace with /dev/infiniband nodes")
	}
	// libibverbs asks the kernel over NETLINK_RDMA first and reads sysfs
	// only when it cannot (init.c ibverbs_get_device_list).
	if fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA); err == nil {
		unix.Close(fd)
		testenv.Missing(t, "a kernel without RDMA netlink: with it libibverbs lists the kernel's devices and ignores SYSFS_PATH")
	}
	path := testenv.Tool(t, tool)
	if s.sysfs == "" {
		s.sysfs = fixture
	}
	sysfs, err := filepath.Abs(s.sysfs)
	if err != nil {
		t.Fatal(err)
	}
	var cdevs []string
	for _, u := range uverbs(t, sysfs) {
		cdevs = append(cdevs, u+"="+readFile(t, sysfs, "class/infiniband_verbs", u, "dev"))
	}
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "SYSFS_PATH", "RDMAV_DRIVERS", "IBV_DRIVERS", "NVMOCK_TRACE", "IBV_SHOW_WARNINGS", "VERBS_LOG_LEVEL", "LD_PRELOAD":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "SYSFS_PATH="+sysfs, "NVMOCK_TRACE=1",
		"NVMOCK_TEST_CDEVS="+strings.Join(cdevs, " "), "NVMOCK_TEST_CONFDIR="+s.confDir)
	if s.drivers != "" {
		env = append(env, "RDMAV_DRIVERS="+s.drivers)
	}
	if s.preload != "" {
		env = append(env, "LD_PRELOAD="+s.preload)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", nsScript, "sh", path}, args...)...)
	cmd.Env = env
	// Go makes / recursively private in the child's new namespace.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
	var exit *exec.ExitError
	switch {
	case err != nil && !errors.As(err, &exit):
		if errors.Is(err, syscall.EPERM) {
			testenv.Missing(t, "a private mount namespace (CAP_SYS_ADMIN): %v", err)
		}
		t.Fatalf("%s %v: %v", tool, args, err)
	case exit != nil && exit.Sys().(syscall.WaitStatus).Signaled():
		t.Fatalf("%s %v died: %v\nstderr:\n%s", tool, args, err, r.stderr)
	case r.code == 125 && strings.Contains(r.stderr, "nvmock-test: namespace setup"):
		t.Fatalf("%s", r.stderr)
	}
	return r
}

func readFile(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(parts...))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return strings.TrimSuffix(string(b), "\n")
}

// numbered lists a directory's entries whose names are numbers, in order
// (ports, gids, pkeys), or the uverbsN entries of class/infiniband_verbs.
func numbered(t *testing.T, dir string, prefix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), prefix); ok {
			if _, err := strconv.Atoi(n); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(strings.TrimPrefix(out[i], prefix))
		b, _ := strconv.Atoi(strings.TrimPrefix(out[j], prefix))
		return a < b
	})
	return out
}

func uverbs(t *testing.T, sysfs string) []string {
	return numbered(t, filepath.Join(sysfs, "class", "infiniband_verbs"), "uverbs")
}

// ca is one CA of a sysfs tree.
type ca struct {
	t     *testing.T
	sysfs string
	name  string
}

func cas(t *testing.T, sysfs string) []ca {
	var out []ca
	for _, u := range uverbs(t, sysfs) {
		out = append(out, ca{t, sysfs, readFile(t, sysfs, "class/infiniband_verbs", u, "ibdev")})
	}
	if len(out) == 0 {
		t.Fatalf("fixture %s has no CAs", sysfs)
	}
	return out
}

func (c ca) file(rel ...string) string {
	return readFile(c.t, append([]string{c.sysfs, "class/infiniband", c.name}, rel...)...)
}

func (c ca) ports() []string {
	return numbered(c.t, filepath.Join(c.sysfs, "class/infiniband", c.name, "ports"), "")
}

func (c ca) count(port, table string) int {
	return len(numbered(c.t, filepath.Join(c.sysfs, "class/infiniband", c.name, "ports", port, table), ""))
}

// num is a sysfs number as the kernel writes it ("4: ACTIVE", "0x15", "0").
func num(t *testing.T, s string) uint64 {
	t.Helper()
	s, _, _ = strings.Cut(s, ":")
	n, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
	if err != nil {
		t.Fatalf("fixture: %q is not a number", s)
	}
	return n
}

var (
	portStates = map[uint64]string{1: "PORT_DOWN", 2: "PORT_INIT", 3: "PORT_ARMED", 4: "PORT_ACTIVE"}
	physStates = map[uint64]string{1: "SLEEP", 2: "POLLING", 3: "DISABLED", 5: "LINK_UP"}
	// ibv_port_attr's encodings as ibv_devinfo prints them.
	widths = map[string]string{"1X": "1X (1)", "2X": "2X (16)", "4X": "4X (2)", "8X": "8X (4)", "12X": "12X (8)"}
	speeds = map[string]string{"": "2.5 Gbps (1)", "DDR": "5.0 Gbps (2)", "QDR": "10.0 Gbps (4)",
		"FDR10": "10.0 Gbps (8)", "FDR": "14.0 Gbps (16)", "EDR": "25.0 Gbps (32)",
		"HDR": "50.0 Gbps (64)", "NDR": "100.0 Gbps (128)"}
)

// want is what ibv_devinfo must print for c: device fields, then one map
// per port.
func (c ca) want(verbose bool) (map[string]string, []map[string]string) {
	t := c.t
	transport := "invalid transport"
	if n := num(t, c.file("node_type")); n >= 1 && n <= 3 { // CA, switch, router
		transport = "InfiniBand (0)"
	}
	dev := map[string]string{
		"transport":      transport,
		"fw_ver":         c.file("fw_ver"),
		"node_guid":      c.file("node_guid"),
		"sys_image_guid": c.file("sys_image_guid"),
		"vendor_id":      "0x02c9", // Mellanox, as every ConnectX reports
		"vendor_part_id": strings.TrimPrefix(c.file("hca_type"), "MT"),
		"hw_ver":         "0x0",
		"board_id":       c.file("board_id"),
		"phys_port_cnt":  strconv.Itoa(len(c.ports())),
	}
	var ports []map[string]string
	for _, p := range c.ports() {
		f := func(name string) string { return c.file("ports", p, name) }
		state := num(t, f("state"))
		m := map[string]string{
			"port":       p,
			"state":      fmt.Sprintf("%s (%d)", portStates[state], state),
			"max_mtu":    "4096 (5)",
			"active_mtu": "4096 (5)",
			"sm_lid":     strconv.FormatUint(num(t, f("sm_lid")), 10),
			"port_lid":   strconv.FormatUint(num(t, f("lid")), 10),
			"port_lmc":   fmt.Sprintf("0x%02x", num(t, f("lid_mask_count"))),
			"link_layer": f("link_layer"),
		}
		if verbose {
			// "400 Gb/sec (4X NDR)": lanes and signalling class.
			_, lanes, _ := strings.Cut(f("rate"), "(")
			lanes, class, _ := strings.Cut(strings.TrimSuffix(lanes, ")"), " ")
			phys := num(t, f("phys_state"))
			m["port_cap_flags"] = fmt.Sprintf("0x%08x", num(t, f("cap_mask")))
			m["sm_sl"] = strconv.FormatUint(num(t, f("sm_sl")), 10)
			m["pkey_tbl_len"] = strconv.Itoa(c.count(p, "pkeys"))
			m["gid_tbl_len"] = strconv.Itoa(c.count(p, "gids"))
			m["active_width"] = widths[lanes]
			m["active_speed"] = speeds[class]
			m["phys_state"] = fmt.Sprintf("%s (%d)", physStates[phys], phys)
			for i := 0; i < c.count(p, "gids"); i++ {
				gid := c.file("ports", p, "gids", strconv.Itoa(i))
				if strings.HasSuffix(gid, "0000:0000:0000:0000") { // unset, not printed
					continue
				}
				suffix, v2 := "", c.file("ports", p, "gid_attrs", "types", strconv.Itoa(i)) == "RoCE v2"
				if m["link_layer"] == "Ethernet" {
					suffix = ", RoCE v1"
					if v2 {
						suffix = ", RoCE v2"
					}
				}
				if v2 { // printed by inet_ntop
					gid = net.ParseIP(gid).String()
				}
				m[fmt.Sprintf("GID[%3d]", i)] = gid + suffix
			}
		}
		ports = append(ports, m)
	}
	return dev, ports
}

// hca is one hca_id block of ibv_devinfo's output.
type hca struct {
	dev   map[string]string
	ports []map[string]string
}

// field is a device-level field of h, "" if h was not printed at all.
func (h *hca) field(key string) string {
	if h == nil {
		return ""
	}
	return h.dev[key]
}

// parseDevinfo reads "key:<tabs>value" lines; a port block starts at
// "port:" and holds the deeper lines after it. Flag lists (lines without a
// colon) are skipped; a repeated key keeps its first value.
func parseDevinfo(out string) map[string]*hca {
	hcas := map[string]*hca{}
	var cur *hca
	for _, line := range strings.Split(out, "\n") {
		if id, ok := strings.CutPrefix(line, "hca_id:"); ok {
			cur = &hca{dev: map[string]string{}}
			hcas[strings.TrimSpace(id)] = cur
			continue
		}
		trimmed := strings.TrimLeft(line, "\t")
		key, val, ok := strings.Cut(trimmed, ":")
		if cur == nil || !ok {
			continue
		}
		val = strings.TrimSpace(val)
		depth := len(line) - len(trimmed)
		switch {
		case key == "port" && depth == 2:
			cur.ports = append(cur.ports, map[string]string{"port": val})
		case depth >= 3 && len(cur.ports) > 0:
			if p := cur.ports[len(cur.ports)-1]; p[key] == "" {
				p[key] = val
			}
		case cur.dev[key] == "":
			cur.dev[key] = val
		}
	}
	return hcas
}

// compare reports every field of want that got lacks or differs in.
func compare(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %s missing (want %q)", what, k, want[k])
		} else if g != want[k] {
			t.Errorf("%s: %s = %q, want %q", what, k, g, want[k])
		}
	}
}

// checkDevinfo compares ibv_devinfo's output with every CA of a sysfs tree.
func checkDevinfo(t *testing.T, sysfs string, r result, verbose bool) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("ibv_devinfo exited %d\nstderr:\n%s", r.code, r.stderr)
	}
	got := parseDevinfo(r.stdout)
	for _, c := range cas(t, sysfs) {
		h, ok := got[c.name]
		if !ok {
			t.Errorf("hca_id %s missing from:\n%s", c.name, r.stdout)
			continue
		}
		if !strings.Contains(r.stderr, "nvmock-verbs: "+c.name+": opened as ") {
			t.Errorf("%s was not opened by the nvmock provider; stderr:\n%s", c.name, r.stderr)
		}
		wantDev, wantPorts := c.want(verbose)
		compare(t, c.name, wantDev, h.dev)
		if len(h.ports) != len(wantPorts) {
			t.Errorf("%s: %d ports printed, want %d", c.name, len(h.ports), len(wantPorts))
			continue
		}
		for i, wp := range wantPorts {
			compare(t, c.name+" port "+wp["port"], wp, h.ports[i])
			var gids []string
			for k := range h.ports[i] {
				if strings.HasPrefix(k, "GID[") {
					if _, ok := wp[k]; !ok {
						gids = append(gids, k)
					}
				}
			}
			if len(gids) > 0 {
				t.Errorf("%s port %s: unexpected %v", c.name, wp["port"], gids)
			}
		}
		if !verbose {
			if _, ok := h.dev["max_qp"]; ok {
				t.Errorf("%s: max_qp printed without -v", c.name)
			}
			continue
		}
		// Limits from the provider's ConnectX table, not from sysfs: real
		// ones are never 0.
		for _, k := range []string{"max_mr_size", "page_size_cap", "max_qp", "max_qp_wr", "max_sge",
			"max_cq", "max_cqe", "max_mr", "max_pd", "max_srq", "max_pkeys", "local_ca_ack_delay", "num_comp_vectors"} {
			if v, err := strconv.ParseUint(h.dev[k], 0, 64); err != nil || v == 0 {
				t.Errorf("%s: %s = %q, want a non-zero number", c.name, k, h.dev[k])
			}
		}
		if h.dev["atomic_cap"] != "ATOMIC_HCA (1)" {
			t.Errorf("%s: atomic_cap = %q, want ConnectX's ATOMIC_HCA (1)", c.name, h.dev["atomic_cap"])
		}
	}
	if len(got) != len(cas(t, sysfs)) {
		t.Errorf("%d hca_id blocks, want %d:\n%s", len(got), len(cas(t, sysfs)), r.stdout)
	}
}

func TestIbvDevicesListsEveryCAWithItsNodeGUID(t *testing.T) {
	r := run(t, setup{drivers: provider(t)}, "ibv_devices")
	if r.code != 0 {
		t.Fatalf("ibv_devices exited %d\nstderr:\n%s", r.code, r.stderr)
	}
	lines := testenv.Lines(r.stdout)
	if len(lines) < 2 {
		t.Fatalf("ibv_devices printed no header:\n%s", r.stdout)
	}
	got := map[string]string{}
	for _, l := range lines[2:] { // after the header and its underline
		if f := strings.Fields(l); len(f) == 2 {
			got[f[0]] = f[1]
		}
	}
	want := map[string]string{}
	for _, c := range cas(t, fixture) {
		want[c.name] = strings.ReplaceAll(c.file("node_guid"), ":", "")
	}
	compare(t, "ibv_devices", want, got)
	if len(got) != len(want) {
		t.Errorf("ibv_devices listed %v, want %v", got, want)
	}
}

func TestIbvDevinfoListNamesEveryCA(t *testing.T) {
	r := run(t, setup{drivers: provider(t)}, "ibv_devinfo", "-l")
	if r.code != 0 {
		t.Fatalf("ibv_devinfo -l exited %d\nstderr:\n%s", r.code, r.stderr)
	}
	lines := testenv.Lines(r.stdout)
	var want []string
	for _, c := range cas(t, fixture) {
		want = append(want, c.name)
	}
	if head := fmt.Sprintf("%d HCAs found:", len(want)); len(lines) == 0 || lines[0] != head {
		t.Fatalf("ibv_devinfo -l: first line %q, want %q\n%s", lines, head, r.stdout)
	}
	var got []string
	for _, l := range lines[1:] {
		got = append(got, strings.TrimSpace(l))
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ibv_devinfo -l listed %q, want %q", got, want)
	}
}

func TestIbvDevinfoShowsTheFixture(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		verbose bool
	}{
		{"without -v, identity and port state", nil, false},
		{"with -v, also limits, rates and GIDs", []string{"-v"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkDevinfo(t, fixture, run(t, setup{drivers: provider(t)}, "ibv_devinfo", tc.args...), tc.verbose)
		})
	}
}

// Debian's mlx5 provider matches the mock CAs' real Mellanox modalias and,
// talking to /dev/null, "opens" them with every attribute 0. RDMAV_DRIVERS
// providers are loaded before any /etc/libibverbs.d entry and libibverbs
// tries providers in load order, so ours claims them first.
func TestProviderClaimsMockCAsAheadOfDebianMlx5(t *testing.T) {
	mlx5 := "/etc/libibverbs.d/mlx5.driver"
	data, err := os.ReadFile(mlx5)
	if err != nil {
		testenv.Missing(t, "Debian's %s (package ibverbs-providers): %v", mlx5, err)
	}
	conf := t.TempDir()
	if err := os.WriteFile(filepath.Join(conf, "mlx5.driver"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("with RDMAV_DRIVERS the provider opens every mock CA", func(t *testing.T) {
		checkDevinfo(t, fixture, run(t, setup{drivers: provider(t), confDir: conf}, "ibv_devinfo", "-v"), true)
	})
	// The control: the check above can fail.
	t.Run("with mlx5 alone the fixture's values are lost", func(t *testing.T) {
		r := run(t, setup{confDir: conf}, "ibv_devinfo")
		got := parseDevinfo(r.stdout)
		for _, c := range cas(t, fixture) {
			if fw := got[c.name].field("fw_ver"); fw == c.file("fw_ver") {
				t.Errorf("%s: fw_ver %q without the nvmock provider; is mlx5 still matching the mock CAs?", c.name, fw)
			}
		}
		if strings.Contains(r.stderr, "nvmock-verbs:") {
			t.Errorf("the nvmock provider was loaded without being configured:\n%s", r.stderr)
		}
	})
}

// A program linked against libmlx5 (perftest, UCX) registers mlx5 before
// libibverbs loads the nvmock provider, and mlx5 matches the mock CAs by
// their PCI ids. The umad shim, preloaded wherever the planes are, keeps it
// off them. Preloading libmlx5 stands for linking it: its constructor
// registers the provider either way.
func TestProvidersLinkedIntoTheProgramLeaveMockCAsToNvmock(t *testing.T) {
	libs, _ := filepath.Glob("/usr/lib/*/libmlx5.so.1")
	if len(libs) == 0 {
		testenv.Missing(t, "Debian's libmlx5.so.1 (package ibverbs-providers)")
	}
	mlx5 := libs[0]
	shim := filepath.Join(testenv.BuildDir(), "driver", "usr", "lib64", "nvmock", "libnvmock-umad.so")
	if _, err := os.Stat(shim); err != nil {
		testenv.Missing(t, "the umad shim %s (run make driver)", shim)
	}
	shim, _ = filepath.Abs(shim)
	t.Run("with the shim the provider opens every mock CA", func(t *testing.T) {
		checkDevinfo(t, fixture, run(t, setup{drivers: provider(t), preload: shim + ":" + mlx5}, "ibv_devinfo", "-v"), true)
	})
	// The control: without the shim mlx5 takes them.
	t.Run("without the shim mlx5 takes them", func(t *testing.T) {
		r := run(t, setup{drivers: provider(t), preload: mlx5}, "ibv_devinfo")
		got := parseDevinfo(r.stdout)
		for _, c := range cas(t, fixture) {
			if fw := got[c.name].field("fw_ver"); fw == c.file("fw_ver") {
				t.Errorf("%s: fw_ver %q: mlx5 did not take the CA; the test above proves nothing", c.name, fw)
			}
		}
	})
}

func TestProviderLoadsFromAConfigFileAlone(t *testing.T) {
	conf := t.TempDir()
	line := "driver " + provider(t) + "\n"
	if err := os.WriteFile(filepath.Join(conf, "nvmock.driver"), []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	checkDevinfo(t, fixture, run(t, setup{confDir: conf}, "ibv_devinfo"), false)
}

func TestIbvDevinfoFailsForANameThatIsNoCA(t *testing.T) {
	r := run(t, setup{drivers: provider(t)}, "ibv_devinfo", "-d", "nosuchdev")
	if r.code == 0 {
		t.Fatalf("ibv_devinfo -d nosuchdev exited 0\nstdout:\n%s", r.stdout)
	}
	if want := "IB device 'nosuchdev' wasn't found"; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not say %q", r.stderr, want)
	}
}

// A CA whose hca_type has no ConnectX entry fails to open (the provider
// does not invent limits); the others still work.
func TestUnknownHCATypeFailsToOpenAndSparesTheOthers(t *testing.T) {
	sysfs := filepath.Join(t.TempDir(), "sys")
	if err := os.CopyFS(sysfs, os.DirFS(fixture)); err != nil {
		t.Fatal(err)
	}
	all := cas(t, sysfs)
	bad := all[0]
	if err := os.WriteFile(filepath.Join(sysfs, "class/infiniband", bad.name, "hca_type"), []byte("MT4099\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, setup{drivers: provider(t), sysfs: sysfs}, "ibv_devinfo", "-d", bad.name)
	if r.code == 0 || !strings.Contains(r.stderr, "Failed to open device") {
		t.Errorf("ibv_devinfo -d %s: exit %d, stderr %q; want a failure to open", bad.name, r.code, r.stderr)
	}
	if want := `hca_type "MT4099" is not a known ConnectX`; !strings.Contains(r.stderr, want) {
		t.Errorf("stderr %q does not say %q", r.stderr, want)
	}
	for _, c := range all[1:] {
		r := run(t, setup{drivers: provider(t), sysfs: sysfs}, "ibv_devinfo", "-d", c.name)
		if r.code != 0 || parseDevinfo(r.stdout)[c.name].field("fw_ver") != c.file("fw_ver") {
			t.Errorf("ibv_devinfo -d %s: exit %d\nstdout:\n%s\nstderr:\n%s", c.name, r.code, r.stdout, r.stderr)
		}
	}
}
