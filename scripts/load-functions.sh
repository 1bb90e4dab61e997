#!/usr/bin/env bash
# scripts/load-functions.sh — `make load-functions`: installs the Functions library
# (functions/ratelimit.lua) where the module cannot be loaded.
#
#   REDIS_URL       the server: redis://[user:password@]host:port[/db], rediss://… for TLS (as
#                   redis-cli -u takes it). Default redis://127.0.0.1:$PORT, PORT 6379.
#   CLUSTER=1       every primary of the cluster REDIS_URL belongs to (CLUSTER NODES), each reached
#                   at the address the cluster announces, with REDIS_URL's user, password and TLS.
#   REDIS_CLI_ARGS  more redis-cli options, e.g. '--cacert ca.pem' or '--insecure' for TLS.
#
# On each server it loads the library only where it is absent or older than this checkout's
# (FCALL_RO rl_version 0 below functions/ratelimit.lua's VERSION), as the clients do: a newer one
# is left alone. One line per server says what it did; the exit status is non-zero if any server
# refused or could not be reached.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
library="$root/functions/ratelimit.lua"
url="${REDIS_URL:-redis://127.0.0.1:${PORT:-6379}}"
want="$(sed -n 's/^local VERSION = \([0-9][0-9]*\)$/\1/p' "$library")"
[ -n "$want" ] || { echo "load-functions: $library has no 'local VERSION = n' line" >&2; exit 1; }
read -r -a extra <<<"${REDIS_CLI_ARGS:-}"
command -v redis-cli >/dev/null || { echo "load-functions: redis-cli is missing (Debian: apt-get install redis-tools)" >&2; exit 1; }

# The URL's parts: scheme, user info (kept as given, percent-encoding included), host, port, db.
if [[ ! "$url" =~ ^(rediss?)://(([^@/]*)@)?(\[[^]/]+\]|[^:/@]+)(:([0-9]+))?(/([0-9]*))?$ ]]; then
  echo "load-functions: REDIS_URL must be redis://[user:password@]host[:port][/db] or rediss://…, not $url" >&2
  exit 1
fi
scheme="${BASH_REMATCH[1]}"
userinfo="${BASH_REMATCH[3]}"
host="${BASH_REMATCH[4]}"
port="${BASH_REMATCH[6]:-6379}"
# The URL of host:port with REDIS_URL's scheme and credentials.
url_of() {
  local h=$1
  [[ "$h" == *:* && "$h" != \[* ]] && h="[$h]" # an IPv6 address
  echo "$scheme://${userinfo:+$userinfo@}$h:$2"
}
cli() {
  local target=$1
  shift
  redis-cli --no-auth-warning -u "$target" ${extra[@]+"${extra[@]}"} "$@"
}

failed=0
# load_on URL NAME: loads the library there unless it has this version or a newer one.
load_on() {
  local target=$1 name=$2 reply version
  if ! reply="$(cli "$target" FCALL_RO rl_version 0 2>&1)"; then
    echo "load-functions: $name: FAILED: $reply" >&2
    failed=1
    return
  fi
  if [[ "$reply" =~ ^[0-9]+$ ]]; then
    version=$reply
  elif [[ "$reply" == *"Function not found"* ]]; then
    version=0
  elif [[ "$reply" == *"unknown command"* ]]; then
    echo "load-functions: $name: FAILED: this server has no FUNCTION (Redis before 7.0: $reply); the clients run the library's code by EVALSHA there, nothing to load" >&2
    failed=1
    return
  else
    echo "load-functions: $name: FAILED: FCALL_RO rl_version 0 answered: $reply" >&2
    failed=1
    return
  fi
  if [ "$version" -ge "$want" ]; then
    echo "load-functions: $name: kept version $version (this checkout's is $want)"
    return
  fi
  reply="$(cli "$target" -x FUNCTION LOAD REPLACE <"$library" 2>&1)" || true
  if [ "$reply" != "ratelimit" ]; then
    echo "load-functions: $name: FAILED: FUNCTION LOAD REPLACE answered: $reply" >&2
    [[ "$reply" == *NOPERM* || "$reply" == *"no permissions"* ]] &&
      echo "load-functions: $name: this user may not run FUNCTION: an administrator loads it (docs/functions.md)" >&2
    failed=1
    return
  fi
  if [ "$version" -eq 0 ]; then
    echo "load-functions: $name: loaded version $want (none before)"
  else
    echo "load-functions: $name: loaded version $want (replaced version $version)"
  fi
}

if [ "${CLUSTER:-}" = 1 ]; then
  if ! nodes="$(cli "$url" CLUSTER NODES 2>&1)" || [[ ! "$nodes" =~ (master|myself) ]]; then
    echo "load-functions: $host:$port: FAILED: CLUSTER NODES answered: $nodes" >&2
    exit 1
  fi
  # <id> <ip:port@cport[,hostname]> <flags> …: the primaries that are not failing.
  primaries="$(awk '$3 ~ /master/ && $3 !~ /fail|noaddr|handshake/ { split($2, a, "@"); print a[1] }' <<<"$nodes")"
  [ -n "$primaries" ] || { echo "load-functions: $host:$port: FAILED: no primary in CLUSTER NODES" >&2; exit 1; }
  while read -r addr; do
    load_on "$(url_of "${addr%:*}" "${addr##*:}")" "$addr"
  done <<<"$primaries"
else
  load_on "$url" "$host:$port"
fi
exit "$failed"
