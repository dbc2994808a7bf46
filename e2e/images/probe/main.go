// Command probe is the e2e static image's program (built with CGO_ENABLED=0,
// so it needs no libc): it prints, as JSON, what an injected container looks
// like from inside, so a test can tell the image's own command ran normally.
package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
)

type report struct {
	Args           []string `json:"args"`
	VisibleEnv     string   `json:"visible_devices"`
	DeviceNodes    []string `json:"device_nodes"`
	HasNvidiaSMI   bool     `json:"has_nvidia_smi"`
	HasLibrary     bool     `json:"has_library"`
	LDPreload      string   `json:"ld_preload"`
	LibraryPathEnv string   `json:"ld_library_path"`
}

func main() {
	r := report{Args: os.Args, VisibleEnv: os.Getenv("NVIDIA_VISIBLE_DEVICES"),
		LDPreload: os.Getenv("LD_PRELOAD"), LibraryPathEnv: os.Getenv("LD_LIBRARY_PATH")}
	r.DeviceNodes, _ = filepath.Glob("/dev/nvidia*")
	sort.Strings(r.DeviceNodes)
	_, err := os.Stat("/usr/bin/nvidia-smi")
	r.HasNvidiaSMI = err == nil
	_, err = os.Stat("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
	r.HasLibrary = err == nil
	_ = json.NewEncoder(os.Stdout).Encode(r)
}
