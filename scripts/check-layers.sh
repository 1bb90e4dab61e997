#!/usr/bin/env bash
# The layering the code keeps (issue 25), checked in CI by `make lint`:
#   1. the core crate (core/, ratelimit-core) has no redis-module in its dependency tree
#      and forbids unsafe code;
#   2. the server glue (src/server/) never imports the commands (src/command/): the
#      composition root src/entry.rs hands it the callbacks it needs;
#   3. no production source file is over 450 lines (unit tests live in `tests.rs` files
#      or under `tests/`);
#   4. src/command/ one way (issue 42): handlers → decide/ → store/ → stats.rs, each
#      importing only rooms below it (and the shared answer.rs, args.rs, docs.rs,
#      propagate.rs, settings.rs, which import none of them);
#   5. no import circle between the files of src/, core/src and rls/src
#      (scripts/import-circles.py says what counts).
set -euo pipefail
cd "$(dirname "$0")/.."
CARGO=${CARGO:-cargo}
fail=0

tree=$($CARGO tree -p ratelimit-core -e normal,build --prefix none --offline 2>/dev/null \
  || $CARGO tree -p ratelimit-core -e normal,build --prefix none)
if grep -q '^redis-module' <<<"$tree"; then
  echo "check-layers: ratelimit-core depends on redis-module:"; grep '^redis-module' <<<"$tree"; fail=1
fi
if ! grep -q '^#!\[forbid(unsafe_code)\]' core/src/lib.rs; then
  echo "check-layers: core/src/lib.rs must say #![forbid(unsafe_code)]"; fail=1
fi

if grep -rn 'crate::command' src/server; then
  echo "check-layers: src/server/ imports src/command/ (hand the callback in from src/entry.rs)"; fail=1
fi

while IFS= read -r file; do
  lines=$(wc -l <"$file")
  if [ "$lines" -gt 450 ]; then
    echo "check-layers: $file has $lines lines (at most 450 for production code)"; fail=1
  fi
done < <(find src core/src rls/src -name '*.rs' ! -name 'tests.rs' ! -path '*/tests/*' | sort)

# The rooms of src/command/, lowest first; every other file there is a handler (or the
# dispatch in mod.rs, the registration, RL.POLICY): the top.
room() {
  case $1 in
    src/command/answer.rs | src/command/args.rs | src/command/docs.rs | \
      src/command/propagate.rs | src/command/settings.rs) echo "0 shared" ;;
    src/command/stats.rs) echo "1 stats" ;;
    src/command/store/*) echo "2 store" ;;
    src/command/decide/*) echo "3 decide" ;;
    src/command/*) echo "4 handlers" ;;
    *) echo "" ;;
  esac
}
graph=$(python3 scripts/import-circles.py --graph --report-only src | grep -E '^src/.* -> ' || true)
while read -r from _ to; do
  a=$(room "$from"); b=$(room "$to")
  if [ -n "$a" ] && [ -n "$b" ] && [ "${a%% *}" -lt "${b%% *}" ]; then
    echo "check-layers: $from (${a#* }) imports $to (${b#* }): src/command/ goes one way, handlers → decide → store → stats"
    fail=1
  fi
done <<<"$graph"

if ! python3 scripts/import-circles.py src core/src rls/src; then fail=1; fi

if [ "$fail" -ne 0 ]; then exit 1; fi
echo "check-layers: ok (core has no redis-module; server/ does not import command/; no production file over 450 lines; src/command/ one way; no import circle in src/, core/src, rls/src)"
