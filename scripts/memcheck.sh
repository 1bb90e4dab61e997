#!/usr/bin/env bash
# scripts/memcheck.sh MODULE — the command-surface fuzz test (tests/fuzz_commands.rs, FUZZ_BATCHES
# batches of 1,000 calls, default 20) against Redis 7.0 built with MALLOC=libc
# (scripts/servers.sh memcheck) running under valgrind memcheck, with Redis's own suppressions
# (src/valgrind.sup). The test stops its servers with SIGTERM (RATELIMIT_TEST_STOP_SECS), so
# valgrind writes its summary; fails unless every valgrind log ends with
# "ERROR SUMMARY: 0 errors", printing the error records of those that do not.
# `make test-memcheck` calls it.
set -euo pipefail
module=${1:?usage: memcheck.sh /path/to/module.so}
root="$(cd "$(dirname "$0")/.." && pwd)"
server="$("$root/scripts/servers.sh" memcheck | tail -n 1)"
logs="$root/build/memcheck"
rm -rf "$logs"
mkdir -p "$logs"
wrapper="$logs/redis-server"
cat >"$wrapper" <<WRAP
#!/bin/sh
exec valgrind --tool=memcheck --error-exitcode=99 --leak-check=no --track-origins=no \\
  --suppressions="$(dirname "$server")/valgrind.sup" \\
  --log-file="$logs/valgrind-%p.log" "$server" "\$@"
WRAP
chmod +x "$wrapper"
echo "memcheck: $("$server" --version) under $(valgrind --version)"
t0=$SECONDS
test_status=0
RATELIMIT_MODULE="$module" REDIS_SERVER="$wrapper" RATELIMIT_TEST_STARTUP_SECS=60 \
  RATELIMIT_TEST_STOP_SECS=60 FUZZ_BATCHES="${FUZZ_BATCHES:-20}" \
  "${CARGO:-cargo}" test --test fuzz_commands -- --test-threads=1 || test_status=$?
echo "memcheck: the fuzz test took $((SECONDS - t0)) s under valgrind"
status=0
count=0
for log in "$logs"/valgrind-*.log; do
  [ -f "$log" ] || continue
  count=$((count + 1))
  if ! grep -qE '^==[0-9]+== ERROR SUMMARY: 0 errors' "$log"; then
    echo "memcheck: $log: $(grep -E 'ERROR SUMMARY' "$log" || echo 'no ERROR SUMMARY (the server did not exit by itself)')" >&2
    # The error records: what valgrind wrote after its banner (which ends
    # with the command line) and before the heap summary.
    awk '/== Command: / { body = 1; next } /== (HEAP|ERROR) SUMMARY/ { body = 0 } body' "$log" |
      head -n 150 >&2
    status=1
  fi
done
[ "$count" -gt 0 ] || { echo "memcheck: no valgrind log was written" >&2; exit 1; }
echo "memcheck: $count valgrind log(s), $([ $status -eq 0 ] && echo '0 errors' || echo 'ERRORS')"
[ "$test_status" -eq 0 ] || { echo "memcheck: the fuzz test failed (exit $test_status)" >&2; exit 1; }
exit $status
