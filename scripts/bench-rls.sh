#!/usr/bin/env bash
# scripts/bench-rls.sh MODULE BENCH_BINARY [args…] — `make bench-rls`: a redis-server with the module
# on a free loopback port, then rls-bench against it (see rls/src/bin/rls-bench.rs): Redis time and
# CPU per decision, the service at a fixed rate, and with 64 requests in flight. Then, when the Redis 7.0 with symbols of
# `make callgrind` is there (build/servers/redis-7.0-libc), the same Redis comparison counted in
# instructions under callgrind (repeatable on a shared machine).
set -euo pipefail
module=$(realpath "${1:?usage: bench-rls.sh MODULE BENCH_BINARY [args…]}")
bench=${2:?bench binary}
shift 2
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ping() {
  for _ in $(seq 600); do
    if redis-cli -p "$1" PING >/dev/null 2>&1; then return 0; fi
    sleep 0.05
  done
  echo "bench-rls: the server on port $1 did not start" >&2; return 1
}
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT

port=$(free_port)
"${REDIS_SERVER:-redis-server}" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
  --dir "$dir" --logfile "$dir/server.log" --loadmodule "$module" &
pids+=($!)
wait_ping "$port"
"$bench" --redis-url "redis://127.0.0.1:$port" "$@"

symbols=build/servers/redis-7.0-libc/redis-server
if [ -x "$symbols" ] && command -v valgrind >/dev/null && command -v callgrind_control >/dev/null; then
  echo
  port=$(free_port)
  (cd "$dir" && exec valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out.%p" \
     "$OLDPWD/$symbols" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
     --dir "$dir" --logfile "$dir/server-callgrind.log" --loadmodule "$module") 2>/dev/null &
  pids+=($!)
  wait_ping "$port"
  server_pid=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^process_id://p')
  "$bench" --redis-url "redis://127.0.0.1:$port" --decisions 4000 --callgrind-pid "$server_pid" --callgrind-dir "$dir"
else
  echo "(no callgrind run: 'make callgrind' prepares build/servers/redis-7.0-libc and valgrind)"
fi
