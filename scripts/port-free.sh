#!/usr/bin/env bash
# scripts/port-free.sh PORT — succeeds when nothing listens on 127.0.0.1:PORT; otherwise says
# what holds it (when it can tell) and how to choose another port, and fails. `make run` calls it
# so that a user never ends up talking to a server without the module.
set -uo pipefail
port=${1:?usage: port-free.sh PORT}
case "$port" in
  '' | *[!0-9]*) echo "make run: PORT must be a number, not '$port'" >&2; exit 2 ;;
esac

# bash's /dev/tcp connects only if something listens there.
if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  exit 0
fi

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
[ -n "$holder" ] || holder="another program"
echo "make run: port $port on 127.0.0.1 is taken by $holder." >&2
echo "make run: not starting a second server: ${hint:+$hint }choose another port, e.g. 'make run PORT=$((port + 1))'" >&2
echo "make run: (then talk to it with 'redis-cli -p $((port + 1))')." >&2
exit 1
