#!/usr/bin/env bash
# scripts/test-packages.sh VERSION ARCH DEB_ARCH — checks the packages `make dist` and `make deb`
# wrote: SHA256SUMS matches; the tarball carries README.md and every page of docs/, and its module
# loads and answers RL.GCRA; the .deb installs with dpkg -i, puts README.md and docs/ under
# /usr/share/doc/redis-ratelimit/, a server started with `include /etc/redis/ratelimit.conf` loads
# the module from /usr/lib/redis/modules/ and answers RL.GCRA, and the package is then purged.
# Needs root or sudo.
set -euo pipefail
version=${1:?usage: test-packages.sh VERSION ARCH DEB_ARCH}
arch=${2:?arch}
deb_arch=${3:?deb arch}
root="$(cd "$(dirname "$0")/.." && pwd)"
dist="$root/dist"
server=${REDIS_SERVER:-redis-server}
work="$(mktemp -d)"
pid=""
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
installed=0
cleanup() {
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  [ "$installed" -eq 0 ] || "${sudo_cmd[@]}" dpkg --purge redis-ratelimit >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "test-packages: FAILED: $*" >&2
  [ ! -f "$work/server.log" ] || tail -n 20 "$work/server.log" >&2
  exit 1
}

free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  fail "no free port"
}

# Starts a server from config file $1, waits for it, checks one RL.GCRA call, stops it.
check_server() {
  local conf=$1 what=$2 port reply
  port="$(free_port)"
  "$server" "$conf" --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    --logfile "$work/server.log" &
  pid=$!
  for _ in $(seq 1 100); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || fail "$what: the server exited (did the module load?)"
    sleep 0.05
  done
  reply="$(redis-cli -p "$port" RL.GCRA pkgtest 4 10 60 | tr '\n' ' ')"
  [ "$reply" = "0 5 4 -1 6000 " ] || fail "$what: RL.GCRA pkgtest 4 10 60 answered '$reply'"
  redis-cli -p "$port" MODULE LIST | grep -qx ratelimit || fail "$what: MODULE LIST has no ratelimit"
  redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  pid=""
  echo "test-packages: $what: loaded and answered RL.GCRA"
}

(cd "$dist" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS does not match"
echo "test-packages: SHA256SUMS matches"

# The tarball: unpack, point its config snippet at the unpacked module.
name="redis-ratelimit-$version-linux-$arch"
tar -C "$work" -xzf "$dist/$name.tar.gz"
for f in redis-ratelimit.so README.md LICENSE ratelimit.conf; do
  [ -f "$work/$name/$f" ] || fail "the tarball lacks $name/$f"
done
# The documentation: every page under docs/ (README.md links into it).
doc_pages="$(cd "$root/docs" && find . -type f -name '*.md' | sed 's#^\./##' | sort)"
[ -n "$doc_pages" ] || fail "no pages under docs/"
for f in $doc_pages; do
  cmp -s "$root/docs/$f" "$work/$name/docs/$f" || fail "the tarball lacks $name/docs/$f (or it differs)"
done
echo "test-packages: the tarball carries README.md and docs/ ($(wc -w <<<"$doc_pages") pages)"
sed "s#/path/to/$name#$work/$name#" "$work/$name/ratelimit.conf" >"$work/tarball.conf"
check_server "$work/tarball.conf" "tarball"

# The .deb: install, include its snippet, purge.
deb="$dist/redis-ratelimit_${version}_${deb_arch}.deb"
"${sudo_cmd[@]}" dpkg -i "$deb" >/dev/null || fail "dpkg -i $deb"
installed=1
[ -f /usr/lib/redis/modules/redis-ratelimit.so ] || fail "the .deb did not install /usr/lib/redis/modules/redis-ratelimit.so"
for f in README.md $(sed 's#^#docs/#' <<<"$doc_pages"); do
  cmp -s "$root/$f" "/usr/share/doc/redis-ratelimit/$f" || fail "the .deb did not install /usr/share/doc/redis-ratelimit/$f"
done
echo "test-packages: the .deb installed README.md and docs/ under /usr/share/doc/redis-ratelimit/"
echo "include /etc/redis/ratelimit.conf" >"$work/deb.conf"
check_server "$work/deb.conf" ".deb (/usr/lib/redis/modules/redis-ratelimit.so)"
"${sudo_cmd[@]}" dpkg --purge redis-ratelimit >/dev/null || fail "dpkg --purge redis-ratelimit"
installed=0
[ ! -e /usr/lib/redis/modules/redis-ratelimit.so ] || fail "the module is still there after dpkg --purge"
echo "test-packages: .deb removed"
echo "test-packages: 3 passed, 0 failed"
