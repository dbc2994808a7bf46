# shellcheck shell=bash
# Shared by hack/fetch-*.sh: download single .deb files from Debian
# (bookworm, and trixie and experimental for newer nvidia-smi releases) with a
# private apt state under <cache>/apt/, so the machine's apt config,
# /var/lib/apt/lists and /var/cache/apt are never touched.

DEBAPT_SUITE=bookworm  # the machine's own release: its mirror entry is looked up by it
DEBAPT_SUITES="bookworm trixie experimental"
DEBAPT_COMPONENTS="contrib non-free"  # pynvml is in contrib, nvidia-smi in non-free; main (18 MB of lists) is not needed

debapt_log() { echo "${0##*/}: $*" >&2; }
debapt_die() { debapt_log "error: $*"; exit 1; }

# True if $1 is a regular file starting with the ELF magic.
debapt_is_elf() {
  [[ -f $1 ]] && [[ $(LC_ALL=C head -c 4 "$1") == $'\x7fELF' ]]
}

# Print "URI [KEYRING]" of the first enabled "deb $DEBAPT_SUITE ... main" entry
# in the system's apt sources (deb822 *.sources and one-line *.list formats).
# Only reads; the mirror host is whatever this machine already uses.
debapt_system_mirror() {
  local SL SP f
  eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d)"
  {
    for f in "$SP"*.sources; do
      [[ -f $f ]] || continue
      awk -v suite="$DEBAPT_SUITE" '
        function flush() {
          if ((" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ") &&
              (" " comps " ") ~ / main / && tolower(enabled) != "no" && uri != "")
            print uri, signed
          types = suites = comps = uri = signed = enabled = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        /^[ \t]/   { next }  # continuation line, e.g. an inline key block
        {
          i = index($0, ":"); key = tolower(substr($0, 1, i - 1)); val = substr($0, i + 1)
          gsub(/[ \t]+/, " ", val); sub(/^ /, "", val); sub(/ $/, "", val)
          if (key == "types") types = val
          else if (key == "uris") { split(val, a, " "); uri = a[1] }
          else if (key == "suites") suites = val
          else if (key == "components") comps = val
          else if (key == "signed-by" && val ~ /^\//) signed = val  # paths only
          else if (key == "enabled") enabled = val
        }
        END { flush() }' "$f"
    done
    for f in "$SL" "$SP"*.list; do
      [[ -f $f ]] || continue
      awk -v suite="$DEBAPT_SUITE" '
        $1 != "deb" { next }
        {
          i = 2; opts = ""
          if ($2 ~ /^\[/) while (i <= NF) { opts = opts " " $i; if ($(i++) ~ /\]$/) break }
          if ($(i + 1) != suite) next
          m = 0; for (j = i + 2; j <= NF && $j !~ /^#/; j++) if ($j == "main") m = 1
          if (!m) next
          signed = ""
          if (match(opts, /signed-by=[^] ]+/)) signed = substr(opts, RSTART + 10, RLENGTH - 10)
          print $i, signed
        }' "$f"
    done
  } | head -n 1
}

# Set up <cache>/apt (sources, lists, cache, tmp) and DEBAPT_OPTS, then
# refresh the private package lists.
debapt_init() {
  local uri keyring
  for c in apt-get dpkg-deb flock; do
    command -v $c >/dev/null || debapt_die "$c is required (Debian/Ubuntu host)"
  done
  DEBAPT_DIR=$1/apt
  mkdir -p "$DEBAPT_DIR"/{lists/partial,cache/archives/partial,debs,tmp}
  # Serialise runs sharing one cache (e.g. both fetch scripts under make -j).
  exec 9>"$DEBAPT_DIR/lock"
  flock 9

  read -r uri keyring < <(debapt_system_mirror) || true
  uri=${uri:-http://deb.debian.org/debian}
  if [[ -z ${keyring:-} && -f /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  fi
  # Targets: Packages only: skip Translations/DEP-11 that system apt.conf.d may enable.
  cat >"$DEBAPT_DIR/sources.sources" <<EOF
Types: deb
URIs: $uri
Suites: $DEBAPT_SUITES
Components: $DEBAPT_COMPONENTS
Architectures: $(dpkg --print-architecture)
Targets: Packages
${keyring:+Signed-By: $keyring}
EOF
  # System hooks (appstream, PackageKit) would act on system state after update.
  cat >"$DEBAPT_DIR/apt.conf" <<'EOF'
#clear APT::Update::Pre-Invoke;
#clear APT::Update::Post-Invoke;
#clear APT::Update::Post-Invoke-Success;
EOF
  DEBAPT_OPTS=(
    -qq -c "$DEBAPT_DIR/apt.conf"
    -o Dir::Etc::sourcelist="$DEBAPT_DIR/sources.sources"
    -o Dir::Etc::sourceparts=/dev/null
    -o Dir::State::Lists="$DEBAPT_DIR/lists"
    -o Dir::Cache="$DEBAPT_DIR/cache"
    # Don't drop to _apt: it usually can't write CACHE_DIR (e.g. a mktemp -d dir),
    # which makes apt warn and run unsandboxed anyway.
    -o APT::Sandbox::User="$(id -un)"
  )
  export TMPDIR=$DEBAPT_DIR/tmp  # gpgv and friends put temp files here

  debapt_log "updating private package lists ($uri $DEBAPT_SUITES $DEBAPT_COMPONENTS)"
  # --error-on=any: otherwise a failed fetch only warns and exits 0.
  apt-get "${DEBAPT_OPTS[@]}" --error-on=any update >&2 ||
    debapt_die "apt-get update failed (mirror $uri)"
}

# Download package $1 (NAME, or NAME/SUITE for that suite's version) into
# <cache>/apt/debs and print the .deb path.
debapt_download() {
  local spec=$1 pkg=${1%%/*} deb
  rm -f "$DEBAPT_DIR/debs/${pkg}_"*.deb
  debapt_log "downloading $spec"
  (cd "$DEBAPT_DIR/debs" && apt-get "${DEBAPT_OPTS[@]}" download "$spec" >&2) ||
    debapt_die "apt-get download $spec failed"
  deb=$(compgen -G "$DEBAPT_DIR/debs/${pkg}_*.deb" | head -n 1) ||
    debapt_die "no .deb for $pkg after download"
  echo "$deb"
}

# Extract .deb $1 into a fresh directory $2.
debapt_extract() {
  debapt_log "extracting ${1##*/} into $2"
  rm -rf "$2"
  dpkg-deb -x "$1" "$2" || debapt_die "dpkg-deb -x $1 failed"
}

# debapt_fetch_pool POOL_PATH SHA256 DEST: download one file of Debian's pool
# (e.g. main/h/hwloc/hwloc_2.9.0.orig.tar.bz2) from this machine's mirror to
# DEST, unless DEST already has the pinned checksum. Temp + rename: a broken
# download never stands as DEST.
debapt_fetch_pool() {
  local path=$1 sum=$2 dest=$3 uri name=${1##*/}
  echo "$sum  $dest" | sha256sum -c --status 2>/dev/null && return 0
  read -r uri _ < <(debapt_system_mirror) || true
  uri=${uri:-http://deb.debian.org/debian}
  debapt_log "downloading $name from $uri"
  curl -sSfL -o "$dest.tmp" "$uri/pool/$path" || debapt_die "download of $name from $uri failed"
  echo "$sum  $dest.tmp" | sha256sum -c --status || debapt_die "$name: SHA-256 is not Debian's $sum"
  mv "$dest.tmp" "$dest"
}
