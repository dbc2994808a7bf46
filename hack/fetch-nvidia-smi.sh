#!/usr/bin/env bash
# Fetch the real nvidia-smi binary from Debian bookworm non-free (package
# nvidia-smi) into a cache dir, to run against the mock libnvidia-ml.
# Nothing is installed and no system apt state is touched (see lib/debapt.sh).
# Usage: hack/fetch-nvidia-smi.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/bin/nvidia-smi (extracted package in CACHE_DIR/nvidia-smi/)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
bin=$cache/bin/nvidia-smi
if debapt_is_elf "$bin"; then
  debapt_log "already present: $bin"
  exit 0
fi

debapt_init "$cache"
deb=$(debapt_download nvidia-smi)
debapt_extract "$deb" "$cache/nvidia-smi"
src=$cache/nvidia-smi/usr/lib/nvidia/current/nvidia-smi
debapt_is_elf "$src" || debapt_die "no ELF binary at ${src#"$cache"/} in ${deb##*/}"
# Copy (not symlink) so bin/ stays valid on its own; tmp+mv keeps it atomic.
mkdir -p "$cache/bin"
cp "$src" "$bin.tmp"
mv "$bin.tmp" "$bin"
debapt_log "done: $bin (from ${deb##*/})"
