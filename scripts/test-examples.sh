#!/usr/bin/env bash
# scripts/test-examples.sh MODULE — runs the tests of examples/python (redis-py) and
# examples/node (ioredis) against real redis-servers with the module MODULE loaded.
# `make test-examples` calls it after `scripts/setup.sh examples`.
set -euo pipefail
module=${1:?usage: test-examples.sh /path/to/module.so}
root="$(cd "$(dirname "$0")/.." && pwd)"
export RATELIMIT_MODULE="$module"
python=/usr/bin/python3
[ -x "$python" ] || python=python3
passed=0
failed=()

echo "== examples/python ($("$python" --version 2>&1), redis-py $("$python" -c 'import redis; print(redis.__version__)'))"
if (cd "$root/examples/python" && "$python" -m unittest discover -s . -v); then
  passed=$((passed + 1))
else
  failed+=(python)
fi

echo "== examples/node (node $(node --version))"
if (cd "$root/examples/node" && { [ -f package-lock.json ] && npm ci --no-audit --no-fund --loglevel=error || npm install --no-audit --no-fund --loglevel=error; } && npm test); then
  passed=$((passed + 1))
else
  failed+=(node)
fi

echo "test-examples: $passed passed, ${#failed[@]} failed${failed[*]:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
