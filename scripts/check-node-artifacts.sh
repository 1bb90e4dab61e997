#!/usr/bin/env bash
# scripts/check-node-artifacts.sh — packs clients/node with `npm pack` and checks the tarball a
# stranger would install: its name (redis-ratelimit-client), the repository LICENSE and the
# Functions library (lib/ratelimit.lua = functions/ratelimit.lua byte for byte: the prepack script
# copies it in, postpack removes it, so the checkout keeps no copy),
# the npm metadata (license; no repository, homepage, bugs nor any URL), the files it must carry (entry points,
# type declarations, lib/, README) and nothing of the tests; then installs it into an empty
# project, offline (it has no dependencies), and loads it through require and import.
# `make test-packages` calls it. Needs node and npm (scripts/setup.sh node).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh" node
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() {
  echo "check-node-artifacts: FAILED: $*" >&2
  exit 1
}

name=redis-ratelimit-client
tgz="$(cd "$root/clients/node" && npm pack --silent --pack-destination "$work")"
[ -f "$work/$tgz" ] || fail "npm pack wrote no tarball"
case "$tgz" in "$name"-*.tgz) ;; *) fail "the tarball is $tgz, not $name-<version>.tgz" ;; esac
mkdir "$work/unpacked"
tar -xzf "$work/$tgz" -C "$work/unpacked"
pkg="$work/unpacked/package"

cmp -s "$pkg/LICENSE" "$root/LICENSE" || fail "the tarball's LICENSE is missing or differs from the repository's"
cmp -s "$pkg/lib/ratelimit.lua" "$root/functions/ratelimit.lua" ||
  fail "the tarball's lib/ratelimit.lua is missing or differs from functions/ratelimit.lua (clients/node's prepack script copies it)"
[ ! -e "$root/clients/node/lib/ratelimit.lua" ] ||
  fail "clients/node/lib/ratelimit.lua is left in the checkout after npm pack (the postpack script removes it)"
for f in package.json README.md index.js index.mjs index.d.ts lib/client.js lib/ratelimit.js lib/result.js \
  lib/concurrency.js lib/express.js lib/erl-store.js lib/flexible.js lib/ip-key.js lib/engine.js lib/ratelimit.lua; do
  [ -f "$pkg/$f" ] || fail "the tarball lacks $f"
done
if find "$pkg" -path '*/test/*' -o -name node_modules -o -name package-lock.json -o -name copy-library.js | grep -q .; then
  fail "the tarball carries tests, node_modules, the lock file or the packing script: $(find "$pkg" -path '*/test/*' -o -name node_modules -o -name package-lock.json -o -name copy-library.js | head -3)"
fi

# The metadata npm shows: name, license; no repository, homepage or bugs (the project has no
# public home yet: a URL it does not own could lead users to someone else's code), no URL at
# all in package.json; no runtime dependencies.
node - "$pkg/package.json" "$name" <<'EOF' || fail "package.json"
const [file, name] = process.argv.slice(2);
const p = require(file);
const problems = [];
if (p.name !== name) problems.push(`name is ${p.name}`);
if (p.license !== 'MIT') problems.push(`license is ${p.license}`);
for (const field of ['repository', 'homepage', 'bugs']) {
  if (p[field] !== undefined) problems.push(`${field} is ${JSON.stringify(p[field])} (no URL the project does not own)`);
}
const urls = JSON.stringify(p).match(/[a-z+]+:\/\/[^"\s]+/g);
if (urls) problems.push(`URLs: ${urls.join(', ')}`);
if (p.dependencies && Object.keys(p.dependencies).length) problems.push(`runtime dependencies: ${Object.keys(p.dependencies)}`);
if (problems.length) {
  console.error(`check-node-artifacts: ${problems.join('; ')}`);
  process.exit(1);
}
EOF

# Installed from the tarball alone (no registry), it loads by its name, CommonJS and ESM.
mkdir "$work/app"
(cd "$work/app" && npm init -y >/dev/null && npm install --offline --no-audit --no-fund --loglevel=error "$work/$tgz" >/dev/null) ||
  fail "npm install of the tarball"
(cd "$work/app" && node -e "
const m = require('$name');
for (const k of ['RateLimit', 'rateLimit', 'RedisRateLimitStore', 'RateLimiterRedisModule', 'RateLimiterUnion', 'ipKeyGenerator']) {
  if (typeof m[k] !== 'function') { console.error('require: no ' + k); process.exit(1); }
}
const path = require('node:path');
const dir = path.dirname(require.resolve('$name/package.json'));
const e = require(path.join(dir, 'lib', 'engine.js'));
if (!dir.startsWith(process.cwd()) || e.LIBRARY_PATH !== path.join(dir, 'lib', 'ratelimit.lua') ||
    !e.LIBRARY_CODE.startsWith('#!lua name=ratelimit') || !(e.LIBRARY_VERSION >= 1)) {
  console.error('the installed package reads its library from ' + e.LIBRARY_PATH); process.exit(1);
}" && node --input-type=module -e "
import { RateLimit } from '$name';
if (typeof RateLimit !== 'function') process.exit(1);") || fail "the installed package does not load"
echo "check-node-artifacts: $tgz: name, LICENSE, the Functions library, no repository/homepage/bugs nor any URL, files; installs and loads (require, import) and reads its library"
