"""The typed client against the real module: one method per command, Decision, headers."""

from __future__ import annotations

import asyncio

from typing import Any, Dict, List, Tuple, TypeVar

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
from redis_ratelimit._commands import Call
from redis_ratelimit._core import policy_from_words

T = TypeVar("T")


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
        assert "X-RateLimit-Remaining" not in h  # the legacy trio is off by default
        assert rl.gcra("w", 4, 1, 1, peek=True).headers(legacy=True)["X-RateLimit-Limit"] == "5"
        assert "Retry-After" not in h
    d = rl.gcra("u", 4, 1, 1)
    assert d.limited
    h = d.headers("api")
    assert h["Retry-After"] == "1" and h["RateLimit"] == '"api";r=0;t=1'
    # A cost above the limit can never pass: no Retry-After.
    never = rl.gcra("v", 4, 1, 1, tokens=6)
    assert never.limited and never.retry_after_ms == -1
    assert "Retry-After" not in never.headers()
    assert "X-RateLimit-Limit" not in never.headers()
    legacy = never.headers(legacy=True)
    assert (legacy["X-RateLimit-Limit"], legacy["X-RateLimit-Remaining"]) == ("5", "5")


def test_legacy_headers_are_off_by_default() -> None:
    d = Decision(True, 5, 0, 1500, 3000, name="api", window_s=5)
    assert d.headers() == {"RateLimit-Policy": '"api";q=5;w=5', "RateLimit": '"api";r=0;t=2',
                           "Retry-After": "2"}
    assert d.headers(legacy=True)["X-RateLimit-Reset"] == "3"


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


@pytest.mark.module_only
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
        if rl.engine == "module":
            await rl.policy_set("p", FixedWindow(1, 60))
            assert await rl.policy_list() == ["p"]
            assert (await rl.limit("p", "k")).allowed
            assert (await rl.limit("p", "k")).limited
            await rl.policy_del("p")
        await client.aclose() if hasattr(client, "aclose") else await client.close()

    asyncio.run(run())


def test_an_unknown_policy_algorithm_is_an_error(r: redis.Redis) -> None:
    """A newer module's algorithm must not come back as a SlidingLog."""
    rl = RateLimiter(FakeRedis({("RL.POLICY", "GET", "p"): [b"NEWALGO", b"1", b"2"]}),
                     engine="module")
    with pytest.raises(ValueError, match="NEWALGO"):
        rl.policy_get("p")
    with pytest.raises(ValueError, match="does not know"):
        policy_from_words([b"GCRA", b"1"])  # too few parameters
    assert policy_from_words([b"slidinglog", b"5", b"60", b"BLOCK", b"2.5"]) == (
        SlidingLog(5, 60), {"shadow": False, "soft": None, "block": 2.5})


class FakeRedis:
    """Answers from a table and records what it was sent."""

    def __init__(self, replies: Dict[Tuple[str, ...], Any]) -> None:
        self.replies = replies
        self.sent: List[Tuple[str, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(tuple(str(a) for a in args))
        return self.replies.get(self.sent[-1], [0, 1, 0, -1, 1000])


def test_every_method_sends_through_run() -> None:
    """Every command goes through one method, the one place a second engine would hook in."""
    sent: List[List[str]] = []

    class Recording(RateLimiter):
        def run(self, call: Call[T]) -> T:
            sent.append(call.args)
            return super().run(call)

    fake = FakeRedis({("RL.POLICY", "LIST"): [b"p"], ("RL.POLICY", "DUMP"): b"",
                      ("RL.POLICY", "GET", "missing"): None,
                      ("RL.POLICY", "LOAD", "x"): 1})
    rl = Recording(fake, engine="module")
    rl.gcra("k", 1, 1, 1)
    rl.token_bucket("k", 1, 1, 1)
    rl.leaky_bucket("k", 1, 1, 1)
    rl.fixed_window("k", 1, 1)
    rl.sliding_window("k", 1, 1)
    rl.sliding_log("k", 1, 1)
    rl.limit("p", "k")
    rl.all([("k", GCRA(1, 1, 1))])
    rl.policy_set("p", GCRA(1, 1, 1))
    rl.policy_get("missing")
    rl.policy_del("p")
    rl.policy_list()
    rl.policy_dump()
    rl.policy_load("x")
    rl.policy_resetstats()
    assert [args for args in sent] == [list(args) for args in fake.sent]
    assert len(sent) == 15


def test_from_url_fails_fast_by_default(refused_port: int) -> None:
    """0.25 s socket timeouts and no retries, unless told otherwise."""
    rl = RateLimiter.from_url(f"redis://127.0.0.1:{refused_port}")
    kwargs = rl.redis.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 0.25 == rl.timeout_s
    assert kwargs["socket_connect_timeout"] == 0.25
    assert AsyncRateLimiter.from_url("redis://x").timeout_s == 0.25
    assert RateLimiter.from_url("redis://x", timeout_s=0.1).timeout_s == 0.1
    assert RateLimiter(redis.Redis(socket_timeout=1.5)).timeout_s == 1.5
