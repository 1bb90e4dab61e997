"""redis-ratelimit for Python: a typed client for the redis-ratelimit Redis module (or, on a
server without it, its Functions library, loaded by the client), a storage for
the ``limits`` library (flask-limiter, slowapi: ``storage_uri="redis+rl://…"``), and ASGI/WSGI
middleware with a FastAPI dependency.

Importing the package registers the ``limits`` URI schemes when ``limits`` is installed
(``limits`` has no plugin entry point: an app must ``import redis_ratelimit`` before it creates
its limiter, or ``limits`` answers "unknown storage scheme"). Installed as
``pip install redis-ratelimit-client``.
"""

from ._core import (
    GCRA,
    Concurrency,
    Decision,
    FixedWindow,
    LeakyBucket,
    Limit,
    Policy,
    PolicyOptions,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    parse_limit,
)
from ._engine import ENGINES, LIBRARY_VERSION, ModuleRequiredError
from .concurrency import AsyncConcurrencyLease, ConcurrencyLease, ConcurrencyLimitExceeded
from .client import DEFAULT_TIMEOUT_S, AsyncRateLimiter, AsyncRedis, RateLimiter, SyncRedis

try:  # registers redis+rl:// and friends with `limits` (optional dependency)
    from . import limits_storage  # noqa: F401
except ImportError:  # pragma: no cover - limits not installed
    pass

__version__ = "0.1.0"

__all__ = [
    "AsyncConcurrencyLease",
    "AsyncRateLimiter",
    "Concurrency",
    "ConcurrencyLease",
    "ConcurrencyLimitExceeded",
    "AsyncRedis",
    "DEFAULT_TIMEOUT_S",
    "Decision",
    "ENGINES",
    "FixedWindow",
    "GCRA",
    "LIBRARY_VERSION",
    "LeakyBucket",
    "Limit",
    "ModuleRequiredError",
    "Policy",
    "PolicyOptions",
    "RateLimiter",
    "SlidingLog",
    "SlidingWindow",
    "SyncRedis",
    "TokenBucket",
    "parse_limit",
]
