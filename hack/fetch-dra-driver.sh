#!/usr/bin/env bash
# Build NVIDIA's DRA driver for GPUs (module sigs.k8s.io/dra-driver-nvidia-gpu,
# repository github.com/NVIDIA/k8s-dra-driver-gpu) into a cache dir, for the
# Kubernetes suite's DRA tests (e2e/k8s/dra_test.go, docs/dra.md).
# Usage: hack/fetch-dra-driver.sh [CACHE_DIR]   (default: $NVMOCK_CACHE, else <repo>/.cache)
#
# The Go module proxy does not serve the driver's module (its dependencies it
# does), so its source comes, first found, from:
#   1. $NVMOCK_DRA_SRC: a source tree or a .tar.gz of one (one top-level dir);
#   2. thirdparty/dra-driver-nvidia-gpu-$DRA_VERSION.tar.gz in this repository;
#   3. CACHE_DIR/dra/src-$DRA_VERSION.tar.gz;
#   4. GitHub's archive of the tag, downloaded to the path of 3.
# Result: CACHE_DIR/dra/bin/{gpu-kubelet-plugin,compute-domain-kubelet-plugin,
# compute-domain-controller,compute-domain-daemon,webhook} built as upstream's
# Makefile builds them (CGO: the kubelet plugins dlopen libnvidia-ml through
# go-nvml), nvidia-cdi-hook of the NVIDIA Container Toolkit release the driver
# requires (upstream's image takes it from that toolkit's image), and the
# stamp CACHE_DIR/dra/bin/.dra-driver-$DRA_VERSION. The unpacked source (the
# chart, the scripts and templates its image carries) stays in
# CACHE_DIR/dra/src/$DRA_VERSION. Needs go and gcc. Idempotent: with the stamp
# there it does nothing; `rm -rf CACHE_DIR/dra/bin` rebuilds. Runs at nice 10.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

DRA_MODULE=sigs.k8s.io/dra-driver-nvidia-gpu
DRA_VERSION=v0.4.0
DRA_COMMIT=6910a2bea298933cf64cfb061ddf88b6e17743ff
DRA_URL=https://github.com/NVIDIA/k8s-dra-driver-gpu/archive/refs/tags/$DRA_VERSION.tar.gz
DRA_CMDS="gpu-kubelet-plugin compute-domain-kubelet-plugin compute-domain-controller compute-domain-daemon webhook"
CTK_MODULE=github.com/NVIDIA/nvidia-container-toolkit

log() { echo "fetch-dra-driver: $*" >&2; }
die() { echo "fetch-dra-driver: error: $*" >&2; exit 1; }

cache=${1:-${NVMOCK_CACHE:-$here/../.cache}}
mkdir -p "$cache/dra"
cache=$(cd "$cache" && pwd)
dra=$cache/dra
bin=$dra/bin
src=$dra/src/$DRA_VERSION
tarball=$dra/src-$DRA_VERSION.tar.gz
stamp=$bin/.dra-driver-$DRA_VERSION

if [ -f "$stamp" ] && [ -f "$src/go.mod" ]; then
  log "already built: $bin ($(head -n 1 "$stamp"))"
  exit 0
fi
command -v go >/dev/null || die "go not found in PATH"
command -v gcc >/dev/null || die "gcc not found in PATH (the kubelet plugins use cgo)"
# The machine is shared: builds run at low priority.
renice -n 10 -p $$ >/dev/null

# timed NAME LOG CMD...: run CMD, its output to LOG; note wall and CPU time
# in $dra/build-times.txt (the machine may be busy: the load says how busy).
# On failure one line: the log's last meaningful line and where the rest is.
timed() {
  local name=$1 logf=$2 tm rc=0 TIMEFORMAT='%R %U %S'; shift 2
  tm=$( { time "$@" >"$logf" 2>&1; } 2>&1 ) || rc=$?
  [ $rc = 0 ] ||
    die "$name failed: $(grep -v -e '^[[:space:]]*$' -e '^exit status' "$logf" | tail -n 1 | sed 's/^[[:space:]]*//') (full log: $logf)"
  set -- $tm
  tm="$1 s ($(awk -v u="$2" -v s="$3" 'BEGIN {printf "%.1f", u + s}') s CPU)"
  log "$name in $tm"
  echo "$(date -u +%FT%TZ) $name $tm, load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$dra/build-times.txt"
}

# unpack_source: the driver's source tree into $src, from the first source found.
unpack_source() {
  local from=${NVMOCK_DRA_SRC:-} tmp=$src.tmp top
  rm -rf "$tmp" && mkdir -p "$tmp"
  if [ -z "$from" ] && [ -f "$here/../thirdparty/dra-driver-nvidia-gpu-$DRA_VERSION.tar.gz" ]; then
    from=$here/../thirdparty/dra-driver-nvidia-gpu-$DRA_VERSION.tar.gz
  fi
  if [ -z "$from" ]; then
    from=$tarball
    if [ ! -f "$tarball" ]; then
      log "downloading $DRA_URL"
      curl -fsSL --retry 3 --connect-timeout 10 -o "$tarball.tmp" "$DRA_URL" 2>/dev/null || {
        rm -f "$tarball.tmp"
        die "cannot download $DRA_URL (no internet?); set NVMOCK_DRA_SRC to the driver's $DRA_VERSION source (a dir or .tar.gz), or put the tarball at $tarball"
      }
      mv "$tarball.tmp" "$tarball"
    fi
  fi
  if [ -d "$from" ]; then
    log "source: $from"
    cp -a "$from/." "$tmp/"
  elif [ -f "$from" ]; then
    log "source: $from"
    top=$(tar -tzf "$from" | sed -n 's|^\./||; s|/.*||p' | sort -u)
    [ "$(echo "$top" | wc -l)" = 1 ] || die "$from: want one top-level dir in the tarball, found: $(echo $top)"
    tar -xzf "$from" -C "$tmp" --strip-components=1 || die "$from: cannot unpack"
  else
    die "NVMOCK_DRA_SRC=$from: no such dir or file"
  fi
  [ "$(sed -n 's/^module //p' "$tmp/go.mod" 2>/dev/null)" = "$DRA_MODULE" ] ||
    die "$from: not the source of $DRA_MODULE (its go.mod names another module or is missing)"
  [ "$(tr -d '[:space:]' <"$tmp/VERSION" 2>/dev/null)" = "$DRA_VERSION" ] ||
    die "$from: VERSION is $(tr -d '[:space:]' <"$tmp/VERSION" 2>/dev/null || echo missing), want $DRA_VERSION"
  chmod -R u+w "$tmp"
  rm -rf "$src" && mv "$tmp" "$src"
}

[ -f "$src/go.mod" ] || unpack_source
mkdir -p "$bin" "$dra/logs"

# As upstream's Makefile (target cmds): cgo on, version and commit stamped.
# GOFLAGS=-mod=mod: the tarball has no vendor/, every dependency comes from
# the proxy (go.sum pins them). One `go build` for all five: they share most
# packages.
info=$DRA_MODULE/internal/info
log "building $DRA_MODULE $DRA_VERSION ($DRA_CMDS; several minutes the first time)"
rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
timed "go build $DRA_MODULE $DRA_VERSION" "$dra/logs/dra-driver.build.log" \
  env -C "$src" GOWORK=off GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=1 \
    CGO_LDFLAGS_ALLOW='-Wl,--unresolved-symbols=ignore-in-object-files' \
    go build -trimpath -ldflags "-s -w -X $info.version=$DRA_VERSION -X $info.gitCommit=$DRA_COMMIT" \
      -o "$bin.tmp/" $(printf "./cmd/%s " $DRA_CMDS)

# nvidia-cdi-hook: the toolkit release the driver's go.mod requires. The
# plugins copy it to the host (<kubelet plugins dir>/gpu.nvidia.com) and
# name it in their CDI specs' hooks, which the runtime runs on the host.
# cgo: it links go-nvml (and so glibc, as upstream's build does).
ctk_version=$(awk -v m="$CTK_MODULE" '$1 == m {print $2; exit}' "$src/go.mod")
[ -n "$ctk_version" ] || die "$src/go.mod does not require $CTK_MODULE"
timed "go install nvidia-cdi-hook@$ctk_version" "$dra/logs/nvidia-cdi-hook.build.log" \
  env -C / GOBIN="$bin.tmp" GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=1 go install -trimpath \
    -ldflags "-s -w -X $CTK_MODULE/internal/info.version=$ctk_version" "$CTK_MODULE/cmd/nvidia-cdi-hook@$ctk_version"

for c in $DRA_CMDS nvidia-cdi-hook; do
  # compute-domain-daemon and webhook have no --version.
  "$bin.tmp/$c" --version >/dev/null 2>&1 || "$bin.tmp/$c" --help >/dev/null 2>&1 ||
    die "$bin.tmp/$c was built but answers neither --version nor --help"
done
printf '%s %s (commit %s), nvidia-cdi-hook %s, %s\n' "$DRA_MODULE" "$DRA_VERSION" "$DRA_COMMIT" "$ctk_version" \
  "$(go env GOVERSION)" >"$bin.tmp/.dra-driver-$DRA_VERSION"
rm -rf "$bin" && mv "$bin.tmp" "$bin"
log "done: $bin ($(cd "$bin" && echo *))"
