"""redis-ratelimit for Python: a typed client for the redis-ratelimit Redis module, a storage for
the ``limits`` library (flask-limiter, slowapi: ``storage_uri="redis+rl://…"``), and ASGI/WSGI
middleware with a FastAPI dependency.

Importing the package registers the ``limits`` URI schemes when ``limits`` is installed.
"""

from ._core import (
    GCRA,
    Decision,
    FixedWindow,
    LeakyBucket,
    Limit,
    Policy,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
)
from .client import AsyncRateLimiter, RateLimiter

try:  # registers redis+rl:// and friends with `limits` (optional dependency)
    from . import limits_storage  # noqa: F401
except ImportError:  # pragma: no cover - limits not installed
    pass

__version__ = "0.1.0"

__all__ = [
    "AsyncRateLimiter",
    "Decision",
    "FixedWindow",
    "GCRA",
    "LeakyBucket",
    "Limit",
    "Policy",
    "RateLimiter",
    "SlidingLog",
    "SlidingWindow",
    "TokenBucket",
]
