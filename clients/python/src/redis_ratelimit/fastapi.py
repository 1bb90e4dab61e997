"""A FastAPI (Starlette) dependency: ``Depends(RateLimit(limiter, GCRA(4, 10, 1)))``.

    limiter = AsyncRateLimiter(redis.asyncio.Redis(socket_timeout=0.5))

    @app.get("/items", dependencies=[Depends(RateLimit(limiter, SlidingWindow(100, 60)))])
    async def items(): ...

Allowed: the rate-limit headers are added to the response. Limited: ``HTTPException(429)``
with them (and ``Retry-After``). Redis failing: the request passes (``fail_open=True``, the
default) or ``HTTPException(503)``. Refusals are cached in memory until their retry time.
"""

# No `from __future__ import annotations` here: FastAPI reads __call__'s parameter types, and
# older versions cannot resolve string annotations on a callable instance.
import asyncio
from typing import Any, Optional, Union

from fastapi import HTTPException, Request, Response

from ._core import Decision, Limit
from .middleware import FAILURES, KeyFunc, RequestInfo, Rule, _Engine, client_ip

__all__ = ["RateLimit"]


class RateLimit:
    """``key``: a key function of :class:`~redis_ratelimit.middleware.RequestInfo` (default: the
    client's address); ``name``: the header label and key part (default: the route's path);
    ``cost``: tokens per request; ``timeout_s``: bound on each decision; ``prefix``,
    ``fail_open``, ``cache_size``, ``legacy_headers`` as the middleware's."""

    def __init__(self, limiter: Any, limit: Limit, *, key: KeyFunc = client_ip,
                 name: Optional[str] = None, cost: Union[int, Any] = 1, **options: Any) -> None:
        self.limiter = limiter
        self.limit = limit
        self.key = key
        self.name = name
        self.cost = cost
        self.engine = _Engine([], **options)

    async def __call__(self, request: Request, response: Response) -> Optional[Decision]:
        info = RequestInfo(request.method, request.url.path,
                           {k.lower(): v for k, v in request.headers.items()},
                           request.client.host if request.client else None,
                           request.url.query)
        name = self.name or getattr(request.scope.get("route"), "path", None) or info.path
        rule = Rule(self.limit, path="/", key=self.key, cost=self.cost, name=name)
        plan = self.engine.plan_for(rule, info)
        if plan is None:
            return None
        key, cost = plan
        outcome = self.engine.cached(key)
        if outcome is None:
            try:
                decision = await asyncio.wait_for(
                    self.limiter.check(key, self.limit, tokens=cost, name=name),
                    self.engine.timeout_s)
            except FAILURES as exc:
                outcome = self.engine.failed(rule, exc)
            else:
                outcome = self.engine.decided(rule, key, decision)
        if outcome.status is not None:
            detail = "Too Many Requests" if outcome.status == 429 else "Service Unavailable"
            raise HTTPException(outcome.status, detail=detail, headers=outcome.headers)
        response.headers.update(outcome.headers)
        return outcome.decision
