"""The `limits` storages on the module: schemes, strategies, per-strategy keys, cluster, async."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("limits", minversion="5")  # limits 5 needs Python 3.10+
import redis
from limits import parse
from limits.aio.strategies import MovingWindowRateLimiter as AioMovingWindow
from limits.aio.strategies import SlidingWindowCounterRateLimiter as AioSlidingWindow
from limits.storage import storage_from_string
from limits.strategies import (
    FixedWindowRateLimiter,
    MovingWindowRateLimiter,
    SlidingWindowCounterRateLimiter,
)

import redis_ratelimit  # noqa: F401  (registers the schemes)
from redis_ratelimit.limits_storage import (
    AsyncRateLimitClusterStorage,
    AsyncRateLimitStorage,
    MovingWindowLimitTooLarge,
    RateLimitClusterStorage,
    RateLimitStorage,
)
from tests.helpers import RedisServer, calls


def test_schemes_are_registered(server) -> None:
    p = server.port
    assert type(storage_from_string(f"redis+rl://127.0.0.1:{p}")) is RateLimitStorage
    assert type(storage_from_string(f"redis+rl://127.0.0.1:{p}/0")) is RateLimitStorage
    assert type(storage_from_string(f"async+redis+rl://127.0.0.1:{p}")) is AsyncRateLimitStorage
    from limits._storage_scheme import SCHEMES

    assert SCHEMES["rediss+rl"] is RateLimitStorage
    assert SCHEMES["redis+rl+cluster"] is RateLimitClusterStorage
    assert SCHEMES["async+redis+rl+cluster"] is AsyncRateLimitClusterStorage


@pytest.mark.parametrize("strategy, command", [
    (MovingWindowRateLimiter, "rl.slidinglog"),
    (SlidingWindowCounterRateLimiter, "rl.slidingwindow"),
])
def test_strategies_run_on_the_module(url, r, strategy, command) -> None:
    storage = storage_from_string(url.replace("redis://", "redis+rl://"))
    limiter = strategy(storage)
    item = parse("3/minute")
    before = calls(r, command)
    assert [limiter.hit(item, "alice") for _ in range(4)] == [True, True, True, False]
    assert calls(r, command) == before + 4
    assert not limiter.test(item, "alice")
    stats = limiter.get_window_stats(item, "alice")
    assert stats.remaining == 0
    assert limiter.hit(item, "bob", cost=3) and not limiter.hit(item, "bob")
    limiter.clear(item, "alice")
    assert limiter.get_window_stats(item, "alice").remaining == 3
    assert limiter.hit(item, "alice")


def test_every_strategy_has_its_own_key(url, r) -> None:
    """limits builds one key per item for every strategy: RL.* would answer WRONGTYPE on the
    fixed window's INCR counter without the suffixes."""
    storage = storage_from_string(url.replace("redis://", "redis+rl://"))
    item = parse("2/minute")
    for strategy in (FixedWindowRateLimiter, MovingWindowRateLimiter,
                     SlidingWindowCounterRateLimiter):
        assert strategy(storage).hit(item, "k")
    key = item.key_for("k")
    assert r.type(f"LIMITS:{key}") == b"string"
    assert r.type(f"LIMITS:{key}/rl.slidinglog") == b"zset"
    assert r.type(f"LIMITS:{key}/rl.slidingwindow") == b"string"
    # The fixed window stays on limits' INCR.
    assert r.get(f"LIMITS:{key}") == b"1"
    storage.clear(key)
    assert r.dbsize() == 0


def test_moving_window_stats_come_from_the_log(url, r) -> None:
    storage = storage_from_string(url.replace("redis://", "redis+rl://"))
    limiter = MovingWindowRateLimiter(storage)
    item = parse("5/minute")
    assert limiter.hit(item, "x", cost=2)
    start, count = storage.get_moving_window(item.key_for("x"), 5, 60)
    assert count == 2
    stats = limiter.get_window_stats(item, "x")
    assert stats.remaining == 3
    assert stats.reset_time == pytest.approx(start + 60)


def test_a_limit_above_the_module_bound_is_one_error(url) -> None:
    """Above the module's sliding-log-max-limit (1000 here) and above the setting's own bound
    (100000), the module words its refusal differently: the storage says one thing."""
    errors = []
    storage = storage_from_string(url.replace("redis://", "redis+rl://"))
    for limit in (5000, 100_001):
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            MovingWindowRateLimiter(storage).hit(parse(f"{limit}/minute"), "x")
        errors.append((limit, caught.value))

    async def run() -> None:
        aio = storage_from_string(url.replace("redis://", "async+redis+rl://"))
        for limit in (5000, 100_001):
            with pytest.raises(redis.exceptions.ResponseError) as caught:
                await AioMovingWindow(aio).hit(parse(f"{limit}/minute"), "x")
            errors.append((limit, caught.value))

    asyncio.run(run())
    assert all(isinstance(e, MovingWindowLimitTooLarge) for _, e in errors)
    messages = [str(e).split(" (the module said")[0].replace(str(n), "N") for n, e in errors]
    assert len(set(messages)) == 1, messages
    assert "use the sliding-window-counter strategy" in messages[0]


def test_the_async_storage_registers_its_scripts_once(url, r) -> None:
    """get_moving_window / get_sliding_window run their script by EVALSHA (loaded once), not by
    sending the whole script with EVAL on every call, as the sync storage does."""
    async def run() -> None:
        storage = storage_from_string(url.replace("redis://", "async+redis+rl://"))
        item = parse("5/minute")
        for strategy in (AioMovingWindow, AioSlidingWindow):
            limiter = strategy(storage)
            for _ in range(3):
                await limiter.hit(item, "s")
                await limiter.get_window_stats(item, "s")

    r.script_flush()
    before_eval = calls(r, "eval")
    asyncio.run(run())
    assert calls(r, "eval") == before_eval
    assert calls(r, "evalsha") >= 6


def test_async_storage(url, r) -> None:
    async def run() -> None:
        storage = storage_from_string(url.replace("redis://", "async+redis+rl://"))
        item = parse("2/minute")
        for strategy in (AioMovingWindow, AioSlidingWindow):
            limiter = strategy(storage)
            assert [await limiter.hit(item, "a") for _ in range(3)] == [True, True, False]
            assert (await limiter.get_window_stats(item, "a")).remaining == 0
            await limiter.clear(item, "a")
            assert (await limiter.get_window_stats(item, "a")).remaining == 2

    asyncio.run(run())
    assert calls(r, "rl.slidinglog") >= 3 and calls(r, "rl.slidingwindow") >= 3


def test_cluster_storage() -> None:
    with RedisServer(cluster=True) as node:
        uri = f"redis+rl+cluster://127.0.0.1:{node.port}"
        storage = storage_from_string(uri)
        assert type(storage) is RateLimitClusterStorage
        item = parse("2/minute")
        for strategy in (MovingWindowRateLimiter, SlidingWindowCounterRateLimiter,
                         FixedWindowRateLimiter):
            limiter = strategy(storage)
            assert [limiter.hit(item, "c") for _ in range(3)] == [True, True, False]
            assert limiter.get_window_stats(item, "c").remaining == 0

        async def run() -> None:
            aio = storage_from_string("async+" + uri)
            assert type(aio) is AsyncRateLimitClusterStorage
            limiter = AioMovingWindow(aio)
            assert [await limiter.hit(item, "d") for _ in range(3)] == [True, True, False]

        asyncio.run(run())
