//go:build integration

package ibshim_test

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nvmock/nvmock/internal/testenv"
)

// rdma-core's own verbs test suite (Debian's python3-pyverbs ships it),
// run against an exec'd node's mlx5_0. The suite skips what a device
// lacks; every reason it gives here must be one below, so that a verb the
// mock simulates cannot quietly turn into a skip.
var suiteSkips = []struct{ reason, why string }{
	// Not the mock's to have: another provider's direct verbs, another
	// link layer, the host's hardware or packages.
	{`Could not open mlx5 context|mlx5dv_query_port\(\) isn't supported|Alloc reserved QP number|UAR allocation|VAR allocation|schedule elements|Set LAG affinity|Crypto login|scapy package|PCI device must be passed|Converting timestamp to nanoseconds`, "mlx5's direct verbs, which need mlx5's own provider"},
	{`Can not run the test over non EFA device`, "EFA's"},
	{`Ethernet link layer|skip RoCE test|doesn't have net interface|No supported port is up`, "RoCE and IPoIB: an InfiniBand port has no netdev here"},
	{`dmabuf|cuda-python|huge pages`, "GPU memory and huge pages: this host's"},
	// Simulated by no mock verb yet (docs/infiniband.md says why).
	{`Extended QP is not supported on this device`, "atomic write"},
}

// suiteErrors are the tests that fail here, each with what its failure
// must say: importing a context needs uverbs' command file descriptor
// (ibv_import_device: ENODEV), and tag matching is not simulated (the
// device's capabilities, a real ConnectX-6's, claim it; the suite then
// makes a TM SRQ, which the mock refuses, EOPNOTSUPP). A failure for any
// other reason fails the test (review: any was taken).
var suiteErrors = map[string]string{
	"test_import_dm":                 importRefused,
	"test_imported_rc_ex_rdma_write": importRefused,
	"test_tm_traffic":                tmRefused,
	"test_tm_unexpected_tag":         tmRefused,
	"test_tm_no_tag":                 tmRefused,
	"test_tm_rndv":                   tmRefused,
}

const (
	importRefused = "PyverbsRDMAError: Failed to import device. Errno: 19, No such device"
	tmRefused     = "PyverbsRDMAError: Failed to create SRQ (errno is 95). Errno: 95, Operation not supported"
)

// failures are the suite's ERROR and FAIL reports by test name: each from
// its header to the next report or the summary.
func failures(out string) map[string]string {
	m := map[string]string{}
	re := regexp.MustCompile(`(?m)^(?:ERROR|FAIL): (\w+) \(`)
	locs := re.FindAllStringSubmatchIndex(out, -1)
	for i, l := range locs {
		end := len(out)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		if j := strings.Index(out[l[1]:end], "\nRan "); j >= 0 {
			end = l[1] + j
		}
		m[out[l[2]:l[3]]] = out[l[0]:end]
	}
	return m
}

func TestRdmaCoreVerbsSuite(t *testing.T) {
	py := "/usr/bin/python3" // Debian's, which pyverbs is built for
	src := "/usr/share/doc/rdma-core/tests"
	if _, err := os.Stat(filepath.Join(src, "run_tests.py")); err != nil {
		testenv.Missing(t, "rdma-core's test suite (Debian's python3-pyverbs): %v", err)
	}
	dir := filepath.Join(t.TempDir(), "tests")
	copySuite(t, src, dir)
	// -W ignore: the suite's DeprecationWarnings would come between a
	// test's name and its outcome. It exits 1 for the import tests.
	out := node(t, "cd "+dir+" && "+py+" -W ignore run_tests.py --dev mlx5_0 -v 2>&1; echo \"suite exit $?\"")

	res := suiteResults(out)
	ran := regexp.MustCompile(`(?m)^Ran (\d+) tests`).FindStringSubmatch(out)
	if ran == nil || ran[1] != strconv.Itoa(len(res)) || len(res) < 250 {
		t.Fatalf("%d results read, the suite says %v:\n%s", len(res), ran, out)
	}
	allowed := make([]*regexp.Regexp, len(suiteSkips))
	for i, s := range suiteSkips {
		allowed[i] = regexp.MustCompile(s.reason)
	}
	var bad []string
	passed := 0
	reports := failures(out)
	for name, r := range res {
		switch {
		case r == "ok":
			passed++
		case strings.HasPrefix(r, "skipped "):
			known := false
			for _, re := range allowed {
				known = known || re.MatchString(r)
			}
			if !known {
				bad = append(bad, name+": "+r)
			}
		case suiteErrors[name[strings.LastIndex(name, ".")+1:]] != "":
			test := name[strings.LastIndex(name, ".")+1:]
			if !strings.Contains(reports[test], suiteErrors[test]) {
				bad = append(bad, fmt.Sprintf("%s: %s, not with %q:\n%s", name, r, suiteErrors[test], reports[test]))
			}
		default:
			bad = append(bad, name+": "+r)
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("%d tests failed or skipped for a reason the mock should not give:\n%s\n\noutput:\n%s", len(bad), strings.Join(bad, "\n"), out)
	}
	// What the mock simulates must run and pass: among them the verbs
	// this suite first found missing or wrong here.
	for _, name := range []string{
		"test_query_device_ex", "test_phys_port_cnt_ex", "test_query_gid_table", "test_query_port",
		"test_create_ud_qp_ex_no_attr", "test_query_ud_qp", "test_prefer_obj_on_huge",
		"test_rc_traffic_cq_ex", "test_ud_traffic_cq_ex", "test_xrc_traffic_cq_ex", "test_cq_events_rc",
		"test_atomic_cmp_and_swap", "test_qp_ex_rc_rdma_write", "test_qp_ex_xrc_send", "test_resize_cq",
		"test_create_dm", "test_destroy_dm", "test_destroy_dm_bad_flow", "test_create_dm_bad_flow",
		"test_dm_read", "test_dm_write", "test_dm_write_bad_flow", "test_multi_process_alloc_dm",
		"test_create_dm_mr", "test_dm_bad_access", "test_dm_bad_registration", "test_dm_traffic", "test_dm_remote_traffic",
		"test_mr_rereg_access", "test_mr_rereg_access_bad_flow", "test_mr_rereg_addr", "test_mr_rereg_pd",
		"test_mw_type1", "test_invalidate_mw_type1", "test_mw_type2", "test_mw_type2_invalidate_local",
		"test_mw_type2_invalidate_remote", "test_mw_type2_invalidate_dealloc", "test_reg_mw_wrong_type",
		"test_qp_ex_rc_bind_mw",
		"test_without_allocators_rc_traffic", "test_default_allocators_rc_traffic", "test_mem_align_rc_traffic",
		"test_mem_align_ud_traffic", "test_mem_align_srq_excq_rc_traffic", "test_timestamp_real_time_rc_traffic",
		"test_odp_rc_traffic", "test_odp_ud_traffic", "test_odp_xrc_traffic", "test_odp_rc_srq_traffic",
		"test_odp_rc_rdma_write", "test_odp_rc_rdma_read", "test_odp_rc_atomic_fetch_and_add",
		"test_odp_implicit_rc_traffic", "test_odp_implicit_sync_prefetch_rc_traffic",
		"test_odp_implicit_async_prefetch_rc_traffic", "test_odp_sync_prefetch_rc_traffic",
		"test_odp_async_prefetch_rc_traffic", "test_odp_prefetch_sync_no_page_fault_rc_traffic",
	} {
		n := 0
		for id, r := range res {
			if strings.HasSuffix(id, "."+name) {
				n++
				if r != "ok" {
					t.Errorf("%s: %q, want ok", id, r)
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: not in the suite's output", name)
		}
	}
	t.Logf("%d of %d tests passed", passed, len(res))
}

// suiteResults maps each test (module.Class.test_name: two classes may
// have tests of one name) to its outcome as unittest -v prints
// it: "ok", "skipped 'why'", "ERROR" or "FAIL". A test's docstring, when it
// has one, comes between its name and " ... ", and what a test prints
// comes between that and its outcome.
func suiteResults(out string) map[string]string {
	start := regexp.MustCompile(`^test_\w+ \(([\w.]+)\)`)
	outcome := regexp.MustCompile(`(?:^| \.\.\. )(ok|skipped .*|ERROR|FAIL|expected failure|unexpected success)$`)
	res := map[string]string{}
	name := ""
	for _, line := range strings.Split(out, "\n") {
		if m := start.FindStringSubmatch(line); m != nil {
			name = m[1]
		}
		if m := outcome.FindStringSubmatch(line); m != nil && name != "" {
			res[name] = m[1]
			name = ""
		}
	}
	return res
}

// copySuite copies the suite to dir, unpacking the modules Debian gzipped.
func copySuite(t *testing.T, src, dir string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		var r io.Reader = in
		name := e.Name()
		if strings.HasSuffix(name, ".gz") {
			z, err := gzip.NewReader(in)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			r, name = z, strings.TrimSuffix(name, ".gz")
		}
		b, err := io.ReadAll(r)
		in.Close()
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
