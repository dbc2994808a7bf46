#!/usr/bin/env bash
# Fetch hwloc's NVML plugin from Debian bookworm (libhwloc-contrib-plugins,
# contrib: NVML is non-free), for the test that hwloc attaches each NVML GPU
# to the PCI device pcisim shows for it. Extracted, not installed (the
# package depends on the real driver library; see lib/debapt.sh); only
# hwloc_nvml.so is kept, so that lstopo does not try the CUDA and OpenCL
# plugins, whose libraries a mock node lacks. The system's lstopo (hwloc-nox
# 2.9.0, the same release) loads it with HWLOC_PLUGINS_PATH; the plugin
# loads whatever libnvidia-ml.so.1 the process finds.
# Usage: hack/fetch-hwloc.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/hwloc-plugins/hwloc_nvml.so. Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
out=$cache/hwloc-plugins
if [[ -f $out/hwloc_nvml.so ]]; then
  debapt_log "already present: $out/hwloc_nvml.so"
  exit 0
fi

debapt_init "$cache"
deb=$(debapt_download libhwloc-contrib-plugins/bookworm)
rm -rf "$out.tmp" "$cache/hwloc-plugins.x"
debapt_extract "$deb" "$cache/hwloc-plugins.x"
mkdir -p "$out.tmp"
so=$(find "$cache/hwloc-plugins.x" -name hwloc_nvml.so -print -quit)
[[ -n $so ]] || debapt_die "no hwloc_nvml.so in ${deb##*/}"
cp "$so" "$out.tmp/"
rm -rf "$cache/hwloc-plugins.x" "$out"
# Rename last, so a half-done run never looks complete.
mv "$out.tmp" "$out"
debapt_log "done: $out/hwloc_nvml.so"
