package hostprep

import (
	"fmt"
	"strings"

	"github.com/nvmock/nvmock/libnvml/profile"
)

// NFDFile is the feature file's name in NFD's features.d directory.
const NFDFile = "nvmock"

// NFDFeatures is the feature file for node-feature-discovery's local source:
// the labels GPU feature discovery would put on a node with these GPUs
// (product and family in label-value spelling, memory in MiB).
func NFDFeatures(p *profile.Profile) string {
	b := p.Board
	labelValue := func(s string) string {
		return strings.Join(strings.Fields(s), "-")
	}
	return fmt.Sprintf("nvidia.com/gpu.present=true\nnvidia.com/gpu.product=%s\nnvidia.com/gpu.count=%d\nnvidia.com/gpu.memory=%d\nnvidia.com/gpu.family=%s\n",
		labelValue(b.ProductName), p.GPUs, uint64(b.Memory.Total)>>20, strings.ToLower(labelValue(b.Architecture)))
}
