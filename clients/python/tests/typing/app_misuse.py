"""Misuse `mypy --strict` must catch: each line marked `# error` must get an error
(tests/test_typing.py); the other lines none."""

from typing import Optional

from fastapi import FastAPI

from redis_ratelimit import GCRA, AsyncRateLimiter, Concurrency, RateLimiter
from redis_ratelimit.fastapi import ConcurrencyLimit, RateLimit
from redis_ratelimit.middleware import (
    ASGIRateLimitMiddleware,
    RequestInfo,
    Rule,
    WSGIRateLimitMiddleware,
)

sync_limiter = RateLimiter.from_url("redis://localhost:6379")
async_limiter = AsyncRateLimiter.from_url("redis://localhost:6379")


def hello(environ: dict[str, object], start_response: object) -> list[bytes]:
    return [b"hello"]


def user_id(request: RequestInfo) -> int:
    return 42


rules = [Rule(GCRA(1, 1, 1))]
WSGIRateLimitMiddleware(hello, async_limiter, rules)  # error: an asyncio limiter under WSGI
ASGIRateLimitMiddleware(FastAPI(), sync_limiter, rules)  # error: a sync limiter under ASGI
ASGIRateLimitMiddleware(FastAPI(), async_limiter, rules, fail_opn=True)  # error: a typo
RateLimit(async_limiter, GCRA(1, 1, 1), cost="3")  # error: a cost is an int or a function
Rule(GCRA(1, 1, 1), key=user_id)  # error: a key is a str (or None)
sync_limiter.gcra("k", 4, 10, 1, tokens="2")  # error: tokens is an int
sync_limiter.sliding_log("k", 10, 60, bloc=5)  # error: a typo
got = sync_limiter.policy_get("p")
if got is not None:
    soft: Optional[str] = got[1]["soft"]  # error: soft is an int
RateLimiter("redis://localhost:6379")  # error: a URL is not a client (use from_url)
sync_limiter.concurrency("k", limit="3", lease=30)  # error: limit is an int
sync_limiter.concurrency("k", 3, 30, lease_id=7)  # error: a lease id is a str
ConcurrencyLimit(sync_limiter, Concurrency(2, 30))  # error: a sync limiter under FastAPI


async def misuse() -> None:
    async with sync_limiter.concurrency("k", 3, 30):  # error: the sync lease has no async with
        pass
    with async_limiter.concurrency("k", 3, 30):  # error: the asyncio lease needs async with
        pass
