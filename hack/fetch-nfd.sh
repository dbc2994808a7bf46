#!/usr/bin/env bash
# Build node-feature-discovery's nfd-worker from the Go module proxy into a
# cache dir, static (CGO_ENABLED=0) as its image ships it, for the test that
# it labels a mock node from the PCI tree alone (pcisim), with no feature file.
# Usage: hack/fetch-nfd.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/bin/nfd-worker. Idempotent: a binary that reports
# NFD_VERSION is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/gomod.sh source-path=SCRIPTDIR
. "$here/lib/gomod.sh"

NFD_MODULE=sigs.k8s.io/node-feature-discovery
NFD_VERSION=v0.20.1
# v0.20 needs Go 1.27: the go command fetches that toolchain from the module
# proxy (about 76 MB, once per machine), for this build alone.
export GOTOOLCHAIN=go1.27.3

log() { echo "fetch-nfd: $*" >&2; }
die() { echo "fetch-nfd: error: $*" >&2; exit 1; }

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
bin=$cache/bin
mkdir -p "$bin"
command -v go >/dev/null || die "go not found in PATH"

if [ -x "$bin/nfd-worker" ] && [ "$("$bin/nfd-worker" -version 2>&1)" = "nfd-worker $NFD_VERSION" ]; then
  log "already present: $bin/nfd-worker"
  exit 0
fi

src=$cache/src/node-feature-discovery@$NFD_VERSION
gomod_copy "$NFD_MODULE" "$NFD_VERSION" "$src"
# Its go.mod replaces the api/nfd module with ./api/nfd, which the module's
# zip leaves out: that module, at the same version, goes there.
gomod_copy "$NFD_MODULE/api/nfd" "$NFD_VERSION" "$src/api/nfd"
log "building nfd-worker $NFD_VERSION (a few minutes the first time)"
logf=$cache/nfd-worker.build.log
if ! env -C "$src" GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0 \
    go build -ldflags "-X $NFD_MODULE/pkg/version.version=$NFD_VERSION" -o "$bin/nfd-worker.tmp" ./cmd/nfd-worker >"$logf" 2>&1; then
  die "go build nfd-worker failed: $(grep -v '^[[:space:]]*$' "$logf" | tail -n 1) (full log: $logf)"
fi
mv "$bin/nfd-worker.tmp" "$bin/nfd-worker"
[ "$("$bin/nfd-worker" -version 2>&1)" = "nfd-worker $NFD_VERSION" ] ||
  die "$bin/nfd-worker was built but does not report $NFD_VERSION: $("$bin/nfd-worker" -version 2>&1 | head -n 1)"
log "done: $bin/nfd-worker"
