#!/usr/bin/env bash
# Build gpud (github.com/leptonai/gpud), a GPU node health checker that
# reads NVML and the kernel log, from the Go module proxy into a cache dir,
# for the test that its scan accepts a mock node and finds the XIDs nvmock
# xidlog writes.
# Usage: hack/fetch-gpud.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/bin/gpud. Needs go and gcc (its sqlite is cgo).
# Idempotent: a binary that answers --version is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/gomod.sh source-path=SCRIPTDIR
. "$here/lib/gomod.sh"

# The proxy answers 403 for v0.5 to v0.14 (as tried) and serves this one.
GPUD_MODULE=github.com/leptonai/gpud
GPUD_VERSION=v0.4.5

log() { echo "fetch-gpud: $*" >&2; }
die() { echo "fetch-gpud: error: $*" >&2; exit 1; }

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
bin=$cache/bin
mkdir -p "$bin"
command -v go >/dev/null || die "go not found in PATH"
command -v gcc >/dev/null || die "gcc not found in PATH (make deps installs it)"

if [ -x "$bin/gpud" ] && "$bin/gpud" --version >/dev/null 2>&1; then
  log "already present: $bin/gpud"
  exit 0
fi

src=$cache/src/gpud@$GPUD_VERSION
gomod_copy "$GPUD_MODULE" "$GPUD_VERSION" "$src"
log "building gpud $GPUD_VERSION (a few minutes the first time)"
logf=$cache/gpud.build.log
if ! env -C "$src" GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=1 \
    go build -o "$bin/gpud.tmp" ./cmd/gpud >"$logf" 2>&1; then
  die "go build gpud failed: $(grep -v '^[[:space:]]*$' "$logf" | tail -n 1) (full log: $logf)"
fi
mv "$bin/gpud.tmp" "$bin/gpud"
"$bin/gpud" --version >/dev/null 2>&1 || die "$bin/gpud was built but does not answer --version"
log "done: $bin/gpud"
