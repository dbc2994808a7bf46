package hostprep

import "github.com/nvmock/nvmock/profile"

// NFDFile is the feature file's name in NFD's features.d directory.
const NFDFile = "nvmock"

// NFDFeatures is the feature file for node-feature-discovery's local source:
// the node labels, one key=value a line.
func NFDFeatures(p *profile.Profile) string {
	return sortedLines(Labels(p))
}
