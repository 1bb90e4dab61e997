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
"""

# No `from __future__ import annotations` here: FastAPI reads __call__'s parameter types, and
# older versions cannot resolve string annotations on a callable instance.
from typing import Optional

from fastapi import Request, Response

from ._core import Decision, Limit
from .middleware import (
    AsyncLimiter,
    Cost,
    KeyFunc,
    MemoryFallback,
    RateLimitFlow,
    RequestInfo,
    Rule,
    _warn_unbounded,
    client_ip,
)
from .starlette import RateLimiterUnavailable, RateLimitExceeded, exception_for

__all__ = ["RateLimit", "RateLimitExceeded", "RateLimiterUnavailable"]


class RateLimit:
    """``key``: a key function of :class:`~redis_ratelimit.middleware.RequestInfo` (default: the
    client's address); ``name``: the header label and key part (default: the route's path);
    ``cost``: tokens per request, or a function of the request; ``prefix``, ``fail_open``,
    ``cache_size``, ``legacy_headers``, ``fallback``, ``recheck_after_s``, ``recheck_max_s`` as
    :class:`~redis_ratelimit.middleware.RateLimitFlow`'s."""

    def __init__(
        self,
        limiter: AsyncLimiter,
        limit: Limit,
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
    ) -> None:
        self.limiter = limiter
        self.limit = limit
        self.key = key
        self.name = name
        self.cost = cost
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

    async def __call__(self, request: Request, response: Response) -> Optional[Decision]:
        info = RequestInfo(
            request.method,
            request.url.path,
            {k.lower(): v for k, v in request.headers.items()},
            request.client.host if request.client else None,
            request.url.query,
        )
        name = self.name or getattr(request.scope.get("route"), "path", None) or info.path
        rule = Rule(self.limit, key=self.key, cost=self.cost, name=name)
        outcome = await self.flow.decide_async(self.limiter, info, rule)
        if outcome is None:
            return None
        if outcome.refusal is not None:
            raise exception_for(outcome.refusal)
        response.headers.update(outcome.headers)
        return outcome.decision
