#!/usr/bin/env bash
# Fetch the NVML monitors people run, from Debian's contrib: gpustat
# (Python, on pynvml) and nvtop (C, dlopens libnvidia-ml.so.1) from bookworm;
# nvitop (Python) from trixie, with the pynvml it needs (12.550, trixie's).
# Extracted into a cache dir, not installed (they depend on the real driver
# library; see lib/debapt.sh for how system apt state is left untouched).
# Usage: hack/fetch-monitors.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/monitors/gpustat/usr/lib/python3/dist-packages,
#         CACHE_DIR/monitors/nvtop/usr/bin/nvtop,
#         CACHE_DIR/monitors/nvitop/usr/lib/python3/dist-packages and
#         CACHE_DIR/monitors/pynvml12/usr/lib/python3/dist-packages
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
out=$cache/monitors
py=usr/lib/python3/dist-packages
if [[ -f $out/gpustat/$py/gpustat/__init__.py && -x $out/nvtop/usr/bin/nvtop &&
  -f $out/nvitop/$py/nvitop/__init__.py && -f $out/pynvml12/$py/pynvml.py ]]; then
  debapt_log "already present: $out"
  exit 0
fi

debapt_init "$cache"
rm -rf "$out.tmp"
mkdir -p "$out.tmp"
for p in gpustat/bookworm nvtop/bookworm nvitop/trixie python3-pynvml/trixie; do
  deb=$(debapt_download "$p")
  d=${p%%/*}
  [[ $d == python3-pynvml ]] && d=pynvml12
  debapt_extract "$deb" "$out.tmp/$d"
done
# Rename last, so a half-done run never looks complete.
rm -rf "$out"
mv "$out.tmp" "$out"
debapt_log "done: $out (gpustat, nvtop, nvitop, pynvml12)"
