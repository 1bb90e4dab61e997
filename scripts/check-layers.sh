#!/usr/bin/env bash
# The layering the code keeps (issue 25), checked in CI by `make lint`:
#   1. the core crate (core/, ratelimit-core) has no redis-module in its dependency tree
#      and forbids unsafe code;
#   2. the server glue (src/server/) never imports the commands (src/command/): the
#      composition root src/entry.rs hands it the callbacks it needs;
#   3. no production source file is over 450 lines (unit tests live in `tests.rs` files
#      or under `tests/`).
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

if [ "$fail" -ne 0 ]; then exit 1; fi
echo "check-layers: ok (core has no redis-module; server/ does not import command/; no production file over 450 lines)"
