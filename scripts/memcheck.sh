#!/usr/bin/env bash
# scripts/memcheck.sh MODULE — the command-surface fuzz test (tests/fuzz_commands.rs, FUZZ_BATCHES
# batches of 1,000 calls, default 20) against Redis 7.0 built with MALLOC=libc
# (scripts/servers.sh memcheck) running under valgrind memcheck, with Redis's own suppressions
# (src/valgrind.sup); fails when any valgrind log holds an error record. `make test-memcheck`
# calls it.
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
RATELIMIT_MODULE="$module" REDIS_SERVER="$wrapper" RATELIMIT_TEST_STARTUP_SECS=60 \
  FUZZ_BATCHES="${FUZZ_BATCHES:-20}" cargo test --test fuzz_commands -- --test-threads=1
status=0
count=0
for log in "$logs"/valgrind-*.log; do
  [ -f "$log" ] || continue
  count=$((count + 1))
  # An error record always carries a stack ("at 0x…"); the summary line may
  # be missing, since the test harness kills its servers.
  if grep -qE '^==[0-9]+== +(at|by) 0x' "$log" || grep -qE 'ERROR SUMMARY: [1-9]' "$log"; then
    echo "memcheck: errors in $log:" >&2
    sed -n '/== [A-Z]/,$p' "$log" | head -n 80 >&2
    status=1
  fi
done
[ "$count" -gt 0 ] || { echo "memcheck: no valgrind log was written" >&2; exit 1; }
echo "memcheck: $count valgrind log(s), $([ $status -eq 0 ] && echo '0 errors' || echo 'ERRORS')"
exit $status
