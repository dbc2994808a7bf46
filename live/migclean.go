package live

import "github.com/nvmock/nvmock/libnvml/snapshot"

// cleanMIG drops the instances of g that board d could not have, as the
// library does before it reads or changes them (libnvml/mig.c
// nvmock_mig_clean): a damaged file's profile row indexed past the
// board's table, and its instances would overlap.
func cleanMIG(d *snapshot.Device, g *GPU) {
	rows := min(d.MIGGICount, snapshot.MaxMIGProfiles)
	var used uint32
	var count [snapshot.MaxMIGProfiles]uint32
	for i := 0; i < MaxGIs; i++ {
		p, st := g.GIProfile[i], g.GIStart[i]
		var size uint32
		if p != 0 && p <= rows {
			size = d.MIGGIMemorySlices[p-1]
		}
		bits := uint32(0xff)
		if size < 8 {
			bits = 1<<size - 1
		}
		ok := size != 0 && st < 8 && d.MIGGIPlacements[p-1]>>st&1 != 0 && MIGGIID(st, size) == i &&
			used&(bits<<st) == 0 && count[p-1] < d.MIGGIInstances[p-1]
		var whole uint32
		if ok {
			used |= bits << st
			count[p-1]++
			whole = d.MIGGIComputeSlices[p-1]
		} else {
			g.GIProfile[i], g.GIStart[i] = 0, 0
		}
		// Compute instances: sizes the profile holds, each where one of
		// its size may start, one over each slice.
		var cused uint32
		for c := 0; c < MaxCIs; c++ {
			n, cs := g.CISlices[i*MaxCIs+c], g.CIStart[i*MaxCIs+c]
			// In 64 bits: a start near 2^32 must not wrap into range.
			if n != 0 && n <= whole && d.MIGGICISizes[p-1]>>n&1 != 0 && cs%ciStep(n) == 0 && uint64(cs)+uint64(n) <= uint64(whole) &&
				cused&((1<<n-1)<<cs) == 0 {
				cused |= (1<<n - 1) << cs
				continue
			}
			g.CISlices[i*MaxCIs+c], g.CIStart[i*MaxCIs+c] = 0, 0
		}
	}
}

// migOn says whether MIG is on for GPU g of board d: the state's mode when
// a setter wrote a valid one, else the snapshot's (libnvml/mig.c
// nvmock_mig_read).
func migOn(d *snapshot.Device, g *GPU) bool {
	if g.MIGSet != 0 && g.MIGCurrent <= 1 && g.MIGPending <= 1 {
		return g.MIGCurrent == 1
	}
	return d.MIGCurrent == 1
}
