#!/usr/bin/env bash
# Build NVIDIA's own NVML clients from the Go module proxy into a cache dir, for
# the integration tests that check the mock node is accepted by them:
#   nvidia-ctk             (github.com/NVIDIA/nvidia-container-toolkit)
#   nvidia-container-runtime (the same module; run in CDI mode by the e2e nodes)
#   nvidia-device-plugin   (github.com/NVIDIA/k8s-device-plugin)
#   gpu-feature-discovery  (github.com/NVIDIA/k8s-device-plugin)
#   mps-control-daemon, config-manager (the same module; its chart runs them
#                          for MPS sharing and for a config map)
# Usage: hack/fetch-nvidia-tools.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/bin/{nvidia-ctk,nvidia-container-runtime,nvidia-device-plugin,
# gpu-feature-discovery,mps-control-daemon,config-manager};
# the device plugin's source is copied to CACHE_DIR/src/k8s-device-plugin@VERSION.
# Needs go and gcc (the tools use cgo). Idempotent: a binary that exists and
# answers --version is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/gomod.sh source-path=SCRIPTDIR
. "$here/lib/gomod.sh"

CTK_MODULE=github.com/NVIDIA/nvidia-container-toolkit
CTK_VERSION=v1.20.2
DP_MODULE=github.com/NVIDIA/k8s-device-plugin
DP_VERSION=v0.18.2

log() { echo "fetch-nvidia-tools: $*" >&2; }
die() { echo "fetch-nvidia-tools: error: $*" >&2; exit 1; }

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
bin=$cache/bin
mkdir -p "$bin"
command -v go >/dev/null || die "go not found in PATH"

# works BINARY: true if it exists and prints a version (config-manager has
# no --version: its --help names its flags). Its exit status is not asked:
# nvidia-container-runtime prints its version, then fails on a machine
# without runc (a fresh one: e2e-node.sh installs runc later).
works() {
  local out
  [ -x "$1" ] || return 1
  if [[ $1 == */config-manager ]]; then
    out=$("$1" --help 2>/dev/null) || true
    [[ $out == *--oneshot* ]]
    return
  fi
  out=$("$1" --version 2>/dev/null) || true
  [[ $out == *version* ]]
}

# run_logged WHAT LOG CMD...: a build's output goes to LOG; on failure one
# line: its last meaningful line and where the rest is.
run_logged() {
  local what=$1 logf=$2; shift 2
  if ! "$@" >"$logf" 2>&1; then
    die "$what failed: $(grep -v -e '^[[:space:]]*$' -e '^exit status' "$logf" | tail -n 1 | sed 's/^[[:space:]]*//') (full log: $logf)"
  fi
}

# toolkit_cmd NAME: one command of the container toolkit module, unless built.
toolkit_cmd() {
  local name=$1
  if works "$bin/$name"; then
    log "already present: $bin/$name"
    return
  fi
  log "building $name $CTK_VERSION (go install; takes a few minutes the first time)"
  run_logged "go install $name@$CTK_VERSION" "$cache/$name.build.log" \
    env -C / GOBIN="$bin" GOWORK=off CGO_ENABLED=1 go install \
      -ldflags "-X $CTK_MODULE/internal/info.version=$CTK_VERSION" "$CTK_MODULE/cmd/$name@$CTK_VERSION"
  works "$bin/$name" || die "$bin/$name was built but does not answer --version"
  log "done: $bin/$name"
}
toolkit_cmd nvidia-ctk
toolkit_cmd nvidia-container-runtime

dp_cmds=(nvidia-device-plugin gpu-feature-discovery mps-control-daemon config-manager)
missing=0
for cmd in "${dp_cmds[@]}"; do works "$bin/$cmd" || missing=1; done
if [ "$missing" = 0 ]; then
  log "already present: ${dp_cmds[*]} in $bin"
  exit 0
fi

src=$cache/src/k8s-device-plugin@$DP_VERSION
gomod_copy "$DP_MODULE" "$DP_VERSION" "$src"

for cmd in "${dp_cmds[@]}"; do
  if works "$bin/$cmd"; then
    log "already present: $bin/$cmd"
    continue
  fi
  log "building $cmd $DP_VERSION"
  # The copy is a main module of its own: keep our GOFLAGS (e.g. -mod) out.
  run_logged "go build $cmd $DP_VERSION" "$cache/$cmd.build.log" \
    env -C "$src" GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=1 \
      go build -ldflags "-X $DP_MODULE/internal/info.version=$DP_VERSION" -o "$bin/$cmd.tmp" "./cmd/$cmd"
  mv "$bin/$cmd.tmp" "$bin/$cmd"
  works "$bin/$cmd" || die "$bin/$cmd was built but does not answer --version (--help for config-manager)"
  log "done: $bin/$cmd"
done
