"""Concurrency limits held as leases (``RL.CONCURRENCY``, issue 32): at most ``limit`` at once.

    with limiter.concurrency("reports:tenant:7", limit=3, lease=30) as lease:
        build_report()                       # at most 3 of these run at once per tenant

    async with async_limiter.concurrency("reports:tenant:7", limit=3, lease=30) as lease:
        await build_report()

Entering acquires a slot under a fresh lease id (``uuid4().hex``) or raises
:class:`ConcurrencyLimitExceeded` (carrying the decision and ``retry_after_ms``); while the
body runs, the lease is renewed in the background every ``lease / 3`` seconds (a thread for
:class:`ConcurrencyLease`, an asyncio task for :class:`AsyncConcurrencyLease`), so work may
outlast ``lease``; leaving releases it, after an exception too. A failed release is logged
(``logging.getLogger("redis_ratelimit")``), never raised over the body's exception: the slot
then frees itself when the lease runs out, as it does when the holder dies.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from types import TracebackType
from typing import Any, Callable, Optional, Protocol, Sequence, Tuple, Type

from ._core import Concurrency, Decision, Limit, Number

__all__ = [
    "ConcurrencyLimitExceeded",
    "ConcurrencyLease",
    "AsyncConcurrencyLease",
    "SyncLeaseLimiter",
    "AsyncLeaseLimiter",
    "new_lease_id",
]

log = logging.getLogger("redis_ratelimit")


def new_lease_id() -> str:
    """A fresh lease id: 32 hex digits (``uuid4().hex``), well within the module's
    ``concurrency-max-id-length`` (128 bytes by default)."""
    return uuid.uuid4().hex


class ConcurrencyLimitExceeded(Exception):
    """Entering ``concurrency(...)`` was refused: ``limit`` slots are held (or, with ``also``,
    a rate limit refused: ``decision.binding`` is its index, ``decision.name`` its label).

    ``key``: the concurrency limit's key. ``decision``: the reply. ``retry_after_ms``: the time
    until enough leases could expire to free the slots (a release may free one sooner), or -1
    when the call can never pass (more ``tokens`` than ``limit``)."""

    def __init__(self, key: str, decision: Decision) -> None:
        self.key = key
        self.decision = decision
        self.retry_after_ms = decision.retry_after_ms
        if decision.retry_after_ms < 0:
            why = "it asks for more than the limit: never"
        else:
            why = f"retry after {decision.retry_after_ms} ms"
        super().__init__(f"refused for {key!r} by {decision.name} (limit {decision.limit}, "
                         f"{decision.remaining} free): {why}")

    @property
    def retry_after_s(self) -> Optional[int]:
        """``Retry-After`` in whole seconds (rounded up), or ``None`` when it can never pass."""
        return self.decision.retry_after_s


class SyncLeaseLimiter(Protocol):
    """What :class:`ConcurrencyLease` needs: :class:`~redis_ratelimit.RateLimiter`'s lease
    operations."""

    def acquire(self, key: str, limit: int, lease: Number, lease_id: str, *, tokens: int = ...,
                block: Optional[Number] = ..., name: Optional[str] = ...) -> Decision: ...

    def renew(self, key: str, limit: int, lease: Number, lease_id: str, *,
              name: Optional[str] = ...) -> Decision: ...

    def release(self, key: str, limit: int, lease: Number, lease_id: str, *,
                name: Optional[str] = ...) -> Decision: ...

    def all(self, pairs: Sequence[Tuple[str, Limit]], *, tokens: int = ...,
            block: Optional[Number] = ..., name: Optional[str] = ...) -> Decision: ...


class AsyncLeaseLimiter(Protocol):
    """What :class:`AsyncConcurrencyLease` needs: :class:`~redis_ratelimit.AsyncRateLimiter`'s
    lease operations."""

    async def acquire(self, key: str, limit: int, lease: Number, lease_id: str, *,
                      tokens: int = ..., block: Optional[Number] = ...,
                      name: Optional[str] = ...) -> Decision: ...

    async def renew(self, key: str, limit: int, lease: Number, lease_id: str, *,
                    name: Optional[str] = ...) -> Decision: ...

    async def release(self, key: str, limit: int, lease: Number, lease_id: str, *,
                      name: Optional[str] = ...) -> Decision: ...

    async def all(self, pairs: Sequence[Tuple[str, Limit]], *, tokens: int = ...,
                  block: Optional[Number] = ..., name: Optional[str] = ...) -> Decision: ...


class _LeaseBase:
    """What the sync and asyncio leases share: the parameters and the state."""

    def __init__(
        self,
        key: str,
        limit: int,
        lease: Number,
        *,
        lease_id: Optional[str],
        tokens: int,
        block: Optional[Number],
        renew: bool,
        renew_every_s: Optional[float],
        also: Sequence[Tuple[str, Limit]],
        name: Optional[str],
        on_lost: Optional[Callable[[Any], None]],
    ) -> None:
        if isinstance(lease, bool) or not lease > 0:
            raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
        if renew_every_s is not None and not renew_every_s > 0:
            raise ValueError(f"renew_every_s must be positive, not {renew_every_s!r}")
        for _, other in also:
            if isinstance(other, Concurrency):
                raise ValueError("also= takes rate limits; one concurrency limit per lease")
        #: The concurrency limit's key.
        self.key = key
        #: The most slots held at once.
        self.limit = limit
        #: Seconds a lease lasts from its acquisition or last renewal.
        self.lease = lease
        #: This lease's id (``uuid4().hex`` unless given).
        self.id = lease_id if lease_id is not None else new_lease_id()
        #: Slots this lease holds.
        self.tokens = tokens
        self.block = block
        #: Whether the lease is renewed in the background while held.
        self.renews = renew
        #: Seconds between background renewals (default: a third of ``lease``).
        self.renew_every_s = renew_every_s if renew_every_s is not None else float(lease) / 3
        #: Rate limits decided with the acquisition, all or nothing (``RL.ALL``).
        self.also = list(also)
        self.name = name
        #: Called with this lease when a renewal finds it lost (from the renewal thread or task).
        self.on_lost = on_lost
        #: The acquisition's decision (``None`` before :meth:`acquire`).
        self.decision: Optional[Decision] = None
        #: True when a renewal found the lease gone (it expired: the slot may be someone
        #: else's now); renewal then stops.
        self.lost = False
        #: Background renewals that succeeded.
        self.renewals = 0
        self._held = False

    @property
    def held(self) -> bool:
        """True from a successful acquisition until the release (even if :attr:`lost`)."""
        return self._held

    def _pairs(self) -> Sequence[Tuple[str, Limit]]:
        return [*self.also, (self.key, Concurrency(self.limit, self.lease, self.id))]

    def _acquired(self, decision: Decision) -> Decision:
        self.decision = decision
        self._held = decision.allowed
        return decision

    def _renewed(self, decision: Decision) -> None:
        if decision.allowed:
            self.renewals += 1
            return
        self.lost = True
        log.warning("concurrency lease %s on %r was lost (expired before it was renewed): its "
                    "slot may be held by another now", self.id, self.key)
        if self.on_lost is not None:
            try:
                self.on_lost(self)
            except Exception:
                log.exception("on_lost of concurrency lease %s on %r failed", self.id, self.key)

    def _log_release_failure(self, exc: BaseException) -> None:
        log.warning("releasing concurrency lease %s on %r failed (%s: %s): the slot frees itself "
                    "when the lease runs out (%s s)", self.id, self.key, type(exc).__name__, exc,
                    self.lease)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(key={self.key!r}, limit={self.limit}, lease={self.lease}, "
                f"id={self.id!r}, held={self._held}, lost={self.lost})")


class ConcurrencyLease(_LeaseBase):
    """A lease on a concurrency limit, for a sync :class:`~redis_ratelimit.RateLimiter`
    (built by ``RateLimiter.concurrency``).

    As a context manager: entering acquires (or raises :class:`ConcurrencyLimitExceeded`),
    leaving releases (a failure to release is logged, never raised). Without ``with``:
    :meth:`acquire` (returns the decision, never raises on a refusal), :meth:`release`.
    While held, a daemon thread renews the lease every :attr:`renew_every_s` (``renew=False``:
    no renewal; the lease then ends ``lease`` seconds after the acquisition); a renewal that
    fails on a Redis error is logged and tried again at the next tick; one that finds the lease
    gone sets :attr:`lost`, logs a warning, calls ``on_lost(lease)`` and stops renewing."""

    def __init__(self, limiter: SyncLeaseLimiter, key: str, limit: int, lease: Number, *,
                 lease_id: Optional[str] = None, tokens: int = 1,
                 block: Optional[Number] = None, renew: bool = True,
                 renew_every_s: Optional[float] = None,
                 also: Sequence[Tuple[str, Limit]] = (), name: Optional[str] = None,
                 on_lost: Optional[Callable[["ConcurrencyLease"], None]] = None) -> None:
        super().__init__(key, limit, lease, lease_id=lease_id, tokens=tokens, block=block,
                         renew=renew, renew_every_s=renew_every_s, also=also, name=name,
                         on_lost=on_lost)
        self.limiter = limiter
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def acquire(self) -> Decision:
        """``ACQUIRE`` (``RL.ALL`` with :attr:`also`): the decision; when allowed, the lease is
        held and renewed in the background until :meth:`release` (always call it). Redis errors
        are raised."""
        if self._held:
            raise RuntimeError(f"{self!r} is already held")
        if self.also:
            decision = self.limiter.all(self._pairs(), tokens=self.tokens, block=self.block,
                                        name=self.name)
        else:
            decision = self.limiter.acquire(self.key, self.limit, self.lease, self.id,
                                            tokens=self.tokens, block=self.block, name=self.name)
        self._acquired(decision)
        if self._held and self.renews:
            self._stop.clear()
            self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                            name=f"redis-ratelimit-lease-{self.id[:8]}")
            self._thread.start()
        return decision

    def renew(self) -> Decision:
        """``RENEW``: the lease lasts ``lease`` seconds from now; limited (``retry_after_ms``
        -1) when it is no longer held."""
        return self.limiter.renew(self.key, self.limit, self.lease, self.id, name=self.name)

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every_s):
            try:
                decision = self.renew()
            except Exception as exc:  # a Redis error: tried again at the next tick
                log.warning("renewing concurrency lease %s on %r failed (%s: %s)", self.id,
                            self.key, type(exc).__name__, exc)
                continue
            if self._stop.is_set():  # released meanwhile: a refusal now says nothing
                return
            self._renewed(decision)
            if self.lost:
                return

    def _stop_renewing(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def release(self) -> Optional[Decision]:
        """Stops the renewal and sends ``RELEASE``; ``None`` when not held (released already, or
        never acquired). Redis errors are raised (the lease is not held afterwards either way)."""
        if not self._held:
            return None
        self._held = False
        self._stop_renewing()
        return self.limiter.release(self.key, self.limit, self.lease, self.id, name=self.name)

    def __enter__(self) -> "ConcurrencyLease":
        decision = self.acquire()
        if decision.limited:
            raise ConcurrencyLimitExceeded(self.key, decision)
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            self.release()
        except Exception as failure:
            self._log_release_failure(failure)


class AsyncConcurrencyLease(_LeaseBase):
    """:class:`ConcurrencyLease` for an :class:`~redis_ratelimit.AsyncRateLimiter` (built by
    ``AsyncRateLimiter.concurrency``): ``async with``, or ``await acquire()`` /
    ``await release()``; renewed by an asyncio task of the loop that acquired. Leaving stops the
    task without cancelling a renewal in flight (redis-py calls are never cancelled)."""

    def __init__(self, limiter: AsyncLeaseLimiter, key: str, limit: int, lease: Number, *,
                 lease_id: Optional[str] = None, tokens: int = 1,
                 block: Optional[Number] = None, renew: bool = True,
                 renew_every_s: Optional[float] = None,
                 also: Sequence[Tuple[str, Limit]] = (), name: Optional[str] = None,
                 on_lost: Optional[Callable[["AsyncConcurrencyLease"], None]] = None) -> None:
        super().__init__(key, limit, lease, lease_id=lease_id, tokens=tokens, block=block,
                         renew=renew, renew_every_s=renew_every_s, also=also, name=name,
                         on_lost=on_lost)
        self.limiter = limiter
        self._stop: Optional[asyncio.Event] = None
        self._task: Optional["asyncio.Task[Any]"] = None

    async def acquire(self) -> Decision:
        """As :meth:`ConcurrencyLease.acquire`."""
        if self._held:
            raise RuntimeError(f"{self!r} is already held")
        if self.also:
            decision = await self.limiter.all(self._pairs(), tokens=self.tokens,
                                              block=self.block, name=self.name)
        else:
            decision = await self.limiter.acquire(self.key, self.limit, self.lease, self.id,
                                                  tokens=self.tokens, block=self.block,
                                                  name=self.name)
        self._acquired(decision)
        if self._held and self.renews:
            self._stop = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._renew_loop(self._stop))
        return decision

    async def renew(self) -> Decision:
        """As :meth:`ConcurrencyLease.renew`."""
        return await self.limiter.renew(self.key, self.limit, self.lease, self.id,
                                        name=self.name)

    async def _renew_loop(self, stop: asyncio.Event) -> None:
        while True:
            try:
                await asyncio.wait_for(stop.wait(), self.renew_every_s)
                return
            except asyncio.TimeoutError:
                pass
            try:
                decision = await self.renew()
            except Exception as exc:
                log.warning("renewing concurrency lease %s on %r failed (%s: %s)", self.id,
                            self.key, type(exc).__name__, exc)
                continue
            if stop.is_set():
                return
            self._renewed(decision)
            if self.lost:
                return

    async def _stop_renewing(self) -> None:
        stop, task = self._stop, self._task
        self._stop = self._task = None
        if stop is not None:
            stop.set()
        if task is not None and task is not asyncio.current_task():
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():
                    raise
            except Exception:  # pragma: no cover - the loop catches its own errors
                pass

    async def release(self) -> Optional[Decision]:
        """As :meth:`ConcurrencyLease.release`."""
        if not self._held:
            return None
        self._held = False
        await self._stop_renewing()
        return await self.limiter.release(self.key, self.limit, self.lease, self.id,
                                          name=self.name)

    async def __aenter__(self) -> "AsyncConcurrencyLease":
        decision = await self.acquire()
        if decision.limited:
            raise ConcurrencyLimitExceeded(self.key, decision)
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            await self.release()
        except Exception as failure:
            self._log_release_failure(failure)
