"""The typed client against the real module: one method per command, Decision, headers."""

from __future__ import annotations

import asyncio

import pytest
import redis
import redis.asyncio

from redis_ratelimit import (
    GCRA,
    AsyncRateLimiter,
    Decision,
    FixedWindow,
    LeakyBucket,
    Policy,
    RateLimiter,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
)


def test_every_command_returns_a_decision(r: redis.Redis) -> None:
    rl = RateLimiter(r)
    assert rl.gcra("g", 4, 10, 1) == Decision(False, 5, 4, -1, 100, name="gcra")
    assert rl.token_bucket("t", 10, 1, 1, tokens=3).remaining == 7
    assert rl.fixed_window("f", 3, 60).limit == 3
    assert rl.sliding_window("s", 3, 60).remaining == 2
    assert rl.sliding_log("l", 2, 60).reset_after_ms == 60000
    # A leaky bucket's element 4 is the delay before the work when allowed.
    assert rl.leaky_bucket("q", 5, 1, 1).retry_after_ms == 0
    assert 990 <= rl.leaky_bucket("q", 5, 1, 1).retry_after_ms <= 1000
    assert r.type("l") == b"zset" and r.type("g") == b"string"


def test_options_peek_refund_block(r: redis.Redis) -> None:
    rl = RateLimiter(r)
    assert rl.gcra("k", 4, 10, 1, tokens=3).remaining == 2
    assert rl.gcra("k", 4, 10, 1, peek=True).remaining == 1
    assert rl.gcra("k", 4, 10, 1, refund=2).remaining == 4
    assert rl.fixed_window("b", 1, 60).allowed
    assert rl.fixed_window("b", 1, 60, block=30).limited
    # The refusal locked the limiter out for 30 s.
    d = rl.fixed_window("b", 1, 60)
    assert d.limited and d.retry_after_ms > 29_000


def test_headers_of_an_allowed_and_a_refused_decision(r: redis.Redis) -> None:
    rl = RateLimiter(r)
    for i in range(5):
        h = rl.gcra("u", 4, 1, 1).headers("api")
        assert h["RateLimit-Policy"] == '"api";q=5;w=5'
        assert h["RateLimit"] == f'"api";r={4 - i};t={i + 1}'
        assert h["X-RateLimit-Remaining"] == str(4 - i)
        assert "Retry-After" not in h
    d = rl.gcra("u", 4, 1, 1)
    assert d.limited
    h = d.headers("api")
    assert h["Retry-After"] == "1" and h["RateLimit"] == '"api";r=0;t=1'
    # A cost above the limit can never pass: no Retry-After.
    never = rl.gcra("v", 4, 1, 1, tokens=6)
    assert never.limited and never.retry_after_ms == -1
    assert "Retry-After" not in never.headers()
    assert "X-RateLimit-Limit" not in never.headers(legacy=False)


def test_all_names_the_binding_limit(r: redis.Redis) -> None:
    rl = RateLimiter(r)
    pairs = [("{u}:sec", GCRA(1, 1, 1)), ("{u}:day", FixedWindow(2, 86400))]
    first = rl.all(pairs)
    assert first.allowed and first.binding == 0 and first.name == "gcra"
    rl.all(pairs)
    third = rl.all(pairs)
    assert third.limited and third.binding == 1 and third.limit == 2
    assert third.headers()["RateLimit-Policy"] == '"fixedwindow";q=2;w=86400'
    with pytest.raises(ValueError):
        rl.all([("x", LeakyBucket(1, 1, 1))])


def test_policies(r: redis.Redis) -> None:
    rl = RateLimiter(r)
    rl.policy_set("api", SlidingWindow(2, 60), shadow=True, soft=50, block=5)
    assert rl.policy_get("api") == (SlidingWindow(2, 60), {"shadow": True, "soft": 50, "block": 5})
    assert rl.policy_get("none") is None
    rl.policy_set("login", SlidingLog(1, 60))
    assert rl.policy_list() == ["api", "login"]
    assert "login SLIDINGLOG 1 60" in rl.policy_dump()
    assert rl.limit("login", "alice").allowed
    refused = rl.limit("login", "alice")
    assert refused.limited and refused.name == "login"
    assert refused.headers()["RateLimit-Policy"] == '"login";q=1'
    assert rl.all([("{a}x", Policy("login")), ("{a}y", TokenBucket(5, 1, 1))]).binding == 0
    rl.policy_resetstats()
    assert rl.policy_del("api") and not rl.policy_del("api")
    assert rl.policy_load("p GCRA 1 1 1\n", replace=True) == 1
    assert rl.policy_list() == ["p"]


def test_errors_are_redis_py_errors(r: redis.Redis) -> None:
    rl = RateLimiter(r)
    r.set("text", "hello")
    with pytest.raises(redis.exceptions.ResponseError, match="not RL.GCRA state"):
        rl.gcra("text", 1, 1, 1)
    with pytest.raises(redis.exceptions.ResponseError, match="period"):
        rl.gcra("k", 1, 1, 0)


def test_async_client(server) -> None:
    async def run() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        rl = AsyncRateLimiter(client)
        await client.flushall()
        assert (await rl.gcra("a", 0, 1, 60)).allowed
        assert (await rl.gcra("a", 0, 1, 60)).limited
        assert (await rl.sliding_log("b", 1, 60)).allowed
        assert (await rl.all([("{c}1", SlidingWindow(1, 60)), ("{c}2", GCRA(0, 1, 60))])).binding == 0
        await rl.policy_set("p", FixedWindow(1, 60))
        assert await rl.policy_list() == ["p"]
        assert (await rl.limit("p", "k")).allowed
        assert (await rl.limit("p", "k")).limited
        await rl.policy_del("p")
        await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(run())
