package snapshot

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nvmock/nvmock/profile"
)

// NA marks a number the board reports as not available.
const NA = ^uint32(0)

// FlagUnseeded marks a snapshot whose identities the library derives at
// init from the node it runs on (the default built into the library).
const FlagUnseeded = 1

// FieldOffset pins one field of a record.
type FieldOffset struct {
	C, Go  string
	Offset uintptr
}

// hash is FNV-1a over the parts, each ended by a 0 byte's multiply, then
// MurmurHash3's finalizer so that inputs differing in one byte give unrelated
// bits. libnvml/identity.c computes the same, so Go and C agree on identities
// derived at init.
func hash(parts ...string) uint64 {
	h := uint64(14695981039346656037)
	for i, p := range parts {
		if i > 0 {
			h ^= 0
			h *= 1099511628211
		}
		for j := 0; j < len(p); j++ {
			h ^= uint64(p[j])
			h *= 1099511628211
		}
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// UUID derives a GPU's UUID from the profile name, node seed and node index.
func UUID(profile, seed string, index int) string {
	i := strconv.Itoa(index)
	a := hash(seed, profile, i, "uuid-a")
	b := hash(seed, profile, i, "uuid-b")
	return fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", a>>32, (a>>16)&0xffff, a&0xffff, b>>48, b&0xffffffffffff)
}

// Serial derives a 13-digit board serial that starts with prefix.
func Serial(prefix, profile, seed string, index int) string {
	digits := 13 - len(prefix)
	if digits <= 0 {
		return prefix
	}
	mod := uint64(1)
	for k := 0; k < digits; k++ {
		mod *= 10
	}
	v := hash(seed, profile, strconv.Itoa(index), "serial") % mod
	return fmt.Sprintf("%s%0*d", prefix, digits, v)
}

// NodeSeed returns what makes this node's identities unique: NODE_NAME,
// else /etc/machine-id.
func NodeSeed() (string, error) {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n, nil
	}
	b, err := os.ReadFile("/etc/machine-id")
	if err == nil && strings.TrimSpace(string(b)) != "" {
		return strings.TrimSpace(string(b)), nil
	}
	return "", fmt.Errorf("no node seed: NODE_NAME is unset and /etc/machine-id is unreadable or empty; set NODE_NAME or pass --seed")
}

// Identity is one GPU's identity on a node.
type Identity struct {
	Index               int
	UUID, Serial, BusID string
}

// Identities lists what each GPU of the profile is called on the node.
func Identities(p *profile.Profile, seed string) []Identity {
	ids := make([]Identity, p.GPUs)
	for i := range ids {
		ids[i] = Identity{
			Index:  i,
			UUID:   UUID(p.Name, seed, i),
			Serial: Serial(p.Board.SerialPrefix, p.Name, seed, i),
			BusID:  BusID(p, i),
		}
	}
	return ids
}

// PCIAddress is GPU i's PCI address in a validated profile.
func PCIAddress(p *profile.Profile, i int) profile.PCIAddress {
	a, _ := p.GPUAddress(i) // validated
	return a
}

// BusID is GPU i's bus id as NVML spells it: "00000000:07:00.0".
func BusID(p *profile.Profile, i int) string { return PCIAddress(p, i).BusID() }
