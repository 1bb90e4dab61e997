"""Refusals as Starlette ``HTTPException``\\ s, so that the app's exception handlers render them.

The FastAPI dependency raises them, and the ASGI middleware hands them to the handlers of a
Starlette or FastAPI app (``app.exception_handlers``) when it wraps one, as slowapi does::

    from redis_ratelimit.starlette import RateLimitExceeded

    @app.exception_handler(RateLimitExceeded)
    async def too_many(request: Request, exc: RateLimitExceeded) -> Response:
        return JSONResponse({"error": "slow down"}, status_code=429, headers=exc.headers)

Without a handler of your own, FastAPI's for ``HTTPException`` answers ``{"detail": …}`` with
the status and the rate-limit headers. ``exc.refusal`` is the
:class:`~redis_ratelimit.middleware.Refusal` (its ``decision``, ``rule``, ``headers``).
"""

from __future__ import annotations

from starlette.exceptions import HTTPException

from ._refusal import Refusal

__all__ = ["RateLimitRefused", "RateLimitExceeded", "RateLimiterUnavailable", "exception_for"]


class RateLimitRefused(HTTPException):
    """A request the rate limiter refused: ``status_code`` 429 or 503, ``headers`` the rate-limit
    fields (and ``Retry-After``), ``refusal`` the details."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.status, detail=refusal.reason, headers=dict(refusal.headers))
        self.refusal = refusal


class RateLimitExceeded(RateLimitRefused):
    """429: the limit refused the request (``refusal.decision`` says until when)."""


class RateLimiterUnavailable(RateLimitRefused):
    """503: Redis failed and the rule fails closed."""


def exception_for(refusal: Refusal) -> RateLimitRefused:
    """The exception that stands for ``refusal``."""
    if refusal.status == 429:
        return RateLimitExceeded(refusal)
    return RateLimiterUnavailable(refusal)
