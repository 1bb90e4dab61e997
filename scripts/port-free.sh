#!/usr/bin/env bash
# scripts/port-free.sh PORT | --pick — the port `make run` (and `make run-rls`) listens on.
#
#   port-free.sh PORT   succeeds (printing PORT) when nothing listens on 127.0.0.1:PORT; otherwise
#                       says what holds it (when it can tell) and how to choose another port, and
#                       fails: a port the user asked for is never silently replaced.
#   port-free.sh --pick prints 6379 when it is free; otherwise says what holds it (Debian's
#                       redis-server service, typically) and prints the first free port of
#                       6380–6399; fails, saying what to do, when all are taken.
#
# The chosen port goes to stdout, every message to stderr, so that a user never ends up talking
# to a server without the module.
set -uo pipefail
arg=${1:?usage: port-free.sh PORT | --pick}

# bash's /dev/tcp connects only if something listens there.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Sets $holder to what holds port $1, in words, and $hint to what to do when
# it is Debian's service (called without a subshell, so both stay set).
hint=""
describe() {
  local port=$1 info exe conf pid version
  holder=""
  if command -v redis-cli >/dev/null 2>&1; then
    info="$(timeout 2 redis-cli -h 127.0.0.1 -p "$port" INFO server 2>/dev/null | tr -d '\r')"
    if [[ "$info" == *"redis_version:"* || "$info" == *"valkey_version:"* ]]; then
      exe="$(sed -n 's/^executable://p' <<<"$info")"
      conf="$(sed -n 's/^config_file://p' <<<"$info")"
      pid="$(sed -n 's/^process_id://p' <<<"$info")"
      version="$(sed -n 's/^redis_version://p' <<<"$info")"
      holder="a Redis-compatible server (version ${version:-?}, pid ${pid:-?}${exe:+, $exe}${conf:+, config $conf})"
      if [[ "$conf" == /etc/redis/* || "$conf" == /etc/valkey/* ]]; then
        holder="$holder: Debian's redis-server service, which the redis-server package starts"
        hint="stop it with 'sudo systemctl stop redis-server' (and 'sudo systemctl disable redis-server'), or"
      fi
      if timeout 2 redis-cli -h 127.0.0.1 -p "$port" MODULE LIST 2>/dev/null | grep -qx ratelimit; then
        holder="$holder; it already has the ratelimit module loaded"
      fi
    fi
  fi
  holder="${holder:-another program}"
}

if [ "$arg" = --pick ]; then
  if ! listening 6379; then echo 6379; exit 0; fi
  describe 6379
  for port in $(seq 6380 6399); do
    if ! listening "$port"; then
      echo "make run: 127.0.0.1:6379 is taken by $holder; using 127.0.0.1:$port instead." >&2
      echo "$port"
      exit 0
    fi
  done
  echo "make run: 127.0.0.1:6379 is taken by $holder, and so is every port from 6380 to 6399." >&2
  echo "make run: not starting a server: ${hint:+$hint }choose a free port, e.g. 'make run PORT=16379' (then 'redis-cli -p 16379')." >&2
  exit 1
fi

port=$arg
case "$port" in
  '' | *[!0-9]*) echo "make run: PORT must be a number, not '$port'" >&2; exit 2 ;;
esac
if ! listening "$port"; then echo "$port"; exit 0; fi
describe "$port"
echo "make run: port $port on 127.0.0.1 is taken by $holder." >&2
echo "make run: not starting a second server: ${hint:+$hint }choose another port, e.g. 'make run PORT=$((port + 1))'" >&2
echo "make run: (then talk to it with 'redis-cli -p $((port + 1))'), or leave PORT out to pick a free one." >&2
exit 1
