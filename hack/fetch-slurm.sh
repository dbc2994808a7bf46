#!/usr/bin/env bash
# Fetch Slurm's node daemon and its NVML GPU plugin from Debian bookworm
# (slurmd and slurm-wlm-basic-plugins from main, slurm-wlm-nvml-plugin from
# contrib), for the test that `slurmd -G` with AutoDetect=nvml detects the
# mock GPUs and MIG devices. Extracted, not installed (the plugin depends on
# the real driver library; see lib/debapt.sh), with package lists of their
# own: the shared ones hold no main.
# Usage: hack/fetch-slurm.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/slurm/sbin/slurmd (slurmd checks it runs under that
#         name), CACHE_DIR/slurm/lib (LD_LIBRARY_PATH) and
#         CACHE_DIR/slurm/plugins (slurm.conf's PluginDir). Idempotent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"
DEBAPT_SUITES=bookworm
DEBAPT_COMPONENTS="main contrib"

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
out=$cache/slurm
if [[ -x $out/sbin/slurmd && -f $out/plugins/gpu_nvml.so && -f $out/lib/libslurmfull.so ]]; then
  debapt_log "already present: $out"
  exit 0
fi

debapt_init "$cache/slurm-apt"
x=$cache/slurm-apt/x
rm -rf "$out.tmp" "$x"
mkdir -p "$out.tmp/sbin" "$out.tmp/lib" "$out.tmp/plugins" "$x"
# libnuma1: slurmd links it, and a fresh Debian may not have it.
for p in slurmd slurm-wlm-basic-plugins slurm-wlm-nvml-plugin libnuma1; do
  deb=$(debapt_download "$p/bookworm")
  debapt_extract "$deb" "$x/$p"
done
lib=$(cd "$x/slurm-wlm-basic-plugins/usr/lib" && echo */slurm-wlm)  # the multiarch directory
[[ -f $x/slurm-wlm-basic-plugins/usr/lib/$lib/libslurmfull.so ]] || debapt_die "no libslurmfull.so in slurm-wlm-basic-plugins"
cp "$x/slurmd/usr/sbin/slurmd-wlm" "$out.tmp/sbin/slurmd"
cp "$x/slurm-wlm-basic-plugins/usr/lib/$lib/libslurmfull.so" "$out.tmp/lib/"
cp -P "$x/libnuma1/usr/lib/${lib%/*}"/libnuma.so.1* "$out.tmp/lib/"
cp "$x/slurm-wlm-basic-plugins/usr/lib/$lib/"*.so "$x/slurm-wlm-nvml-plugin/usr/lib/$lib/gpu_nvml.so" "$out.tmp/plugins/"
rm -f "$out.tmp/plugins/libslurmfull.so"
rm -rf "$x" "$out"
# Rename last, so a half-done run never looks complete.
mv "$out.tmp" "$out"
debapt_log "done: $out (slurmd, its plugins, gpu_nvml)"
