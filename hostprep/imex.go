package hostprep

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nvmock/nvmock/profile"
)

// IMEXPath is where a driver tree (the assets, and an overlay's driver root)
// keeps nvmock's nvidia-imex (imex/imex.c); nvidia-imex-ctl is the same
// file, which tells the two by its name.
const IMEXPath = "usr/bin/nvidia-imex"

// HasClique says whether the board's GPUs are in a multi-node NVLink
// domain (an NVL72 tray): a fabric with a cluster UUID, as NVIDIA's DRA
// driver reads a clique. Those nodes have the IMEX package installed.
func HasClique(p *profile.Profile) bool {
	f := p.Board.Fabric
	if f == nil {
		return false
	}
	u, err := profile.ParseUUID(f.ClusterUUID)
	return err == nil && u != [16]byte{}
}

// readIMEX reads nvidia-imex from the assets for a board with a clique;
// nil for the others.
func readIMEX(assets string, p *profile.Profile, read func(string) (asset, error)) (*asset, error) {
	if !HasClique(p) {
		return nil, nil
	}
	a, err := read(filepath.Join(assets, IMEXPath))
	if err != nil {
		return nil, fmt.Errorf("assets %s: no %s, which %s's NVLink domain runs (run make build): %w", assets, IMEXPath, p.Name, errors.Unwrap(err))
	}
	return &a, nil
}

// imexEntries install nvidia-imex and nvidia-imex-ctl in the driver root,
// where nvidia-ctk and the DRA driver find the driver's binaries. Two
// copies, not links: CDI mounts each file by itself.
func imexEntries(a *asset) []entry {
	if a == nil {
		return nil
	}
	bin := filepath.Join("driver", IMEXPath)
	return []entry{a.entry(bin), a.entry(filepath.Join(filepath.Dir(bin), "nvidia-imex-ctl"))}
}
