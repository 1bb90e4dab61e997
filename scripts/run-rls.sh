#!/usr/bin/env bash
# scripts/run-rls.sh RLS_BINARY PORT CONFIG [flags…] — `make run-rls`: redis-server with the module
# (redis.conf) on 127.0.0.1:PORT in the background, then ratelimit-rls in the foreground against
# it; Ctrl-C stops both. ENGINE=functions: a plain redis-server (no module), and the service loads
# the Functions library itself (--engine functions).
set -euo pipefail
rls=${1:?usage: run-rls.sh RLS_BINARY PORT CONFIG [flags…]}
port=${2:?port}
config=${3:?config}
shift 3
case "${ENGINE:-module}" in
  module) "${REDIS_SERVER:-redis-server}" redis.conf --port "$port" & ;;
  functions)
    "${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no &
    set -- --engine functions "$@" ;;
  *) echo "run-rls: ENGINE=${ENGINE} (module or functions)" >&2; exit 2 ;;
esac
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  if redis-cli -p "$port" PING >/dev/null 2>&1; then break; fi
  sleep 0.05
done
redis-cli -p "$port" PING >/dev/null
"$rls" --config "$config" --redis-url "redis://127.0.0.1:$port" "$@"
