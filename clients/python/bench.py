"""Decisions per second and server µs per decision: `limits` strategies on redis-ratelimit's
storage (`redis+rl://`: RL.SLIDINGLOG, RL.SLIDINGWINDOW) vs `limits`' own Redis storage
(`redis://`: Lua scripts), on one redis-server with the module, in one run.

    RATELIMIT_MODULE=target/release/libredis_ratelimit.so python clients/python/bench.py [--hits N]

One client, one connection, sequential `hit()` calls over many keys (all allowed: the common
case). Server µs per decision: the `usec` of the top-level command (RL.* or EVALSHA) in INFO
commandstats divided by its calls, so a script's inner commands are counted once.
"""

from __future__ import annotations

import argparse
import time

import redis
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import (
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)

import redis_ratelimit  # noqa: F401
from tests.helpers import RedisServer  # clients/python is the script's directory

CASES = [
    ("moving window", MovingWindowRateLimiter, "redis+rl", "rl.slidinglog"),
    ("moving window", MovingWindowRateLimiter, "redis", "evalsha"),
    ("sliding window counter", SlidingWindowCounterRateLimiter, "redis+rl", "rl.slidingwindow"),
    ("sliding window counter", SlidingWindowCounterRateLimiter, "redis", "evalsha"),
]


def run(port: int, hits: int, keys: int) -> list:
    admin = redis.Redis("127.0.0.1", port)
    item = parse("100/minute")
    rows = []
    for label, strategy, scheme, command in CASES:
        admin.flushall()
        limiter = strategy(storage_from_string(f"{scheme}://127.0.0.1:{port}"))
        for i in range(min(hits, 500)):  # warm up: scripts loaded, connection open
            limiter.hit(item, f"warm{i % keys}")
        admin.flushall()
        admin.config_resetstat()
        start = time.perf_counter()
        allowed = sum(limiter.hit(item, f"user{i % keys}") for i in range(hits))
        elapsed = time.perf_counter() - start
        stats = admin.info("commandstats")[f"cmdstat_{command}"]
        assert allowed == hits, f"{label} {scheme}: {allowed} of {hits} allowed"
        rows.append((label, scheme, command.upper(), hits / elapsed,
                     stats["usec"] / stats["calls"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hits", type=int, default=20000)
    parser.add_argument("--keys", type=int, default=1000)
    args = parser.parse_args()
    with RedisServer() as server:
        version = redis.Redis("127.0.0.1", server.port).info("server")["redis_version"]
        rows = run(server.port, args.hits, args.keys)
    print(f"Redis {version}, {args.hits} hits over {args.keys} keys, limit 100/minute, "
          "one connection")
    print("| strategy | storage | command | decisions/s | server µs/decision |")
    print("|---|---|---|---:|---:|")
    for label, scheme, command, rate, usec in rows:
        print(f"| {label} | `{scheme}://` | {command} | {rate:,.0f} | {usec:.2f} |")


if __name__ == "__main__":
    main()
