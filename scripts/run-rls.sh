#!/usr/bin/env bash
# scripts/run-rls.sh RLS_BINARY PORT CONFIG [flags…] — `make run-rls`: redis-server with the module
# (redis.conf) on 127.0.0.1:PORT in the background, then ratelimit-rls in the foreground against
# it; Ctrl-C stops both.
set -euo pipefail
rls=${1:?usage: run-rls.sh RLS_BINARY PORT CONFIG [flags…]}
port=${2:?port}
config=${3:?config}
shift 3
"${REDIS_SERVER:-redis-server}" redis.conf --port "$port" &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  if redis-cli -p "$port" PING >/dev/null 2>&1; then break; fi
  sleep 0.05
done
redis-cli -p "$port" PING >/dev/null
"$rls" --config "$config" --redis-url "redis://127.0.0.1:$port" "$@"
