"""A user's app, typed: `mypy --strict` must find nothing here (tests/test_typing.py)."""

from typing import Dict, Mapping, Optional, Tuple

import redis
from fastapi import Depends, FastAPI
from flask import Flask

from redis_ratelimit import (
    GCRA,
    AsyncConcurrencyLease,
    AsyncRateLimiter,
    Concurrency,
    ConcurrencyLease,
    ConcurrencyLimitExceeded,
    Decision,
    FixedWindow,
    Policy,
    PolicyOptions,
    RateLimiter,
)
from redis_ratelimit.fastapi import ConcurrencyLimit, RateLimit
from redis_ratelimit.middleware import (
    ASGIRateLimitMiddleware,
    MemoryFallback,
    Refusal,
    RequestInfo,
    Rule,
    WSGIRateLimitMiddleware,
    header_key,
)

sync_limiter = RateLimiter.from_url("redis://localhost:6379")
async_limiter = AsyncRateLimiter.from_url("redis://localhost:6379", timeout_s=0.1)
plain = RateLimiter(redis.Redis())


def cost(request: RequestInfo) -> int:
    return 2 if request.method == "POST" else 1


def tenant(request: RequestInfo) -> Optional[str]:
    return request.headers.get("x-tenant")


rules = [
    Rule(GCRA(4, 10, 1), path="/api/", key=header_key("x-api-key"), cost=cost),
    Rule(Policy("tiers"), path="/v2/", key=tenant, fail_open=False),
    Rule(Concurrency(3, 60), path="/reports", key=tenant, cost=cost),
]


def render(refusal: Refusal) -> Tuple[int, Mapping[str, str], bytes]:
    return refusal.status, {"Content-Type": "application/json"}, b"{}"


flask_app = Flask(__name__)
flask_app.wsgi_app = WSGIRateLimitMiddleware(  # type: ignore[method-assign]
    flask_app.wsgi_app, sync_limiter, rules, fallback=MemoryFallback(), render=render)

api = FastAPI()
asgi = ASGIRateLimitMiddleware(api, async_limiter, rules, legacy_headers=True)


@api.get("/items", dependencies=[Depends(RateLimit(async_limiter, GCRA(1, 1, 1), cost=cost))])
async def items() -> Dict[str, bool]:
    return {"ok": True}


@api.get("/report", dependencies=[Depends(ConcurrencyLimit(async_limiter, Concurrency(2, 30)))])
async def report() -> Dict[str, bool]:
    return {"ok": True}


def build_report(tenant_id: str) -> Optional[int]:
    try:
        with sync_limiter.concurrency(f"reports:{tenant_id}", limit=3, lease=30,
                                      also=[(f"hour:{tenant_id}", FixedWindow(100, 3600))]) as held:
            lease: ConcurrencyLease = held
            print(lease.id, lease.lost, lease.renewals)
            return None
    except ConcurrencyLimitExceeded as refused:
        retry_ms: int = refused.retry_after_ms
        decision: Decision = refused.decision
        return retry_ms if decision.limited else None


async def build_report_async(tenant_id: str) -> bool:
    async with async_limiter.concurrency(f"reports:{tenant_id}", 3, 30.5, tokens=2) as held:
        lease: AsyncConcurrencyLease = held
        renewed: Decision = await lease.renew()
        return renewed.allowed


free: int = sync_limiter.release("reports:7", 3, 30, "job-1").remaining


def use(d: Decision) -> int:
    headers: Dict[str, str] = d.headers("api", legacy=True)
    return d.remaining + len(headers)


decision = sync_limiter.gcra("user:1", 4, 10, 1, tokens=2, name="api")
print(use(decision))
got = plain.policy_get("tiers")
if got is not None:
    limit, options = got
    opts: PolicyOptions = options
    soft: Optional[int] = opts["soft"]
    print(limit, soft, opts["shadow"])
