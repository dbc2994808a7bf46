#!/usr/bin/env bash
# Scores a profile against the real capture of its board, as
# libnvml/smi/fidelity_test.go does: compiles it, renders every GPU with the
# real nvidia-smi -q -x, and scores the first with internal/fidelity
# (hack/fidelity -list: the counts, every row that is not the same, the score).
# Usage: hack/fidelity.sh NAME|FILE [CAPTURE.xml]   (after make build deps)
#   NVIDIA_SMI=PATH renders with another nvidia-smi (default .cache/bin/nvidia-smi).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:?usage: hack/fidelity.sh NAME|FILE [CAPTURE.xml]}
capture=${2:-$root/libnvml/smi/testdata/hardware/qx-$(basename "$name" .yaml).xml}
smi=${NVIDIA_SMI:-$root/.cache/bin/nvidia-smi}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -C "$root" -o "$tmp/fidelity" ./hack/fidelity
"$root/build/bin/nvmock" profile compile "$name" --seed fidelity -o "$tmp/snap"
NVMOCK_SNAPSHOT="$tmp/snap" NVMOCK_DEV_ROOT="$tmp" \
	LD_LIBRARY_PATH="$root/build/driver/usr/lib64" "$smi" -q -x > "$tmp/mock.xml"
"$tmp/fidelity" -list "$tmp/mock.xml" "$capture"
