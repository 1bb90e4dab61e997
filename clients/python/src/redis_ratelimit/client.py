"""Typed clients over redis-py: :class:`RateLimiter` (sync) and :class:`AsyncRateLimiter` (asyncio).

Each method sends one command (built by ``_commands``, the one place commands are made) and
returns a :class:`Decision` (or the admin reply). Errors are redis-py's:
``redis.exceptions.ResponseError`` for ``ERR …``/``WRONGTYPE`` (and ``unknown command`` when the
server has no module), ``ConnectionError``, ``TimeoutError``.

**Timeouts.** ``from_url`` builds a client whose socket timeouts are ``timeout_s`` (default
0.25 s, :data:`DEFAULT_TIMEOUT_S`) with redis-py's retries off: a hung or absent Redis costs at
most that. Calls are bounded by those socket timeouts, never cancelled from outside (cancelling
a redis-py asyncio call mid-flight could hand its reply to the next caller before redis-py 4.5.4:
CVE-2023-28858/28859; this package needs ``redis>=4.5.4``).
"""

from __future__ import annotations

import logging
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from . import _commands
from ._commands import Call
from ._engine import AsyncEngine, SyncEngine
from .concurrency import AsyncConcurrencyLease, ConcurrencyLease
from ._core import (
    GCRA,
    Concurrency,
    Decision,
    FixedWindow,
    LeakyBucket,
    Limit,
    Number,
    Policy,
    PolicyOptions,
    SlidingLog,
    SlidingWindow,
    TokenBucket,
)

__all__ = ["RateLimiter", "AsyncRateLimiter", "SyncRedis", "AsyncRedis", "DEFAULT_TIMEOUT_S"]

#: The socket timeouts ``from_url`` gives a client, in seconds (and the ``limits`` storages').
DEFAULT_TIMEOUT_S = 0.25

T = TypeVar("T")


class SyncRedis(Protocol):
    """What :class:`RateLimiter` needs of a client: ``redis.Redis`` or ``redis.RedisCluster``."""

    def execute_command(self, *args: Any, **options: Any) -> Any: ...


class AsyncRedis(Protocol):
    """What :class:`AsyncRateLimiter` needs: ``redis.asyncio.Redis`` or its ``RedisCluster``."""

    def execute_command(self, *args: Any, **options: Any) -> Awaitable[Any]: ...


def fail_fast(timeout_s: float, options: Dict[str, Any], asyncio: bool = False) -> Dict[str, Any]:
    """Client options for a limiter: socket timeouts of ``timeout_s`` and no retries (redis-py
    6+ retries 3 times with backoff by default: seconds before a dead server is reported);
    ``options`` override them."""
    from redis.backoff import NoBackoff

    if asyncio:
        from redis.asyncio.retry import Retry as AsyncRetry

        retry: Any = AsyncRetry(NoBackoff(), 0)
    else:
        from redis.retry import Retry

        retry = Retry(NoBackoff(), 0)
    out: Dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": retry,
        "retry_on_timeout": False,
    }
    out.update(options)
    return out


def _socket_timeout(client: Any) -> Optional[float]:
    """The client's socket timeout when it can be read (a plain client's pool), else ``None``."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if isinstance(kwargs, dict):
        value = kwargs.get("socket_timeout")
        return float(value) if isinstance(value, (int, float)) else None
    return None


class RateLimiter:
    """Sync client. ``RateLimiter(redis.Redis(...))`` (or a ``redis.RedisCluster``).

    ``RateLimiter.from_url("redis://host:6379/0")`` builds a client that fails fast (socket
    timeouts of ``timeout_s``, default 0.25 s; no retries), which is what middleware wants.

    Common keyword options of every decision: ``tokens`` (cost, default 1) or ``refund`` (give
    tokens back), ``peek`` (decide without writing), ``block`` (seconds to lock a refusing limiter
    out; not for policies, whose block is their own), ``name`` (the label in ``headers()``).

    Engine options (the same as the Node package's):

    * ``engine`` (default ``"auto"``): ``"module"`` (the ``RL.*`` commands), ``"functions"`` (the
      Functions library by ``FCALL``, loaded with ``FUNCTION LOAD REPLACE`` when absent or
      older), ``"eval"`` (the same code by ``EVALSHA``); ``"auto"`` takes the module when the
      server has it (``COMMAND INFO rl.gcra``), else the library, else ``EVALSHA``. The
      :attr:`engine` property says which one decides.
    * ``clock`` (default ``"auto"``): whose clock the library reads: the server's (``TIME``), or
      this process's (``NOW <unix_µs>``) where the server refuses ``TIME`` in scripts (logged
      once, a warning to ``logger``); ``"server"`` or ``"caller"`` forces one.
    * ``logger`` (default ``logging.getLogger("redis_ratelimit")``); ``now``: the caller's clock,
      µs since the Unix epoch (default: ``time.time_ns() // 1000``).

    Server-side policies (``RL.POLICY``, ``RL.LIMIT``, :class:`Policy`) are module data: through
    the library they raise :class:`~redis_ratelimit.ModuleRequiredError` (a ``ResponseError``).
    """

    def __init__(
        self,
        client: SyncRedis,
        *,
        engine: str = "auto",
        clock: str = "auto",
        logger: Optional[logging.Logger] = None,
        now: Optional[Callable[[], int]] = None,
    ) -> None:
        self.redis = client
        #: The client's socket timeout in seconds, when known (``None``: unbounded or unknown).
        self.timeout_s: Optional[float] = _socket_timeout(client)
        self._engine = SyncEngine(lambda: self.redis, engine=engine, clock=clock, now=now,
                                  logger=logger)

    @property
    def engine(self) -> Optional[str]:
        """The engine deciding: ``"module"``, ``"functions"`` or ``"eval"``; ``None`` until the
        first call (or :meth:`ready`) has found it."""
        return self._engine.name

    def ready(self) -> str:
        """Finds the engine now (loading the library if needed) and returns its name."""
        return self._engine.ready()

    @classmethod
    def from_url(
        cls,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        engine: str = "auto",
        clock: str = "auto",
        logger: Optional[logging.Logger] = None,
        now: Optional[Callable[[], int]] = None,
        **options: Any,
    ) -> "RateLimiter":
        """A limiter on ``redis.Redis.from_url(url)`` with ``timeout_s`` socket timeouts and no
        retries; ``options`` go to redis-py (and override those); ``engine``, ``clock``,
        ``logger``, ``now`` as the constructor's."""
        import redis

        limiter = cls(redis.Redis.from_url(url, **fail_fast(timeout_s, options)), engine=engine,
                      clock=clock, logger=logger, now=now)
        limiter.timeout_s = options.get("socket_timeout", timeout_s)
        return limiter

    def run(self, call: Call[T]) -> T:
        """Sends one command of ``_commands`` (through the engine in use) and reads its reply:
        every method goes through here."""
        return call.read(self._engine.execute(call.args))

    def check(
        self,
        key: str,
        limit: Limit,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """One limit on one key: the command of ``limit``'s algorithm, or ``RL.LIMIT`` for a
        :class:`Policy`."""
        return self.run(
            _commands.check(
                key, limit, tokens=tokens, refund=refund, peek=peek, force=force, block=block,
                name=name,
            )
        )

    def gcra(
        self,
        key: str,
        max_burst: int,
        tokens_per_period: int,
        period: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.GCRA key max_burst tokens_per_period period`` (period in seconds)."""
        return self.check(
            key,
            GCRA(max_burst, tokens_per_period, period),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    def token_bucket(
        self,
        key: str,
        capacity: int,
        refill_tokens: int,
        refill_period: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.TOKENBUCKET key capacity refill_tokens refill_period`` (seconds)."""
        return self.check(
            key,
            TokenBucket(capacity, refill_tokens, refill_period),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    def leaky_bucket(
        self,
        key: str,
        capacity: int,
        leak_tokens: int,
        leak_period: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.LEAKYBUCKET``: when allowed, ``retry_after_ms`` is the delay before the work."""
        return self.check(
            key,
            LeakyBucket(capacity, leak_tokens, leak_period),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    def fixed_window(
        self,
        key: str,
        limit: int,
        window: Union[Number, str],
        *,
        tz: Optional[str] = None,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.FIXEDWINDOW key limit window [TZ zone]``: ``window`` in seconds (epoch-aligned), or
        ``"day"``, ``"week"``, ``"month"``, ``"year"``: a calendar window in ``tz`` (UTC)."""
        return self.check(
            key,
            FixedWindow(limit, window, tz),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    def sliding_window(
        self,
        key: str,
        limit: int,
        window: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.SLIDINGWINDOW key limit window`` (seconds)."""
        return self.check(
            key,
            SlidingWindow(limit, window),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    def sliding_log(
        self,
        key: str,
        limit: int,
        window: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.SLIDINGLOG key limit window`` (seconds; ``limit`` ≤ sliding-log-max-limit)."""
        return self.check(
            key,
            SlidingLog(limit, window),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    def limit(
        self,
        policy: str,
        key: str,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.LIMIT key policy``: the server-side policy decides (``headers()`` has no ``w``)."""
        return self.check(key, Policy(policy), tokens=tokens, refund=refund, peek=peek, force=force,
                          name=name)

    def all(
        self,
        pairs: Sequence[Tuple[str, Limit]],
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.ALL``: every ``(key, limit)`` allows ``tokens`` now, or nothing is taken.
        ``Decision.binding`` is the 0-based index of the limit that decided."""
        return self.run(
            _commands.all_of(pairs, tokens=tokens, refund=refund, peek=peek, force=force,
                             block=block, name=name)
        )

    def charge(self, key: str, limit: Limit, cost: int, *,
               name: Optional[str] = None) -> Optional[Decision]:
        """Records ``cost`` tokens on ``key`` whatever ``limit`` says (``TOKENS cost FORCE``): a
        cost known only after the work (an LLM call's tokens, bytes sent). Past the limit the
        limiter goes into debt: the decision is limited (``remaining`` 0, ``retry_after_ms`` until
        one more token is admitted) and later calls are refused until the debt is repaid.
        ``cost`` 0 or less: nothing is sent, ``None``."""
        if cost <= 0:
            return None
        return self.check(key, limit, tokens=cost, force=True, name=name)

    # -- RL.CONCURRENCY
    def concurrency(
        self,
        key: str,
        limit: int,
        lease: Number,
        *,
        lease_id: Optional[str] = None,
        tokens: int = 1,
        block: Optional[Number] = None,
        renew: bool = True,
        renew_every_s: Optional[float] = None,
        also: Sequence[Tuple[str, Limit]] = (),
        name: Optional[str] = None,
        on_lost: Optional[Callable[[ConcurrencyLease], None]] = None,
    ) -> ConcurrencyLease:
        """At most ``limit`` at once on ``key``: ``with limiter.concurrency(key, limit=10,
        lease=30) as lease: …`` acquires ``tokens`` slots under ``lease_id`` (default: a fresh
        ``uuid4().hex``) or raises :class:`~redis_ratelimit.ConcurrencyLimitExceeded`
        (``retry_after_ms``), renews the lease every ``renew_every_s`` (default ``lease / 3``)
        in a daemon thread while the body runs (``renew=False``: never), and releases it on the
        way out, after an exception too (a failed release is logged, not raised: the slot then
        frees itself after ``lease`` seconds). ``also``: rate limits ``[(key, GCRA(…)), …]``
        decided with the acquisition, all or nothing (``RL.ALL``). ``block``: seconds to lock
        the limiter out after a refusal. ``on_lost(lease)``: called (from the renewal thread)
        when a renewal finds the lease gone (it expired: stop the work, or acquire again). See
        :class:`~redis_ratelimit.ConcurrencyLease`."""
        return ConcurrencyLease(self, key, limit, lease, lease_id=lease_id, tokens=tokens,
                                block=block, renew=renew, renew_every_s=renew_every_s,
                                also=also, name=name, on_lost=on_lost)

    def acquire(
        self,
        key: str,
        limit: int,
        lease: Number,
        lease_id: str,
        *,
        tokens: int = 1,
        peek: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.CONCURRENCY key limit lease ACQUIRE lease_id``: takes ``tokens`` slots until
        ``lease`` seconds from now (acquiring a held id renews it); ``remaining`` is the free
        slots, ``retry_after_ms`` (refused) the time until enough leases could expire."""
        return self.run(_commands.concurrency("ACQUIRE", key, Concurrency(limit, lease),
                                              lease_id, tokens=tokens, peek=peek, block=block,
                                              name=name))

    def renew(self, key: str, limit: int, lease: Number, lease_id: str, *, peek: bool = False,
              name: Optional[str] = None) -> Decision:
        """``RL.CONCURRENCY … RENEW lease_id``: the held lease lasts ``lease`` seconds from now;
        limited, ``retry_after_ms`` -1, when it is not held (expired, released, never taken)."""
        return self.run(_commands.concurrency("RENEW", key, Concurrency(limit, lease), lease_id,
                                              peek=peek, name=name))

    def release(self, key: str, limit: int, lease: Number, lease_id: str, *,
                peek: bool = False, name: Optional[str] = None) -> Decision:
        """``RL.CONCURRENCY … RELEASE lease_id``: gives the lease's slots back (an id that holds
        none is not an error); ``remaining``: the free slots."""
        return self.run(_commands.concurrency("RELEASE", key, Concurrency(limit, lease),
                                              lease_id, peek=peek, name=name))

    # -- RL.POLICY
    def policy_set(
        self,
        name: str,
        limit: Limit,
        *,
        shadow: bool = False,
        soft: Optional[int] = None,
        block: Optional[Number] = None,
    ) -> None:
        """``RL.POLICY SET name limit [SHADOW] [SOFT percent] [BLOCK s]``."""
        self.run(_commands.policy_set(name, limit, shadow=shadow, soft=soft, block=block))

    def policy_get(self, name: str) -> Optional[Tuple[Limit, PolicyOptions]]:
        """The policy as ``(limit, {"shadow", "soft", "block"})``, or ``None``; ``ValueError``
        for an algorithm this client does not know."""
        return self.run(_commands.policy_get(name))

    def policy_del(self, name: str) -> bool:
        return self.run(_commands.policy_del(name))

    def policy_list(self) -> List[str]:
        return self.run(_commands.policy_list())

    def policy_dump(self) -> str:
        return self.run(_commands.policy_dump())

    def policy_load(self, text: str, *, replace: bool = False) -> int:
        return self.run(_commands.policy_load(text, replace=replace))

    def policy_resetstats(self) -> None:
        self.run(_commands.policy_resetstats())


class AsyncRateLimiter:
    """The asyncio twin of :class:`RateLimiter`, over ``redis.asyncio.Redis`` (or its cluster),
    with the same engine options (``engine``, ``clock``, ``logger``, ``now``)."""

    def __init__(
        self,
        client: Optional[AsyncRedis],
        *,
        engine: str = "auto",
        clock: str = "auto",
        logger: Optional[logging.Logger] = None,
        now: Optional[Callable[[], int]] = None,
    ) -> None:
        self._redis = client
        self._factory: Optional[Callable[[], AsyncRedis]] = None
        #: The client's socket timeout in seconds, when known (``None``: unbounded or unknown).
        self.timeout_s: Optional[float] = _socket_timeout(client)
        self._engine = AsyncEngine(lambda: self.redis, engine=engine, clock=clock, now=now,
                                   logger=logger)

    @property
    def engine(self) -> Optional[str]:
        """The engine deciding: ``"module"``, ``"functions"`` or ``"eval"``; ``None`` until the
        first call (or :meth:`ready`) has found it."""
        return self._engine.name

    async def ready(self) -> str:
        """Finds the engine now (loading the library if needed) and returns its name."""
        return await self._engine.ready()

    @property
    def redis(self) -> AsyncRedis:
        """The redis-py client (created on first use when built by ``from_url``)."""
        if self._redis is None:
            if self._factory is None:
                raise RuntimeError("AsyncRateLimiter(None) needs a client")
            self._redis = self._factory()
        return self._redis

    @classmethod
    def from_url(
        cls,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        *,
        engine: str = "auto",
        clock: str = "auto",
        logger: Optional[logging.Logger] = None,
        now: Optional[Callable[[], int]] = None,
        **options: Any,
    ) -> "AsyncRateLimiter":
        """A limiter on ``redis.asyncio.Redis.from_url(url)``, failing fast as
        :meth:`RateLimiter.from_url`'s; the client is created on first use, so this may be
        called outside the event loop (at import time)."""
        import redis.asyncio

        limiter = cls(None, engine=engine, clock=clock, logger=logger, now=now)
        # Created on first use, inside the running event loop (on Python 3.9 redis-py's asyncio
        # pool binds to the loop current when it is built).
        limiter._factory = lambda: redis.asyncio.Redis.from_url(
            url, **fail_fast(timeout_s, options, asyncio=True)
        )
        limiter.timeout_s = options.get("socket_timeout", timeout_s)
        return limiter

    async def run(self, call: Call[T]) -> T:
        """Sends one command of ``_commands`` (through the engine in use) and reads its reply:
        every method goes through here."""
        return call.read(await self._engine.execute(call.args))

    async def check(
        self,
        key: str,
        limit: Limit,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """As :meth:`RateLimiter.check`."""
        return await self.run(
            _commands.check(
                key, limit, tokens=tokens, refund=refund, peek=peek, force=force, block=block,
                name=name,
            )
        )

    async def gcra(
        self,
        key: str,
        max_burst: int,
        tokens_per_period: int,
        period: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.GCRA key max_burst tokens_per_period period`` (period in seconds)."""
        return await self.check(
            key,
            GCRA(max_burst, tokens_per_period, period),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    async def token_bucket(
        self,
        key: str,
        capacity: int,
        refill_tokens: int,
        refill_period: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.TOKENBUCKET key capacity refill_tokens refill_period`` (seconds)."""
        return await self.check(
            key,
            TokenBucket(capacity, refill_tokens, refill_period),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    async def leaky_bucket(
        self,
        key: str,
        capacity: int,
        leak_tokens: int,
        leak_period: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.LEAKYBUCKET``: when allowed, ``retry_after_ms`` is the delay before the work."""
        return await self.check(
            key,
            LeakyBucket(capacity, leak_tokens, leak_period),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    async def fixed_window(
        self,
        key: str,
        limit: int,
        window: Union[Number, str],
        *,
        tz: Optional[str] = None,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.FIXEDWINDOW key limit window [TZ zone]``: ``window`` in seconds (epoch-aligned), or
        ``"day"``, ``"week"``, ``"month"``, ``"year"``: a calendar window in ``tz`` (UTC)."""
        return await self.check(
            key,
            FixedWindow(limit, window, tz),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    async def sliding_window(
        self,
        key: str,
        limit: int,
        window: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.SLIDINGWINDOW key limit window`` (seconds)."""
        return await self.check(
            key,
            SlidingWindow(limit, window),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    async def sliding_log(
        self,
        key: str,
        limit: int,
        window: Number,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.SLIDINGLOG key limit window`` (seconds; ``limit`` ≤ sliding-log-max-limit)."""
        return await self.check(
            key,
            SlidingLog(limit, window),
            tokens=tokens,
            refund=refund,
            peek=peek,
            force=force,
            block=block,
            name=name,
        )

    async def limit(
        self,
        policy: str,
        key: str,
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.LIMIT key policy``: the server-side policy decides (``headers()`` has no ``w``)."""
        return await self.check(
            key, Policy(policy), tokens=tokens, refund=refund, peek=peek, force=force,
            name=name
        )

    async def all(
        self,
        pairs: Sequence[Tuple[str, Limit]],
        *,
        tokens: int = 1,
        refund: Optional[int] = None,
        peek: bool = False,
        force: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """``RL.ALL``: every ``(key, limit)`` allows ``tokens`` now, or nothing is taken.
        ``Decision.binding`` is the 0-based index of the limit that decided."""
        return await self.run(
            _commands.all_of(pairs, tokens=tokens, refund=refund, peek=peek, force=force,
                             block=block, name=name)
        )

    async def charge(self, key: str, limit: Limit, cost: int, *,
                     name: Optional[str] = None) -> Optional[Decision]:
        """As :meth:`RateLimiter.charge`."""
        if cost <= 0:
            return None
        return await self.check(key, limit, tokens=cost, force=True, name=name)

    # -- RL.CONCURRENCY
    def concurrency(
        self,
        key: str,
        limit: int,
        lease: Number,
        *,
        lease_id: Optional[str] = None,
        tokens: int = 1,
        block: Optional[Number] = None,
        renew: bool = True,
        renew_every_s: Optional[float] = None,
        also: Sequence[Tuple[str, Limit]] = (),
        name: Optional[str] = None,
        on_lost: Optional[Callable[[AsyncConcurrencyLease], None]] = None,
    ) -> AsyncConcurrencyLease:
        """As :meth:`RateLimiter.concurrency`, for ``async with`` (renewed by an asyncio task):
        ``async with limiter.concurrency(key, limit=10, lease=30) as lease: …``. See
        :class:`~redis_ratelimit.AsyncConcurrencyLease`."""
        return AsyncConcurrencyLease(self, key, limit, lease, lease_id=lease_id, tokens=tokens,
                                     block=block, renew=renew, renew_every_s=renew_every_s,
                                     also=also, name=name, on_lost=on_lost)

    async def acquire(
        self,
        key: str,
        limit: int,
        lease: Number,
        lease_id: str,
        *,
        tokens: int = 1,
        peek: bool = False,
        block: Optional[Number] = None,
        name: Optional[str] = None,
    ) -> Decision:
        """As :meth:`RateLimiter.acquire`."""
        return await self.run(_commands.concurrency("ACQUIRE", key, Concurrency(limit, lease),
                                                    lease_id, tokens=tokens, peek=peek,
                                                    block=block, name=name))

    async def renew(self, key: str, limit: int, lease: Number, lease_id: str, *,
                    peek: bool = False, name: Optional[str] = None) -> Decision:
        """As :meth:`RateLimiter.renew`."""
        return await self.run(_commands.concurrency("RENEW", key, Concurrency(limit, lease),
                                                    lease_id, peek=peek, name=name))

    async def release(self, key: str, limit: int, lease: Number, lease_id: str, *,
                      peek: bool = False, name: Optional[str] = None) -> Decision:
        """As :meth:`RateLimiter.release`."""
        return await self.run(_commands.concurrency("RELEASE", key, Concurrency(limit, lease),
                                                    lease_id, peek=peek, name=name))

    # -- RL.POLICY
    async def policy_set(
        self,
        name: str,
        limit: Limit,
        *,
        shadow: bool = False,
        soft: Optional[int] = None,
        block: Optional[Number] = None,
    ) -> None:
        """``RL.POLICY SET name limit [SHADOW] [SOFT percent] [BLOCK s]``."""
        await self.run(_commands.policy_set(name, limit, shadow=shadow, soft=soft, block=block))

    async def policy_get(self, name: str) -> Optional[Tuple[Limit, PolicyOptions]]:
        """The policy as ``(limit, {"shadow", "soft", "block"})``, or ``None``; ``ValueError``
        for an algorithm this client does not know."""
        return await self.run(_commands.policy_get(name))

    async def policy_del(self, name: str) -> bool:
        return await self.run(_commands.policy_del(name))

    async def policy_list(self) -> List[str]:
        return await self.run(_commands.policy_list())

    async def policy_dump(self) -> str:
        return await self.run(_commands.policy_dump())

    async def policy_load(self, text: str, *, replace: bool = False) -> int:
        return await self.run(_commands.policy_load(text, replace=replace))

    async def policy_resetstats(self) -> None:
        await self.run(_commands.policy_resetstats())
