# shellcheck shell=bash
# Shared by hack/fetch-*.sh: a writable copy of one version of a Go
# module's source, for modules whose version list the proxy refuses (403 on
# @v/list, so no go install ...@version) while it serves the exact version.

# gomod_copy MODULE VERSION DEST: copies MODULE@VERSION to DEST, writable;
# a DEST with a go.mod is kept. Exits with the proxy's error.
gomod_copy() {
  local module=$1 version=$2 dest=$3 json dir me=${0##*/}
  me=${me%.sh}
  [ -f "$dest/go.mod" ] && return 0
  echo "$me: downloading $module@$version" >&2
  # From / so that no go.mod or go.work of the caller's takes part.
  if ! json=$(env -C / GOWORK=off go mod download -json "$module@$version" 2>&1); then
    echo "$me: error: go mod download $module@$version: $(echo "$json" |
      sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | sed 's/\\n\\t/; /g' | grep . || echo "$json" | tail -n 1)" >&2
    exit 1
  fi
  dir=$(echo "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  if [ ! -d "$dir" ]; then
    echo "$me: error: go mod download $module@$version gave no module dir" >&2
    exit 1
  fi
  rm -rf "$dest.tmp" "$dest"
  mkdir -p "$(dirname "$dest")"
  cp -r "$dir" "$dest.tmp"
  chmod -R u+w "$dest.tmp"
  mv "$dest.tmp" "$dest"
}
