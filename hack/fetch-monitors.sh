#!/usr/bin/env bash
# Fetch the NVML monitors people run, from Debian bookworm (contrib): gpustat
# (Python, on pynvml) and nvtop (C, dlopens libnvidia-ml.so.1), extracted
# into a cache dir, not installed (both depend on the real driver library;
# see lib/debapt.sh for how system apt state is left untouched).
# Usage: hack/fetch-monitors.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/monitors/gpustat/usr/lib/python3/dist-packages and
#         CACHE_DIR/monitors/nvtop/usr/bin/nvtop
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
out=$cache/monitors
if [[ -f $out/gpustat/usr/lib/python3/dist-packages/gpustat/__init__.py && -x $out/nvtop/usr/bin/nvtop ]]; then
  debapt_log "already present: $out"
  exit 0
fi

debapt_init "$cache"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
for p in gpustat nvtop; do
  deb=$(debapt_download "$p/bookworm")
  debapt_extract "$deb" "$out.tmp/$p"
done
# Rename last, so a half-done run never looks complete.
rm -rf "$out"
mv "$out.tmp" "$out"
debapt_log "done: $out (gpustat, nvtop)"
