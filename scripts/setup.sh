#!/usr/bin/env bash
# scripts/setup.sh [core|examples|packages|all] …
#
# Installs with apt what building, testing and running redis-ratelimit needs, and only what is
# missing; prints what it installs and why. Idempotent: when nothing is missing it only looks
# (no apt, no network) and takes a few milliseconds. `make setup`, `make run`, `make test` and
# `.ci/run` call it; the package lists below are the only ones in the project.
#
#   core      (default) the build, `make test` and `make lint`: libclang for bindgen, redis-server,
#             redis-cli, python3
#   examples  `make test-examples`: Python 3 with redis-py, Node.js with npm
#   node      `make test-node`: Node.js 18+ with npm (clients/node)
#   memcheck  `make test-memcheck`, `make callgrind`, `make bench-gate`: valgrind, python3
#   python-clients  `make test-python`: python3 with venv (apt's python3-venv when the venv module is
#             missing), then a virtualenv build/python-clients with clients/python and its test
#             dependencies from PyPI (pip); recreated when clients/python/pyproject.toml changes
#   packages  `make deb` / `make dist`: dpkg-deb, sha256sum, tar (coreutils and dpkg: always there
#             on Debian, checked anyway)
#
# Uses sudo when not root. Where apt is absent it names the packages and stops. Checks that cargo
# is there and at least the crate's rust-version (rustup installs it: https://rustup.rs).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

say() { echo "setup: $*" >&2; }
die() {
  echo "setup: error: $*" >&2
  exit 1
}

# ------------------------------------------------------------------ what is missing
missing=()   # Debian package names
after=()     # steps to run once the packages are there
why=()       # one reason per package, same order
need() {
  local pkg=$1 reason=$2 p
  for p in "${missing[@]+"${missing[@]}"}"; do [ "$p" = "$pkg" ] && return 0; done
  missing+=("$pkg")
  why+=("$reason")
}

# bindgen (through clang-sys) loads libclang by these names only: libclang.so, libclang-*.so,
# libclang.so.*, libclang-*.so.* — libclang-cpp*.so (a different library, which Debian's
# clang packages bring along) does not count. Looked for where clang-sys looks: LIBCLANG_PATH,
# the llvm-config libdir, the LLVM trees and the system library directories.
has_libclang() {
  local dirs=() d f base
  [ -n "${LIBCLANG_PATH:-}" ] && dirs+=("$LIBCLANG_PATH")
  if command -v llvm-config >/dev/null 2>&1; then dirs+=("$(llvm-config --libdir 2>/dev/null)"); fi
  dirs+=(/usr/lib/llvm-*/lib /usr/local/lib /usr/lib /usr/lib64 /usr/lib/*-linux-gnu /lib/*-linux-gnu)
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    for f in "$d"/libclang.so "$d"/libclang-*.so "$d"/libclang.so.* "$d"/libclang-*.so.*; do
      [ -e "$f" ] || continue
      base=${f##*/}
      [[ "$base" == libclang-cpp* ]] && continue
      return 0
    done
  done
  return 1
}

check_core() {
  has_libclang || need libclang-dev "the build: bindgen (redis-module's build script) needs libclang"
  command -v redis-server >/dev/null 2>&1 ||
    need redis-server "make run and the integration tests start redis-server with the module"
  command -v redis-cli >/dev/null 2>&1 || need redis-tools "redis-cli, for make run's port check and the README's examples"
  command -v python3 >/dev/null 2>&1 || need python3 "make lint's import-circle check (scripts/import-circles.py)"
  # servers.sh (make compat) unpacks Valkey with dpkg-deb and builds Redis 8.0 with pkg-config.
  command -v pkg-config >/dev/null 2>&1 || need pkg-config "make compat builds Redis 8.0 from source"
  [ -r /usr/share/keyrings/debian-archive-keyring.gpg ] ||
    need debian-archive-keyring "make compat fetches Valkey 8.0 and Redis 8.0 with apt"
}

check_examples() {
  # apt's python3-redis is for Debian's own Python (/usr/bin/python3), which is what
  # `make test-examples` runs the example with (a pyenv or venv python3 on PATH has its own).
  [ -x /usr/bin/python3 ] || need python3 "examples/python runs on Python 3"
  if ! /usr/bin/python3 -c 'import redis' >/dev/null 2>&1; then
    need python3-redis "examples/python uses redis-py"
  fi
  command -v node >/dev/null 2>&1 || need nodejs "examples/node runs on Node.js"
  command -v npm >/dev/null 2>&1 || need npm "examples/node installs ioredis from the npm registry"
}

check_node() {
  command -v node >/dev/null 2>&1 || need nodejs "clients/node runs on Node.js 18+"
  command -v npm >/dev/null 2>&1 || need npm "clients/node installs its test dependencies from the npm registry (npm ci)"
  if command -v node >/dev/null 2>&1; then
    local major
    major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
    [ "$major" -ge 18 ] || die "node $(node --version) is older than 18, which clients/node needs"
  fi
}

check_memcheck() {
  command -v valgrind >/dev/null 2>&1 || need valgrind "make test-memcheck runs redis-server under valgrind memcheck"
  # The callgrind tools (make callgrind, make bench-gate) are Python scripts.
  command -v python3 >/dev/null 2>&1 || need python3 "make bench-gate and make callgrind run bench/*.py"
}

# `python3 -m venv` needs the venv module and ensurepip (Debian splits them into python3-venv).
check_python_clients() {
  if ! command -v python3 >/dev/null 2>&1; then
    need python3 "make test-python runs clients/python on Python 3"
    need python3-venv "make test-python creates a virtualenv (python3 -m venv)"
  elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    need python3-venv "make test-python creates a virtualenv (python3 -m venv)"
  fi
  after+=(python_clients_venv)
}

# build/python-clients: clients/python with its test extras, from PyPI; rebuilt when the
# pyproject changes (the package itself is reinstalled by make test-python on every run).
python_clients_venv() {
  local venv="$root/build/python-clients" want
  want="$(python3 --version 2>&1) $(sha256sum "$root/clients/python/pyproject.toml" | cut -d' ' -f1)"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.setup-stamp" 2>/dev/null)" = "$want" ]; then
    return 0
  fi
  say "creating $venv ($(python3 --version 2>&1)) with clients/python[test] from PyPI"
  rm -rf "$venv"
  python3 -m venv "$venv" || die "python3 -m venv failed"
  "$venv/bin/python" -m pip install -q --upgrade pip || die "pip upgrade failed"
  "$venv/bin/python" -m pip install -q hatchling "$root/clients/python[test]" ||
    die "pip install clients/python[test] failed"
  echo "$want" >"$venv/.setup-stamp"
}

check_packages() {
  command -v dpkg-deb >/dev/null 2>&1 || need dpkg "make deb builds the package with dpkg-deb"
  command -v sha256sum >/dev/null 2>&1 || need coreutils "make dist writes SHA256SUMS"
  command -v tar >/dev/null 2>&1 || need tar "make dist writes a tarball"
  command -v gzip >/dev/null 2>&1 || need gzip "make dist compresses the tarball"
}

# The crate's rust-version, e.g. 1.80 (Cargo.toml).
check_cargo() {
  local wanted have
  wanted="$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)"
  if ! command -v cargo >/dev/null 2>&1; then
    die "cargo is not installed: install Rust $wanted or newer with rustup (https://rustup.rs), then run this again"
  fi
  have="$(cargo --version 2>/dev/null | awk '{print $2}')"
  have="${have%%-*}"
  if [ -n "$wanted" ] && [ "$(printf '%s\n%s\n' "$wanted" "$have" | sort -V | head -n 1)" != "$wanted" ]; then
    die "cargo $have is older than this crate's rust-version $wanted: run 'rustup update' (Debian's packaged cargo is too old; use rustup)"
  fi
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(core)
for g in "${groups[@]}"; do
  case "$g" in
    core) check_cargo; check_core ;;
    examples) check_examples ;;
    packages) check_packages ;;
    memcheck) check_memcheck ;;
    python-clients) check_python_clients ;;
    node) check_node ;;
    all) check_cargo; check_core; check_examples; check_node; check_packages; check_memcheck ;;
    *) die "unknown group '$g' (known: core, examples, node, packages, memcheck, python-clients, all)" ;;
  esac
done

run_after() {
  local step
  for step in "${after[@]+"${after[@]}"}"; do "$step"; done
}
if [ ${#missing[@]} -eq 0 ]; then
  run_after
  exit 0
fi

for i in "${!missing[@]}"; do
  say "missing ${missing[$i]}: ${why[$i]}"
done
if ! command -v apt-get >/dev/null 2>&1; then
  die "no apt-get here: install these packages (Debian names) with your package manager, then run this again: ${missing[*]}"
fi
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || die "not root and no sudo: as root, run apt-get install ${missing[*]}"
  sudo_cmd=(sudo)
fi
say "installing ${missing[*]} with apt-get${sudo_cmd:+ (through sudo)}"
"${sudo_cmd[@]}" apt-get update -qq </dev/null || die "apt-get update failed"
DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null >&2 ||
  die "apt-get install ${missing[*]} failed"
if [[ " ${missing[*]} " == *" redis-server "* ]]; then
  say "note: Debian's redis-server package starts its own server (without this module) on 127.0.0.1:6379"
  say "      where an init system runs; 'make run' then picks the first free port of 6380-6399 and prints it (or stop it: sudo systemctl stop redis-server)"
fi
has_libclang || [[ " ${groups[*]} " != *" core "* && " ${groups[*]} " != *" all "* ]] ||
  die "libclang-dev is installed but no libclang.so was found; set LIBCLANG_PATH to the directory holding it"
run_after
say "done"
