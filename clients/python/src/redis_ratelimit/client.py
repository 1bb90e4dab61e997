"""Typed clients over redis-py: :class:`RateLimiter` (sync) and :class:`AsyncRateLimiter` (asyncio).

Each method sends one command and returns a :class:`Decision` (or the admin reply). Errors are
redis-py's: ``redis.exceptions.ResponseError`` for ``ERR …``/``WRONGTYPE`` (and ``unknown
command`` when the server has no module), ``ConnectionError``, ``TimeoutError``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._core import (
    GCRA,
    Decision,
    FixedWindow,
    LeakyBucket,
    Limit,
    Number,
    Policy,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
    all_args,
    options,
    parse,
    policy_from_words,
    policy_set_args,
    single_args,
)

__all__ = ["RateLimiter", "AsyncRateLimiter"]


def _name(limit: Limit, key: str, name: Optional[str]) -> str:
    if name:
        return name
    return limit.name if isinstance(limit, Policy) else limit.keyword.lower()


def _str(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _fail_fast(timeout_s: float, options: Dict[str, Any]) -> Dict[str, Any]:
    """Client options for a limiter: socket timeouts of ``timeout_s`` and no retries (redis-py
    7 retries 3 times with backoff by default: seconds before a dead server is reported)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    out: Dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                           "retry": Retry(NoBackoff(), 0), "retry_on_timeout": False}
    out.update(options)
    return out


class _Base:
    def __init__(self, client: Any) -> None:
        self._redis = client
        self._factory: Optional[Callable[[], Any]] = None

    @property
    def redis(self) -> Any:
        """The redis-py client (created on first use when built by ``from_url``)."""
        if self._redis is None and self._factory is not None:
            self._redis = self._factory()
        return self._redis


class RateLimiter(_Base):
    """Sync client. ``RateLimiter(redis.Redis(...))`` (or a ``redis.RedisCluster``).

    ``RateLimiter.from_url("redis://host:6379/0", timeout_s=0.5)`` builds a client that fails
    fast (socket timeouts, no retries), which is what fail-open middleware wants.

    Common keyword options of every decision: ``tokens`` (cost, default 1) or ``refund`` (give
    tokens back), ``peek`` (decide without writing), ``block`` (seconds to lock a refusing limiter
    out; not for policies, whose block is their own), ``name`` (the label in ``headers()``).
    """

    @classmethod
    def from_url(cls, url: str, timeout_s: float = 0.5, **options: Any) -> "RateLimiter":
        """A limiter on ``redis.Redis.from_url(url)`` with ``timeout_s`` socket timeouts and no
        retries; ``options`` go to redis-py (and override those)."""
        import redis

        return cls(redis.Redis.from_url(url, **_fail_fast(timeout_s, options)))

    def check(self, key: str, limit: Limit, *, tokens: int = 1, refund: Optional[int] = None,
              peek: bool = False, block: Optional[Number] = None,
              name: Optional[str] = None) -> Decision:
        """One limit on one key: the command of ``limit``'s algorithm, or ``RL.LIMIT`` for a
        :class:`Policy`."""
        args = single_args(key, limit, options(tokens, refund, peek, block))
        return parse(self.redis.execute_command(*args), _name(limit, key, name), limit.window_s)

    def gcra(self, key: str, max_burst: int, tokens_per_period: int, period: Number,
             **kw: Any) -> Decision:
        """``RL.GCRA key max_burst tokens_per_period period`` (period in seconds)."""
        return self.check(key, GCRA(max_burst, tokens_per_period, period), **kw)

    def token_bucket(self, key: str, capacity: int, refill_tokens: int, refill_period: Number,
                     **kw: Any) -> Decision:
        """``RL.TOKENBUCKET key capacity refill_tokens refill_period`` (seconds)."""
        return self.check(key, TokenBucket(capacity, refill_tokens, refill_period), **kw)

    def leaky_bucket(self, key: str, capacity: int, leak_tokens: int, leak_period: Number,
                     **kw: Any) -> Decision:
        """``RL.LEAKYBUCKET``: when allowed, ``retry_after_ms`` is the delay before the work."""
        return self.check(key, LeakyBucket(capacity, leak_tokens, leak_period), **kw)

    def fixed_window(self, key: str, limit: int, window: Number, **kw: Any) -> Decision:
        """``RL.FIXEDWINDOW key limit window`` (seconds, epoch-aligned)."""
        return self.check(key, FixedWindow(limit, window), **kw)

    def sliding_window(self, key: str, limit: int, window: Number, **kw: Any) -> Decision:
        """``RL.SLIDINGWINDOW key limit window`` (seconds)."""
        return self.check(key, SlidingWindow(limit, window), **kw)

    def sliding_log(self, key: str, limit: int, window: Number, **kw: Any) -> Decision:
        """``RL.SLIDINGLOG key limit window`` (seconds; ``limit`` ≤ sliding-log-max-limit)."""
        return self.check(key, SlidingLog(limit, window), **kw)

    def limit(self, policy: str, key: str, *, tokens: int = 1, refund: Optional[int] = None,
              peek: bool = False, name: Optional[str] = None) -> Decision:
        """``RL.LIMIT key policy``: the server-side policy decides (``headers()`` has no ``w``)."""
        return self.check(key, Policy(policy), tokens=tokens, refund=refund, peek=peek, name=name)

    def all(self, pairs: Sequence[Tuple[str, Limit]], *, tokens: int = 1,
            refund: Optional[int] = None, peek: bool = False, block: Optional[Number] = None,
            name: Optional[str] = None) -> Decision:
        """``RL.ALL``: every ``(key, limit)`` allows ``tokens`` now, or nothing is taken.
        ``Decision.binding`` is the 0-based index of the limit that decided."""
        reply = self.redis.execute_command(*all_args(pairs, options(tokens, refund, peek, block)))
        d = parse(reply, "", None)
        bound = pairs[d.binding or 0][1]
        return parse(reply, _name(bound, "", name), bound.window_s)

    # -- RL.POLICY
    def policy_set(self, name: str, limit: Limit, *, shadow: bool = False,
                   soft: Optional[int] = None, block: Optional[Number] = None) -> None:
        """``RL.POLICY SET name limit [SHADOW] [SOFT percent] [BLOCK s]``."""
        self.redis.execute_command(*policy_set_args(name, limit, shadow, soft, block))

    def policy_get(self, name: str) -> Optional[Tuple[Limit, Dict[str, object]]]:
        """The policy as ``(limit, {"shadow", "soft", "block"})``, or ``None``."""
        words = self.redis.execute_command("RL.POLICY", "GET", name)
        return policy_from_words(words) if words else None

    def policy_del(self, name: str) -> bool:
        return bool(self.redis.execute_command("RL.POLICY", "DEL", name))

    def policy_list(self) -> List[str]:
        return [_str(x) for x in self.redis.execute_command("RL.POLICY", "LIST")]

    def policy_dump(self) -> str:
        return _str(self.redis.execute_command("RL.POLICY", "DUMP"))

    def policy_load(self, text: str, *, replace: bool = False) -> int:
        args = ["RL.POLICY", "LOAD"] + (["REPLACE"] if replace else []) + [text]
        return int(self.redis.execute_command(*args))

    def policy_resetstats(self) -> None:
        self.redis.execute_command("RL.POLICY", "RESETSTATS")


class AsyncRateLimiter(_Base):
    """The asyncio twin of :class:`RateLimiter`, over ``redis.asyncio.Redis`` (or its cluster)."""

    @classmethod
    def from_url(cls, url: str, timeout_s: float = 0.5, **options: Any) -> "AsyncRateLimiter":
        """A limiter on ``redis.asyncio.Redis.from_url(url)``, failing fast as
        :meth:`RateLimiter.from_url`'s; the client is created on first use, so this may be
        called outside the event loop (at import time)."""
        import redis.asyncio

        limiter = cls(None)
        # Created on first use, inside the running event loop (on Python 3.9 redis-py's asyncio
        # pool binds to the loop current when it is built).
        limiter._factory = lambda: redis.asyncio.Redis.from_url(url, **_fail_fast(timeout_s, options))
        return limiter

    async def check(self, key: str, limit: Limit, *, tokens: int = 1,
                    refund: Optional[int] = None, peek: bool = False,
                    block: Optional[Number] = None, name: Optional[str] = None) -> Decision:
        args = single_args(key, limit, options(tokens, refund, peek, block))
        reply = await self.redis.execute_command(*args)
        return parse(reply, _name(limit, key, name), limit.window_s)

    async def gcra(self, key: str, max_burst: int, tokens_per_period: int, period: Number,
                   **kw: Any) -> Decision:
        return await self.check(key, GCRA(max_burst, tokens_per_period, period), **kw)

    async def token_bucket(self, key: str, capacity: int, refill_tokens: int,
                           refill_period: Number, **kw: Any) -> Decision:
        return await self.check(key, TokenBucket(capacity, refill_tokens, refill_period), **kw)

    async def leaky_bucket(self, key: str, capacity: int, leak_tokens: int,
                           leak_period: Number, **kw: Any) -> Decision:
        return await self.check(key, LeakyBucket(capacity, leak_tokens, leak_period), **kw)

    async def fixed_window(self, key: str, limit: int, window: Number, **kw: Any) -> Decision:
        return await self.check(key, FixedWindow(limit, window), **kw)

    async def sliding_window(self, key: str, limit: int, window: Number, **kw: Any) -> Decision:
        return await self.check(key, SlidingWindow(limit, window), **kw)

    async def sliding_log(self, key: str, limit: int, window: Number, **kw: Any) -> Decision:
        return await self.check(key, SlidingLog(limit, window), **kw)

    async def limit(self, policy: str, key: str, *, tokens: int = 1,
                    refund: Optional[int] = None, peek: bool = False,
                    name: Optional[str] = None) -> Decision:
        return await self.check(key, Policy(policy), tokens=tokens, refund=refund, peek=peek,
                                name=name)

    async def all(self, pairs: Sequence[Tuple[str, Limit]], *, tokens: int = 1,
                  refund: Optional[int] = None, peek: bool = False,
                  block: Optional[Number] = None, name: Optional[str] = None) -> Decision:
        reply = await self.redis.execute_command(
            *all_args(pairs, options(tokens, refund, peek, block)))
        d = parse(reply, "", None)
        bound = pairs[d.binding or 0][1]
        return parse(reply, _name(bound, "", name), bound.window_s)

    async def policy_set(self, name: str, limit: Limit, *, shadow: bool = False,
                         soft: Optional[int] = None, block: Optional[Number] = None) -> None:
        await self.redis.execute_command(*policy_set_args(name, limit, shadow, soft, block))

    async def policy_get(self, name: str) -> Optional[Tuple[Limit, Dict[str, object]]]:
        words = await self.redis.execute_command("RL.POLICY", "GET", name)
        return policy_from_words(words) if words else None

    async def policy_del(self, name: str) -> bool:
        return bool(await self.redis.execute_command("RL.POLICY", "DEL", name))

    async def policy_list(self) -> List[str]:
        return [_str(x) for x in await self.redis.execute_command("RL.POLICY", "LIST")]

    async def policy_dump(self) -> str:
        return _str(await self.redis.execute_command("RL.POLICY", "DUMP"))

    async def policy_load(self, text: str, *, replace: bool = False) -> int:
        args = ["RL.POLICY", "LOAD"] + (["REPLACE"] if replace else []) + [text]
        return int(await self.redis.execute_command(*args))

    async def policy_resetstats(self) -> None:
        await self.redis.execute_command("RL.POLICY", "RESETSTATS")
