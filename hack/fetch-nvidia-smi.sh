#!/usr/bin/env bash
# Fetch the real nvidia-smi binaries Debian ships, to run against the mock
# libnvidia-ml: 470 (nvidia-tesla-470-smi, bookworm), 535 (bookworm), 550
# (trixie) and 555 (experimental). Nothing is installed and no system apt
# state is touched (see lib/debapt.sh).
# Usage: hack/fetch-nvidia-smi.sh [CACHE_DIR]   (default: <repo>/.cache)
# Result: CACHE_DIR/smi/<version>/nvidia-smi for each, and CACHE_DIR/bin/nvidia-smi,
# the release the driver tree, the image and single-release tests carry,
# with that release's MPS control daemon and server (nvidia-cuda-mps), which
# a driver installs beside nvidia-smi: CACHE_DIR/bin/nvidia-cuda-mps-{control,server}.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=lib/debapt.sh source-path=SCRIPTDIR
. "$here/lib/debapt.sh"

# package/suite and the binary's path inside the package.
releases=(
  "nvidia-tesla-470-smi/bookworm usr/lib/nvidia/tesla-470/nvidia-smi"
  "nvidia-smi/bookworm usr/lib/nvidia/current/nvidia-smi"
  "nvidia-smi/trixie usr/lib/nvidia/current/nvidia-smi"
  "nvidia-smi/experimental usr/lib/nvidia/current/nvidia-smi"
)
# The driver tree, the image and the single-release tests carry trixie's 550:
# the newest release in a stable suite, and, like the 570-595 drivers the
# boards run, it answers --version (NVIDIA's DRA driver waits on it).
default=nvidia-smi/trixie
# The same release's MPS binaries: package/suite, then each binary's path.
mps=(nvidia-cuda-mps/trixie usr/bin/nvidia-cuda-mps-control usr/sbin/nvidia-cuda-mps-server)

mkdir -p "${1:-$here/../.cache}"
cache=$(cd "${1:-$here/../.cache}" && pwd)
stamp=$cache/smi/.releases
want="${releases[*]} default=$default mps=${mps[*]}"
if debapt_is_elf "$cache/bin/nvidia-smi" && debapt_is_elf "$cache/bin/nvidia-cuda-mps-control" &&
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  debapt_log "already present: $(cd "$cache/smi" && echo */nvidia-smi)"
  exit 0
fi

debapt_init "$cache"
rm -rf "$cache/smi"
mkdir -p "$cache/smi" "$cache/bin" "$cache/apt/x"
for r in "${releases[@]}"; do
  read -r spec path <<<"$r"
  deb=$(debapt_download "$spec")
  version=${deb##*/}; version=${version#*_}; version=${version%%-*}
  x=$cache/apt/x/${spec%%/*}-$version
  debapt_extract "$deb" "$x"
  debapt_is_elf "$x/$path" || debapt_die "no ELF binary at $path in ${deb##*/}"
  mkdir -p "$cache/smi/$version"
  # Copy (not symlink) so each stays valid on its own; tmp+mv keeps it atomic.
  cp "$x/$path" "$cache/smi/$version/nvidia-smi.tmp"
  mv "$cache/smi/$version/nvidia-smi.tmp" "$cache/smi/$version/nvidia-smi"
  if [ "$spec" = "$default" ]; then
    cp "$x/$path" "$cache/bin/nvidia-smi.tmp"
    mv "$cache/bin/nvidia-smi.tmp" "$cache/bin/nvidia-smi"
  fi
  rm -rf "$x"
  debapt_log "done: smi/$version/nvidia-smi (from ${deb##*/})"
done
deb=$(debapt_download "${mps[0]}")
x=$cache/apt/x/mps
debapt_extract "$deb" "$x"
for path in "${mps[@]:1}"; do
  debapt_is_elf "$x/$path" || debapt_die "no ELF binary at $path in ${deb##*/}"
  cp "$x/$path" "$cache/bin/${path##*/}.tmp"
  mv "$cache/bin/${path##*/}.tmp" "$cache/bin/${path##*/}"
done
rm -rf "$x"
debapt_log "done: bin/nvidia-cuda-mps-control, bin/nvidia-cuda-mps-server (from ${deb##*/})"
echo "$want" >"$stamp"
