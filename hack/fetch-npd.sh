#!/usr/bin/env bash
# Build node-problem-detector from the Go module proxy into a cache dir,
# static (CGO_ENABLED=0), for the test that its kernel monitor reads the
# XIDs nvmock xidlog writes to the kernel log.
# Usage: hack/fetch-npd.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/bin/node-problem-detector. Idempotent: a binary that
# answers --version is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/gomod.sh source-path=SCRIPTDIR
. "$here/lib/gomod.sh"

NPD_MODULE=k8s.io/node-problem-detector
NPD_VERSION=v0.8.20

log() { echo "fetch-npd: $*" >&2; }
die() { echo "fetch-npd: error: $*" >&2; exit 1; }

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
bin=$cache/bin
mkdir -p "$bin"
command -v go >/dev/null || die "go not found in PATH"

if [ -x "$bin/node-problem-detector" ] && "$bin/node-problem-detector" --version >/dev/null 2>&1; then
  log "already present: $bin/node-problem-detector"
  exit 0
fi

src=$cache/src/node-problem-detector@$NPD_VERSION
gomod_copy "$NPD_MODULE" "$NPD_VERSION" "$src"
# Its zip keeps vendor/modules.txt alone: it builds from its go.sum
# through the proxy, without vendor/.
rm -rf "$src/vendor"
log "building node-problem-detector $NPD_VERSION (a minute or two the first time)"
logf=$cache/node-problem-detector.build.log
if ! env -C "$src" GOFLAGS="-buildvcs=false -mod=mod" GOWORK=off CGO_ENABLED=0 \
    go build -ldflags "-X $NPD_MODULE/pkg/version.version=$NPD_VERSION" \
    -o "$bin/node-problem-detector.tmp" ./cmd/nodeproblemdetector >"$logf" 2>&1; then
  die "go build node-problem-detector failed: $(grep -v '^[[:space:]]*$' "$logf" | tail -n 1) (full log: $logf)"
fi
mv "$bin/node-problem-detector.tmp" "$bin/node-problem-detector"
"$bin/node-problem-detector" --version >/dev/null 2>&1 ||
  die "$bin/node-problem-detector was built but does not answer --version"
log "done: $bin/node-problem-detector"
