"""Rate limiting an HTTP endpoint with the redis-ratelimit module (redis-py).

`RateLimiter.check(key, cost)` calls `RL.GCRA` and turns its reply into an
HTTP decision: the status (200 or 429) and the headers to send, in two
styles since the IETF draft still moves:

* IETF (draft-ietf-httpapi-ratelimit-headers-10):
  ``RateLimit-Policy: "<name>";q=<limit>;w=<window s>`` and
  ``RateLimit: "<name>";r=<remaining>;t=<seconds>``, where ``t`` is when more
  quota comes: ``retry_after`` on a refusal that can pass later (so that
  ``Retry-After`` is never earlier than ``t``), else the time until full;
* legacy: ``X-RateLimit-Limit``, ``X-RateLimit-Remaining``,
  ``X-RateLimit-Reset`` (seconds until full).

A refused request also gets ``Retry-After`` (seconds, rounded up: never
earlier than the limiter allows). A request that can never pass (its cost
is above the limit; the module answers ``retry_after`` -1) gets 429 without
``Retry-After``: retrying cannot help.

When Redis cannot be reached the limiter fails open (lets the request
through, without rate-limit headers) or closed (503), as configured.

Keys known to be limited are kept in a small local cache until their
``retry_after`` has passed, so that a flood of refused requests is answered
without reaching Redis.
"""

import math
import threading
import time
from dataclasses import dataclass, field

import redis


@dataclass
class Result:
    allowed: bool
    status: int
    headers: dict = field(default_factory=dict)
    # True when the answer came from the local cache (Redis was not asked).
    cached: bool = False


class RateLimiter:
    """GCRA limiter: bursts of ``max_burst + 1``, then ``per_period`` per ``period`` seconds."""

    def __init__(self, client, name, max_burst, per_period, period,
                 fail_open=True, cache_size=10_000):
        self.client = client
        self.name = name
        self.max_burst = max_burst
        self.per_period = per_period
        self.period = period
        self.fail_open = fail_open
        self.cache_size = cache_size
        # key -> monotonic instant until which the key is known to be limited
        self._limited_until = {}
        self._lock = threading.Lock()

    def _policy(self, limit):
        # The window over which `limit` tokens refill completely.
        window = math.ceil(limit * self.period / self.per_period)
        return f'"{self.name}";q={limit};w={window}'

    def _cached(self, key):
        now = time.monotonic()
        with self._lock:
            until = self._limited_until.get(key)
            if until is None:
                return None
            if until <= now:
                del self._limited_until[key]
                return None
        retry = max(1, math.ceil(until - now))
        return Result(False, 429, {"Retry-After": str(retry)}, cached=True)

    def _remember(self, key, retry_after_ms):
        with self._lock:
            if len(self._limited_until) >= self.cache_size:
                now = time.monotonic()
                for k in [k for k, t in self._limited_until.items() if t <= now]:
                    del self._limited_until[k]
                while len(self._limited_until) >= self.cache_size:
                    # Evict the entry that ends soonest.
                    del self._limited_until[min(self._limited_until, key=self._limited_until.get)]
            self._limited_until[key] = time.monotonic() + retry_after_ms / 1000

    def check(self, key, cost=1):
        cached = self._cached(key)
        if cached is not None:
            return cached
        try:
            limited, limit, remaining, retry_after_ms, reset_after_ms = self.client.execute_command(
                "RL.GCRA", key, self.max_burst, self.per_period, self.period, "TOKENS", cost)
        except redis.exceptions.ConnectionError:
            if self.fail_open:
                return Result(True, 200)
            return Result(False, 503, {"Retry-After": "1"})
        reset_s = math.ceil(reset_after_ms / 1000)
        retry_s = max(1, math.ceil(retry_after_ms / 1000)) if limited and retry_after_ms >= 0 else None
        t = retry_s if retry_s is not None else reset_s
        headers = {
            "RateLimit-Policy": self._policy(limit),
            "RateLimit": f'"{self.name}";r={remaining};t={t}',
            "X-RateLimit-Limit": str(limit),
            "X-RateLimit-Remaining": str(remaining),
            "X-RateLimit-Reset": str(reset_s),
        }
        if not limited:
            return Result(True, 200, headers)
        if retry_s is not None:
            headers["Retry-After"] = str(retry_s)
            self._remember(key, retry_after_ms)
        # retry_after -1: the cost is above the limit, no retry can pass.
        return Result(False, 429, headers)
