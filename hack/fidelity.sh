#!/usr/bin/env bash
# Scores a profile against its real capture: compiles it, renders GPU 0 with
# the real nvidia-smi -q -x, and runs shared/tools/nvsmi-fidelity --list.
# Usage: hack/fidelity.sh NAME|FILE [CAPTURE.xml]   (after make build deps)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:?profile}
capture=${2:-$root/../shared/reference/hardware/qx-$(basename "$name" .yaml).xml}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/build/bin/nvmock" profile compile "$name" --seed fidelity -o "$tmp/snap"
NVMOCK_SNAPSHOT="$tmp/snap" NVMOCK_DEV_ROOT="$tmp" NVIDIA_VISIBLE_DEVICES=0 \
	LD_LIBRARY_PATH="$root/build/driver/usr/lib64" "$root/.cache/bin/nvidia-smi" -q -x > "$tmp/mock.xml"
python3 "$root/../shared/tools/nvsmi-fidelity" "$tmp/mock.xml" "$capture" --list
