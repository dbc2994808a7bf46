#!/usr/bin/env bash
# Whole-process benchmarks of the mock library (medians; see README).
# Usage: hack/bench.sh BUILD_DIR NVIDIA_SMI
set -euo pipefail
build=${1:?build dir}
smi=${2:?nvidia-smi}
root=$(cd "$(dirname "$0")/.." && pwd)
lib="$build/driver/usr/lib64"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nvml_h="$(go mod download -json github.com/NVIDIA/go-nvml | sed -n 's/.*"Dir": "\(.*\)",/\1/p')/pkg/nvml"
gcc -O2 -I"$nvml_h" -o "$tmp/bench" "$root/libnvml/bench/bench.c" -L"$lib" -l:libnvidia-ml.so.1 -Wl,-rpath,"$lib"
go build -o "$tmp/benchproc" "$root/hack/benchproc"
"$build/bin/nvmock" profile compile a100 --seed bench -o "$tmp/a100-8"
"$build/bin/nvmock" profile compile a100 --seed bench --gpus 64 -o "$tmp/a100-64"

# A dev root with no nodes: every GPU visible, whatever the host has.
export NVMOCK_DEV_ROOT="$tmp" LD_LIBRARY_PATH="$lib"
unset NVIDIA_VISIBLE_DEVICES NVMOCK_VISIBLE_DEVICES
NVMOCK_SNAPSHOT="$tmp/a100-8" "$tmp/benchproc" -n 50 -label "process start, no NVML call (baseline)" -- "$tmp/bench" noop
NVMOCK_SNAPSHOT="$tmp/a100-8" "$tmp/benchproc" -n 50 -label "init+count, fresh process, 8 GPUs" -- "$tmp/bench" init
NVMOCK_SNAPSHOT="$tmp/a100-8" "$tmp/benchproc" -n 5 -label "getters, ns per call" -- "$tmp/bench" getters 10000000
# The same with live state on: GPU 0 (the one the getters read) under a
# jittered load with two registered processes, GPU 1 with a fault.
mkdir -p "$tmp/live"
cp "$tmp/a100-8" "$tmp/live/snapshot"
ctl() { "$build/bin/nvmock" ctl --state "$tmp/live/state" "$@" >/dev/null; }
ctl create --seed bench
ctl load 0 70 --jitter 5
ctl fault 1 thermal
ctl proc add 0 $$ --memory 20GiB
ctl proc add 0 1 --memory 1GiB
NVMOCK_SNAPSHOT="$tmp/live/snapshot" "$tmp/benchproc" -n 50 -label "init+count, fresh process, 8 GPUs, live state" -- "$tmp/bench" init
NVMOCK_SNAPSHOT="$tmp/live/snapshot" "$tmp/benchproc" -n 5 -label "getters, ns per call, live state" -- "$tmp/bench" getters 10000000
NVMOCK_SNAPSHOT="$tmp/live/snapshot" "$tmp/benchproc" -n 5 -label "getters, ns per call, live state, GPU with a fault" -- "$tmp/bench" getters 10000000 1
NVMOCK_SNAPSHOT="$tmp/live/snapshot" "$tmp/benchproc" -n 20 -label "nvidia-smi -q, 8 GPUs, live state" -- "$smi" -q
NVMOCK_SNAPSHOT="$tmp/a100-8" "$tmp/benchproc" -n 20 -label "nvidia-smi -q, 8 GPUs" -- "$smi" -q
NVMOCK_SNAPSHOT="$tmp/a100-64" "$tmp/benchproc" -n 10 -label "nvidia-smi -q, 64 GPUs" -- "$smi" -q
NVMOCK_SNAPSHOT="$tmp/a100-8" "$tmp/benchproc" -n 20 -label "nvidia-smi (default view), 8 GPUs" -- "$smi"
# Every release make deps fetched (CACHE/smi/<version>, beside CACHE/bin).
for other in "$(dirname "$smi")"/../smi/*/nvidia-smi; do
	[ -x "$other" ] || continue
	v=$(basename "$(dirname "$other")")
	NVMOCK_SNAPSHOT="$tmp/a100-8" "$tmp/benchproc" -n 20 -label "nvidia-smi $v -q, 8 GPUs" -- "$other" -q
done
"$build/bin/nvmock" profile compile b200 --seed bench -o "$tmp/b200"
NVMOCK_SNAPSHOT="$tmp/b200" "$tmp/benchproc" -n 20 -label "nvidia-smi -q, b200 (8 GPUs)" -- "$smi" -q

# hostprep and exec (root: device nodes, mount namespaces).
if [ "$(id -u)" = 0 ]; then
	# Each run into a directory of its own: removing the last run's tree
	# first would time the disk's discards of it too.
	"$tmp/benchproc" -n 5 -label "hostprep install, 8 GPUs, from scratch" -- sh -c "d='$tmp/scratch/'\$BENCHPROC_RUN; '$build/bin/nvmock' hostprep install --root \$d/root --cdi-dir \$d/cdi --nfd-dir \$d/nfd --node-name bench >/dev/null 2>&1"
	rm -rf "$tmp/scratch"
	"$build/bin/nvmock" hostprep install --root "$tmp/root" --cdi-dir "$tmp/cdi" --nfd-dir "$tmp/nfd" --node-name bench >/dev/null
	"$tmp/benchproc" -n 5 -label "hostprep install, 8 GPUs, unchanged" -- "$build/bin/nvmock" hostprep install --root "$tmp/root" --cdi-dir "$tmp/cdi" --nfd-dir "$tmp/nfd" --node-name bench
	"$tmp/benchproc" -n 10 -label "true (baseline)" -- true
	for p in t4 a100 h100; do
		"$build/bin/nvmock" exec --profile $p -- true # renders the PCI tree into the cache once
		"$tmp/benchproc" -n 10 -label "nvmock exec --profile $p -- true (PCI tree cached)" -- "$build/bin/nvmock" exec --profile $p -- true
	done
	if command -v ib_write_bw >/dev/null; then
		"$tmp/benchproc" -n 5 -label "RC traffic on one h100 node (perftest, nvmock exec)" -- "$build/bin/nvmock" exec --profile h100 --assets "$build/driver" -- sh "$root/hack/bench-rdma.sh"
	fi
fi
