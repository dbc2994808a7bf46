package hostprep_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/nvmock/nvmock/hostprep"
	"github.com/nvmock/nvmock/hostprep/nsexec"
	"github.com/nvmock/nvmock/internal/testenv"
)

// nvmock exec renders an overlay on every run, into a tmpfs where there
// is one (nsexec.TempDir).
func BenchmarkRenderForExec(b *testing.B) {
	assets := realAssets(b)
	for _, name := range []string{"t4", "h100"} {
		b.Run(name, func(b *testing.B) {
			p := testenv.Profile(b, name, 0)
			dir, err := os.MkdirTemp(nsexec.TempDir(), "bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(dir)
			i := 0
			for b.Loop() {
				out := filepath.Join(dir, strconv.Itoa(i))
				if _, err := hostprep.Render(out, hostprep.Options{
					Profile: p, NodeName: "bench", Assets: assets, SharedMIGProc: true, SharedMIGNodes: true,
					SharedIBTables: true, NoPCI: true, BindAssets: true,
				}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				os.RemoveAll(out)
				b.StartTimer()
				i++
			}
		})
	}
}
