package ibshim

import (
	"strings"

	"github.com/nvmock/nvmock/ibshim/umad"
)

// Paths in a driver tree (the assets, an overlay's driver root).
const (
	// UmadShim turns /dev/infiniband/umadN into the fabric daemon.
	UmadShim = "usr/lib64/nvmock/libnvmock-umad.so"
	// VerbsProvider is the libibverbs provider, named as RDMAV_DRIVERS
	// names it: libibverbs appends ProviderSuffix.
	VerbsProvider = "usr/lib64/libibverbs/libnvmock"
	// ProviderSuffix is what libibverbs 44 (provider ABI 34) appends.
	ProviderSuffix = "-rdmav34.so"
)

// Env is env with the fabric's variables for a program: the shim preloaded
// ahead of any preload it had, the daemon's socket, and the verbs
// provider. driverRoot is where the program sees the driver tree.
func Env(env []string, driverRoot, socket string) []string {
	shim := strings.TrimRight(driverRoot, "/") + "/" + UmadShim
	preload := shim
	out := make([]string, 0, len(env)+3)
	for _, kv := range env {
		switch {
		case strings.HasPrefix(kv, "LD_PRELOAD="):
			if old := strings.TrimPrefix(kv, "LD_PRELOAD="); old != "" {
				preload += ":" + old
			}
		case strings.HasPrefix(kv, umad.SocketEnv+"="), strings.HasPrefix(kv, "RDMAV_DRIVERS="):
		default:
			out = append(out, kv)
		}
	}
	return append(out, "LD_PRELOAD="+preload, umad.SocketEnv+"="+socket,
		"RDMAV_DRIVERS="+strings.TrimRight(driverRoot, "/")+"/"+VerbsProvider)
}
