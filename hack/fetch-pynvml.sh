#!/usr/bin/env bash
# Fetch Debian bookworm's python3-pynvml (contrib) into a cache dir, to test
# the mock libnvidia-ml through the real Python bindings. Not installed: its
# dependency on the real driver library could not be satisfied; we only
# extract it (see lib/debapt.sh for how system apt state is left untouched).
# Usage: hack/fetch-pynvml.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: PYTHONPATH=CACHE_DIR/pynvml/usr/lib/python3/dist-packages
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
pydir=$cache/pynvml/usr/lib/python3/dist-packages
if [[ -f $pydir/pynvml.py || -f $pydir/pynvml/__init__.py ]]; then
  debapt_log "already present: $pydir"
  exit 0
fi

debapt_init "$cache"
deb=$(debapt_download python3-pynvml/bookworm)
# Extract to a temp dir and rename, so a half-done run never looks complete.
debapt_extract "$deb" "$cache/pynvml.tmp"
rm -rf "$cache/pynvml"
mv "$cache/pynvml.tmp" "$cache/pynvml"
[[ -f $pydir/pynvml.py || -f $pydir/pynvml/__init__.py ]] ||
  debapt_die "no pynvml module under ${pydir#"$cache"/} in ${deb##*/}"
debapt_log "done: PYTHONPATH=$pydir (from ${deb##*/})"
