#!/usr/bin/env bash
# The Functions library's version discipline (issue 30), checked by `make lint` and
# `make test-functions`: clients replace an older library by comparing `rl_version` with the
# VERSION of the copy they embed, so every change of functions/ratelimit.lua must raise it.
# functions/VERSIONS lists `<version> <sha256 of functions/ratelimit.lua>`, one line per
# version ever released, oldest first. This fails unless
#   1. the file's sha256 is listed, with the VERSION the file declares (`local VERSION = n`);
#   2. every version and every sha256 is listed once, and the versions grow line by line;
#   3. the file's VERSION is the last (highest) one listed.
# After changing the library: raise VERSION, then append `<new version> <sha256sum output>`.
set -euo pipefail
cd "$(dirname "$0")/.."
library=functions/ratelimit.lua
versions=functions/VERSIONS
fail=0

declared=$(sed -n 's/^local VERSION = \([0-9][0-9]*\)$/\1/p' "$library")
if [ "$(grep -c '^local VERSION = ' "$library")" -ne 1 ] || [ -z "$declared" ]; then
  echo "check-library-version: $library must declare its version once, as 'local VERSION = <n>'"
  exit 1
fi
sha=$(sha256sum "$library" | cut -d' ' -f1)

previous=0
last=""
declare -A seen_version seen_sha
while read -r version hash rest; do
  case "$version" in ''|'#'*) continue ;; esac
  if ! [[ "$version" =~ ^[1-9][0-9]*$ ]] || ! [[ "$hash" =~ ^[0-9a-f]{64}$ ]] || [ -n "$rest" ]; then
    echo "check-library-version: $versions: '$version $hash $rest' is not '<version> <sha256>'"; fail=1; continue
  fi
  if [ -n "${seen_version[$version]:-}" ]; then
    echo "check-library-version: $versions lists version $version twice (one version, one file)"; fail=1
  fi
  if [ -n "${seen_sha[$hash]:-}" ]; then
    echo "check-library-version: $versions lists $hash twice (versions ${seen_sha[$hash]} and $version)"; fail=1
  fi
  if [ "$version" -le "$previous" ]; then
    echo "check-library-version: $versions: version $version follows $previous (versions must grow)"; fail=1
  fi
  seen_version[$version]=$hash
  seen_sha[$hash]=$version
  previous=$version
  last=$version
done <"$versions"

listed=${seen_sha[$sha]:-}
if [ -z "$listed" ]; then
  echo "check-library-version: $library (sha256 $sha) is not in $versions: it changed;"
  echo "  raise its VERSION (now $declared) and append '<new version> <sha256>' to $versions"
  fail=1
elif [ "$listed" != "$declared" ]; then
  echo "check-library-version: $library declares VERSION $declared, but $versions lists its sha256 as version $listed"
  fail=1
fi
if [ "$declared" != "$last" ]; then
  echo "check-library-version: $library declares VERSION $declared; the last version in $versions is $last"
  fail=1
fi
if [ "$fail" -ne 0 ]; then exit 1; fi
echo "check-library-version: $library is version $declared, listed in $versions"
