#!/usr/bin/env bash
# Commit subjects at most 72 characters (what `git log --oneline` shows whole), the figures and
# the why in the body: every commit since $BASE (the last one before the rule, issue 42). Run
# by `make lint`. Outside a git checkout, or in a clone without $BASE (shallow), it says so and
# passes.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=488a7e532f633ce03813a294b531b13496ee7566
MAX=72
if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "check-commit-subjects: not a git checkout, nothing to check"; exit 0
fi
if ! git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  echo "check-commit-subjects: $BASE not in this clone (shallow?), nothing to check"; exit 0
fi
long=$(git log --format='%h %s' "$BASE..HEAD" | awk -v max="$MAX" 'length($0) - index($0, " ") > max')
if [ -n "$long" ]; then
  echo "check-commit-subjects: subjects over $MAX characters (put the figures and the why in the body):"
  echo "$long"
  exit 1
fi
echo "check-commit-subjects: ok (every subject since ${BASE:0:7} at most $MAX characters)"
