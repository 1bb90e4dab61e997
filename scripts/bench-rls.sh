#!/usr/bin/env bash
# scripts/bench-rls.sh MODULE BENCH_BINARY [args…] — `make bench-rls`: a redis-server with the module
# on a free loopback port, then rls-bench against it (see rls/src/bin/rls-bench.rs).
set -euo pipefail
module=${1:?usage: bench-rls.sh MODULE BENCH_BINARY [args…]}
bench=${2:?bench binary}
shift 2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
"${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$dir" --logfile "$dir/server.log" --loadmodule "$module" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do
  if redis-cli -p "$port" PING >/dev/null 2>&1; then break; fi
  sleep 0.05
done
"$bench" --redis-url "redis://127.0.0.1:$port" "$@"
