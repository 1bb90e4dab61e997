#!/usr/bin/env bash
# scripts/dist.sh tarball|deb VERSION ARCH MODULE — the release packages, under dist/:
#
#   tarball  dist/redis-ratelimit-VERSION-linux-ARCH.tar.gz: redis-ratelimit.so, README.md, docs/
#            (the command reference, policies, operations …), LICENSE, ratelimit.conf (a loadmodule
#            line to include from redis.conf); dist/SHA256SUMS
#   deb      dist/redis-ratelimit_VERSION_ARCH.deb, built with dpkg-deb: the module at
#            /usr/lib/redis/modules/redis-ratelimit.so and /etc/redis/ratelimit.conf (a conffile
#            that a server can `include`), README.md and docs/ under /usr/share/doc/redis-ratelimit/;
#            dist/SHA256SUMS
#
# `make dist` and `make deb` call it after building the release module.
set -euo pipefail
kind=${1:?usage: dist.sh tarball|deb VERSION ARCH MODULE}
version=${2:?version}
arch=${3:?arch}
module=${4:?module path}
root="$(cd "$(dirname "$0")/.." && pwd)"
dist="$root/dist"
[ -f "$module" ] || { echo "dist: no module at $module (make build)" >&2; exit 1; }
mkdir -p "$dist"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# docs/ (every .md under it, the layout kept, so that README.md's links resolve) into $1.
copy_docs() {
  (cd "$root/docs" && find . -type f -name '*.md' | sort) | while read -r f; do
    install -D -m 0644 "$root/docs/$f" "$1/$f"
  done
}

sums() {
  (cd "$dist" && sha256sum -- *.tar.gz *.deb 2>/dev/null >SHA256SUMS.tmp || true; mv SHA256SUMS.tmp SHA256SUMS)
}

case "$kind" in
  tarball)
    name="redis-ratelimit-$version-linux-$arch"
    mkdir -p "$work/$name"
    install -m 0755 "$module" "$work/$name/redis-ratelimit.so"
    install -m 0644 "$root/README.md" "$root/LICENSE" "$work/$name/"
    copy_docs "$work/$name/docs"
    sed "s#/usr/lib/redis/modules/redis-ratelimit.so#/path/to/$name/redis-ratelimit.so#; s#include /etc/redis/ratelimit.conf#include /path/to/$name/ratelimit.conf#" \
      "$root/packaging/ratelimit.conf" >"$work/$name/ratelimit.conf"
    tar -C "$work" --owner=0 --group=0 --numeric-owner -czf "$dist/$name.tar.gz" "$name"
    sums
    echo "dist: wrote dist/$name.tar.gz and dist/SHA256SUMS"
    ;;
  deb)
    pkg="$work/pkg"
    install -d "$pkg/DEBIAN" "$pkg/usr/lib/redis/modules" "$pkg/etc/redis" "$pkg/usr/share/doc/redis-ratelimit"
    install -m 0755 "$module" "$pkg/usr/lib/redis/modules/redis-ratelimit.so"
    install -m 0644 "$root/packaging/ratelimit.conf" "$pkg/etc/redis/ratelimit.conf"
    install -m 0644 "$root/README.md" "$pkg/usr/share/doc/redis-ratelimit/README.md"
    copy_docs "$pkg/usr/share/doc/redis-ratelimit/docs"
    install -m 0644 "$root/LICENSE" "$pkg/usr/share/doc/redis-ratelimit/copyright"
    echo /etc/redis/ratelimit.conf >"$pkg/DEBIAN/conffiles"
    size_kb="$(du -sk "$pkg/usr" "$pkg/etc" | awk '{s += $1} END {print s}')"
    cat >"$pkg/DEBIAN/control" <<CONTROL
Package: redis-ratelimit
Version: $version
Architecture: $arch
Maintainer: redis-ratelimit maintainers <maintainers@users.noreply.github.com>
Installed-Size: $size_kb
Depends: libc6 (>= 2.34), libgcc-s1
Recommends: redis-server (>= 5:7.0) | valkey-server
Section: database
Priority: optional
Description: rate limiting inside Redis and Valkey (GCRA, token bucket, windows)
 A Redis module that runs rate-limiting algorithms atomically inside the
 server: RL.GCRA, RL.TOKENBUCKET, RL.LEAKYBUCKET, RL.FIXEDWINDOW,
 RL.SLIDINGWINDOW, RL.SLIDINGLOG and the redis-cell compatible CL.THROTTLE.
 .
 The module is installed as /usr/lib/redis/modules/redis-ratelimit.so;
 add "include /etc/redis/ratelimit.conf" to redis.conf (or valkey.conf)
 and restart the server to load it.
CONTROL
    out="$dist/redis-ratelimit_${version}_${arch}.deb"
    dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out" >/dev/null
    sums
    echo "dist: wrote ${out#"$root"/} and dist/SHA256SUMS"
    ;;
  *) echo "dist: unknown kind '$kind' (tarball or deb)" >&2; exit 2 ;;
esac
