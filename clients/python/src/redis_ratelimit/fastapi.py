"""A FastAPI (Starlette) dependency: ``Depends(RateLimit(limiter, GCRA(4, 10, 1)))``.

    limiter = AsyncRateLimiter.from_url("redis://localhost:6379")   # 0.25 s socket timeouts

    @app.get("/items", dependencies=[Depends(RateLimit(limiter, SlidingWindow(100, 60)))])
    async def items(): ...

Allowed: the rate-limit headers are added to the response. Limited: it raises
:class:`~redis_ratelimit.starlette.RateLimitExceeded` (an ``HTTPException``, 429, with the headers
and ``Retry-After``); Redis failing: the request passes (``fail_open=True``, the default), or the
fallback decides, or :class:`~redis_ratelimit.starlette.RateLimiterUnavailable` (503). The app's
exception handlers render both (FastAPI's default: ``{"detail": …}``). Refusals are cached in
memory until their retry time. The flow is the middleware's (:class:`RateLimitFlow`).

At most N at once, per route: ``Depends(ConcurrencyLimit(limiter, Concurrency(3, 60)))`` holds a
slot (a lease, renewed while the request runs) from the dependency until FastAPI runs the exit
code of dependencies with ``yield``: after the response is sent, streamed bodies included, in
FastAPI 0.118 and later (0.106 to 0.117 run it when the endpoint returns, before the body is
sent; the ASGI middleware's concurrency rules hold the slot until the last body message with any
version).
"""

# No `from __future__ import annotations` here: FastAPI reads __call__'s parameter types, and
# older versions cannot resolve string annotations on a callable instance.
from typing import AsyncIterator, Optional, Union

from fastapi import Request, Response

from ._core import Concurrency, Decision, Limit, parse_limit
from .concurrency import AsyncLeaseLimiter
from .middleware import (
    AsyncLimiter,
    Charge,
    Cost,
    KeyFunc,
    MemoryFallback,
    RateLimitFlow,
    RequestInfo,
    ResponseInfo,
    Rule,
    _warn_unbounded,
    check_lease_limiter,
    client_ip,
)
from .starlette import RateLimiterUnavailable, RateLimitExceeded, exception_for

__all__ = ["RateLimit", "ConcurrencyLimit", "RateLimitExceeded", "RateLimiterUnavailable"]


class RateLimit:
    """``key``: a key function of :class:`~redis_ratelimit.middleware.RequestInfo` (default: the
    client's address); ``name``: the header label and key part (default: the route's path);
    ``cost``: tokens per request, or a function of the request; ``prefix``, ``fail_open``,
    ``cache_size``, ``legacy_headers``, ``fallback``, ``recheck_after_s``, ``recheck_max_s`` as
    :class:`~redis_ratelimit.middleware.RateLimitFlow`'s. ``charge(request, response)``: the
    tokens a response cost, read from FastAPI's ``Response`` parameter (the endpoint sets it:
    ``response.headers["x-llm-tokens"] = str(n)``): checked before the endpoint, recorded with
    ``FORCE`` in the dependency's exit code (see the module's docstring for when FastAPI runs
    it), as :class:`~redis_ratelimit.middleware.Rule`'s ``charge``."""

    def __init__(
        self,
        limiter: AsyncLimiter,
        limit: Union[Limit, str],
        *,
        key: KeyFunc = client_ip,
        name: Optional[str] = None,
        cost: Cost = 1,
        prefix: str = "rl:",
        fail_open: bool = True,
        cache_size: int = 10_000,
        legacy_headers: bool = False,
        fallback: Optional[MemoryFallback] = None,
        recheck_after_s: float = 1.0,
        recheck_max_s: float = 30.0,
        charge: Optional[Charge] = None,
    ) -> None:
        if isinstance(limit, Concurrency):
            raise TypeError("a Concurrency limit is held for the whole request: use "
                            "Depends(ConcurrencyLimit(limiter, Concurrency(...)))")
        self.limiter = limiter
        self.limit: Limit = parse_limit(limit) if isinstance(limit, str) else limit
        self.key = key
        self.name = name
        self.cost = cost
        self.charge = charge
        self.flow = RateLimitFlow(
            prefix=prefix,
            fail_open=fail_open,
            cache_size=cache_size,
            legacy_headers=legacy_headers,
            fallback=fallback,
            recheck_after_s=recheck_after_s,
            recheck_max_s=recheck_max_s,
        )
        _warn_unbounded(limiter)

    @property
    def engine(self) -> Optional[str]:
        """The limiter's engine (``"module"``, ``"functions"``, ``"eval"``; ``None`` before the
        first call)."""
        return getattr(self.limiter, "engine", None)

    async def __call__(self, request: Request,
                       response: Response) -> AsyncIterator[Optional[Decision]]:
        info = RequestInfo(
            request.method,
            request.url.path,
            {k.lower(): v for k, v in request.headers.items()},
            request.client.host if request.client else None,
            request.url.query,
        )
        name = self.name or getattr(request.scope.get("route"), "path", None) or info.path
        rule = Rule(self.limit, key=self.key, cost=self.cost, name=name, charge=self.charge)
        outcome = await self.flow.decide_async(self.limiter, info, rule)
        if outcome is None:
            yield None
            return
        if outcome.refusal is not None:
            raise exception_for(outcome.refusal)
        response.headers.update(outcome.headers)
        yield outcome.decision
        if outcome.pending is not None:
            await self.flow.charge_async(self.limiter, outcome, ResponseInfo(
                response.status_code or 200,
                {k.lower(): v for k, v in response.headers.items()},
            ))


class ConcurrencyLimit:
    """``Depends(ConcurrencyLimit(limiter, Concurrency(3, 60)))``: at most 3 requests at once per
    key (default: the client's address) on the route, each holding ``cost`` slots under a fresh
    lease id from the dependency until its exit code (see the module's docstring for when FastAPI
    runs it), renewed every ``lease / 3`` seconds meanwhile. Refused: ``RateLimitExceeded`` (429,
    ``Retry-After: 1``: a slot frees whenever a request ends; refusals are not cached); Redis failing: the request passes
    (``fail_open=True``) or ``RateLimiterUnavailable`` (503). ``key``, ``name``, ``cost``,
    ``prefix``, ``fail_open``, ``legacy_headers``, ``recheck_after_s``, ``recheck_max_s`` as
    :class:`RateLimit`'s; ``limiter``: an :class:`~redis_ratelimit.AsyncRateLimiter`."""

    def __init__(
        self,
        limiter: AsyncLeaseLimiter,
        limit: Concurrency,
        *,
        key: KeyFunc = client_ip,
        name: Optional[str] = None,
        cost: Cost = 1,
        prefix: str = "rl:",
        fail_open: bool = True,
        legacy_headers: bool = False,
        recheck_after_s: float = 1.0,
        recheck_max_s: float = 30.0,
    ) -> None:
        if not isinstance(limit, Concurrency):
            raise TypeError("ConcurrencyLimit takes a Concurrency(limit, lease); rate limits: "
                            "RateLimit")
        check_lease_limiter(limiter, [Rule(limit)])
        self.limiter = limiter
        self.limit = limit
        self.key = key
        self.name = name
        self.cost = cost
        self.flow = RateLimitFlow(
            prefix=prefix,
            fail_open=fail_open,
            cache_size=0,
            legacy_headers=legacy_headers,
            recheck_after_s=recheck_after_s,
            recheck_max_s=recheck_max_s,
        )
        _warn_unbounded(limiter)

    @property
    def engine(self) -> Optional[str]:
        """The limiter's engine (``"module"``, ``"functions"``, ``"eval"``; ``None`` before the
        first call)."""
        return getattr(self.limiter, "engine", None)

    async def __call__(self, request: Request,
                       response: Response) -> AsyncIterator[Optional[Decision]]:
        info = RequestInfo(
            request.method,
            request.url.path,
            {k.lower(): v for k, v in request.headers.items()},
            request.client.host if request.client else None,
            request.url.query,
        )
        name = self.name or getattr(request.scope.get("route"), "path", None) or info.path
        rule = Rule(self.limit, key=self.key, cost=self.cost, name=name)
        outcome = await self.flow.decide_async(self.limiter, info, rule)  # type: ignore[arg-type]
        if outcome is None:
            yield None
            return
        if outcome.refusal is not None:
            raise exception_for(outcome.refusal)
        response.headers.update(outcome.headers)
        try:
            yield outcome.decision
        finally:
            await self.flow.release_async(outcome)
