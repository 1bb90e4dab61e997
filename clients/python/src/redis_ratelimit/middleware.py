"""ASGI and WSGI middleware: per-route rules, key functions, fail-open/fail-closed, back-off while
Redis is down, an optional in-memory fallback limiter, and a local cache of denials.

    app = ASGIRateLimitMiddleware(app, AsyncRateLimiter.from_url("redis://localhost:6379"), rules=[
        Rule(GCRA(4, 10, 1), path="/api/", key=header_key("x-api-key")),
        Rule(SlidingLog(5, 60), path="/login", methods={"POST"}, fail_open=False),
    ])

The first rule whose ``path`` (a prefix, or a regular expression when it starts with ``^``) and
``methods`` match decides; a request no rule matches, or whose key function returns ``None``,
passes untouched. Allowed responses get the rate-limit headers (:meth:`Decision.headers`);
refusals get 429 with them and ``Retry-After`` when a retry can pass (a cost above the limit gets
429 without it). When Redis fails (connection refused, a timeout, a policy rule on a server without
the module, any Redis error) the rule fails open (the request passes, without headers) or closed (503 with
``Retry-After: 1``); it is never a 500.

One flow, :class:`RateLimitFlow`, decides for the WSGI and ASGI middleware and the FastAPI
dependency: plan (rule, key, cost) → the cache of denials → Redis unless it is marked down →
decided or failed.

* **Timeouts** are the limiter's client's socket timeouts (``RateLimiter.from_url`` /
  ``AsyncRateLimiter.from_url``: 0.25 s by default); calls are never cancelled from outside.
* **Back-off**: a connection error or a timeout marks Redis down; for ``recheck_after_s``
  (doubling on each failed check, up to ``recheck_max_s``) requests do not wait on it: one request
  checks it again, the others are decided at once by the fallback or by ``fail_open``.
* **Fallback** (optional, ``fallback=MemoryFallback()``): while Redis is down, an in-memory,
  per-process limiter decides with the rule's limit (approximately: a token bucket of the same
  quota and window); policies, whose limits live on the server, still fail open or closed.
* **Cache of denials**: a refusal is remembered in memory until its ``retry_after_ms``; the same
  key is answered 429 without asking Redis.
* **Concurrency limits**: a rule whose limit is :class:`~redis_ratelimit.Concurrency`
  (``Rule(Concurrency(3, 60), path="/reports", key=tenant)``) holds a slot per request, under a
  fresh lease id, from the decision until the response is done: for WSGI, when the server closes
  the body's iterable (after a streamed body, or a failure); for ASGI, once the last body
  message is sent (or the app returns or fails first). The lease is renewed every third of its
  lease time while the request runs, so a long response keeps its slot; a worker that dies frees
  it when the lease runs out. Refused: 429 with ``Retry-After: 1`` (``retry_after_ms`` capped at
  1000: a slot frees whenever a request ends), never cached; failing: open or closed as every
  rule.
* **Refusals** are rendered by ``render(refusal)`` when given; else, under the ASGI middleware,
  by the wrapped Starlette/FastAPI app's exception handlers (for
  :class:`redis_ratelimit.starlette.RateLimitExceeded` /
  :class:`~redis_ratelimit.starlette.RateLimiterUnavailable`, or their status code); else as
  ``text/plain``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import (
    Any,
    Awaitable,
    Callable,
    Collection,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    MutableMapping,
    Optional,
    Protocol,
    Tuple,
    Type,
    Union,
)

import redis.exceptions

from ._core import Concurrency, Decision, Limit, Policy, parse_limit
from ._refusal import Refusal
from .concurrency import (
    AsyncConcurrencyLease,
    AsyncLeaseLimiter,
    ConcurrencyLease,
    SyncLeaseLimiter,
)

log = logging.getLogger("redis_ratelimit")

__all__ = [
    "RequestInfo",
    "ResponseInfo",
    "Rule",
    "Refusal",
    "Outcome",
    "SyncLimiter",
    "AsyncLimiter",
    "MemoryFallback",
    "RateLimitFlow",
    "client_ip",
    "header_key",
    "WSGIRateLimitMiddleware",
    "ASGIRateLimitMiddleware",
]


@dataclass(frozen=True)
class RequestInfo:
    """What key functions see: ``headers`` have lower-case names; ``client`` is the peer address."""

    method: str
    path: str
    headers: Mapping[str, str]
    client: Optional[str]
    query_string: str = ""


KeyFunc = Callable[[RequestInfo], Optional[str]]
"""The requester's identity for a rule, or ``None`` to exempt the request."""

Cost = Union[int, Callable[[RequestInfo], int]]
"""Tokens one request takes: a number or a function of the request."""


@dataclass(frozen=True)
class ResponseInfo:
    """What a rule's ``charge`` sees of the response: its status and headers (lower-case
    names)."""

    status: int
    headers: Mapping[str, str]


Charge = Callable[[RequestInfo, ResponseInfo], int]
"""Tokens a response cost, known when it is done (an LLM call's, from a usage header)."""


def client_ip(request: RequestInfo) -> Optional[str]:
    """The peer's address (behind a proxy, use ``header_key("x-forwarded-for")`` you trust)."""
    return request.client


def header_key(name: str, fallback: Optional[KeyFunc] = client_ip) -> KeyFunc:
    """A key function reading header ``name`` (e.g. an API key), else ``fallback``."""
    lname = name.lower()

    def key(request: RequestInfo) -> Optional[str]:
        value = request.headers.get(lname)
        if value:
            return value
        return fallback(request) if fallback else None

    return key


class SyncLimiter(Protocol):
    """What the WSGI middleware needs: :class:`~redis_ratelimit.RateLimiter`, or any object
    whose ``check`` decides (and raises redis-py's errors or ``OSError`` when it cannot)."""

    def check(
        self, key: str, limit: Limit, *, tokens: int = ..., name: Optional[str] = ...
    ) -> Decision: ...


class AsyncLimiter(Protocol):
    """What the ASGI middleware and the FastAPI dependency need:
    :class:`~redis_ratelimit.AsyncRateLimiter`."""

    async def check(
        self, key: str, limit: Limit, *, tokens: int = ..., name: Optional[str] = ...
    ) -> Decision: ...


@dataclass(init=False)
class Rule:
    """One rate limit on the requests it matches.

    ``limit``: an algorithm and its parameters (``GCRA(4, 10, 1)``), the rule syntax of a fixed
    window (``"100/minute"``; ``"1000/month@Europe/Paris"``: a calendar month in that zone, see
    :func:`~redis_ratelimit.parse_limit`), a server-side
    ``Policy("name")``, or a concurrency limit (``Concurrency(3, 60)``: at most 3 requests at
    once per key, each holding its slot until its response is done; ``cost`` is the slots). ``path``: a prefix, or a regular expression when it starts with ``^``.
    ``methods``: upper-case methods, or ``None`` for all. ``key``: the requester's identity
    (``None`` exempts the request). ``cost``: tokens per request, or a function of the request.
    ``name``: the label in the headers and in the Redis key (default: the path).
    ``fail_open``: overrides the middleware's setting. ``charge``: a function of the request and
    the response, the tokens the response cost (e.g. read from a usage header): the rule then
    checks before the handler (``PEEK``: refused while the limit is spent or in debt) and records
    that many with ``FORCE`` when the response is done, past the limit if need be (debt, repaid
    before the next request passes). Not for a concurrency limit.
    """

    limit: Limit
    path: str = "/"
    methods: Optional[Collection[str]] = None
    key: KeyFunc = client_ip
    cost: Cost = 1
    name: Optional[str] = None
    fail_open: Optional[bool] = None
    charge: Optional[Charge] = None
    _regex: Optional["re.Pattern[str]"] = field(default=None, init=False, repr=False)

    def __init__(self, limit: Union[Limit, str], path: str = "/",
                 methods: Optional[Collection[str]] = None, key: KeyFunc = client_ip,
                 cost: Cost = 1, name: Optional[str] = None,
                 fail_open: Optional[bool] = None, charge: Optional[Charge] = None) -> None:
        # ``limit`` may be the rule syntax: "100/minute", "1000/month@Europe/Paris"
        # (redis_ratelimit.parse_limit).
        self.limit = parse_limit(limit) if isinstance(limit, str) else limit
        self.path, self.methods, self.key, self.cost = path, methods, key, cost
        self.name, self.fail_open, self.charge = name, fail_open, charge
        self._regex = None
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.charge is not None and isinstance(self.limit, Concurrency):
            raise ValueError("a Concurrency rule holds slots, it is not charged: no charge=")
        if self.path.startswith("^"):
            self._regex = re.compile(self.path)
        if self.methods is not None:
            self.methods = {m.upper() for m in self.methods}
        if self.name is None:
            self.name = self.limit.name if isinstance(self.limit, Policy) else self.path

    @property
    def label(self) -> str:
        """The rule's name (set by ``__post_init__``)."""
        return self.name or self.path

    def matches(self, request: RequestInfo) -> bool:
        if self.methods is not None and request.method.upper() not in self.methods:
            return False
        if self._regex is not None:
            return self._regex.match(request.path) is not None
        return request.path.startswith(self.path)


Rendered = Tuple[int, Mapping[str, str], bytes]
"""What ``render`` returns: status, headers (added to the refusal's), body."""

Render = Callable[[Refusal], Rendered]


Lease = Union[ConcurrencyLease, AsyncConcurrencyLease]


@dataclass(frozen=True)
class Outcome:
    """The flow's answer for a request it limits: ``refusal`` set, refuse; else pass the request
    on, adding ``headers``. ``decision`` is the limiter's (``None`` when Redis failed).
    ``lease``: the slot a concurrency rule holds for the request, to give back with
    :meth:`RateLimitFlow.release` / :meth:`RateLimitFlow.release_async` when the response is
    done (``None`` for rate limits)."""

    headers: Mapping[str, str]
    decision: Optional[Decision] = None
    refusal: Optional[Refusal] = None
    lease: Optional[Lease] = None
    #: A rule with ``charge``: what to charge when the response is done (:meth:`RateLimitFlow.charge`).
    pending: Optional["_Pending"] = None
    request: Optional[RequestInfo] = None
    _charged: List[bool] = field(default_factory=list, repr=False, compare=False)

    @property
    def status(self) -> Optional[int]:
        return self.refusal.status if self.refusal is not None else None


class DenialCache:
    """Keys known to be limited, until their ``retry_after_ms``; at most ``size`` entries
    (when full, the oldest is evicted)."""

    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._until: Dict[str, Tuple[float, Decision]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> Optional[Decision]:
        """The refusal still in force for ``key`` (its ``retry_after_ms`` counted from now)."""
        now = time.monotonic()
        with self._lock:
            entry = self._until.get(key)
            if entry is None:
                return None
            until, decision = entry
            if until <= now:
                del self._until[key]
                return None
        left_ms = max(1, math.ceil((until - now) * 1000))
        return replace(
            decision,
            remaining=0,
            retry_after_ms=left_ms,
            reset_after_ms=max(decision.reset_after_ms, left_ms),
        )

    def put(self, key: str, decision: Decision) -> None:
        if self.size <= 0 or decision.retry_after_ms < 0:
            return
        now = time.monotonic()
        with self._lock:
            if key not in self._until and len(self._until) >= self.size:
                # Full: the oldest entry goes (dicts keep insertion order), in
                # O(1) rather than a scan of every entry per insertion.
                del self._until[next(iter(self._until))]
            self._until[key] = (now + decision.retry_after_ms / 1000, decision)


class MemoryFallback:
    """The in-memory fallback limiter: decides while Redis is marked down, per process.

    Each key gets a token bucket of the rule's quota, refilled over the rule's window (for
    ``SlidingLog(5, 60)``: 5 tokens, 5 per 60 s) — an approximation of the rule's algorithm,
    counted in this process only (N processes admit up to N times the limit). A
    :class:`~redis_ratelimit.Policy`'s limit lives on the server: it is not decided here
    (``check`` returns ``None``). At most ``max_keys`` keys (the least recently used go)."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self.max_keys = max_keys
        self._buckets: "OrderedDict[str, Tuple[float, float]]" = OrderedDict()
        self._lock = threading.Lock()

    def check(
        self, key: str, limit: Limit, *, tokens: int = 1, name: Optional[str] = None
    ) -> Optional[Decision]:
        quota, window_s = limit.quota, limit.window_s
        if quota is None or window_s is None or window_s <= 0:
            return None
        rate = quota / window_s  # tokens per second
        now = time.monotonic()
        with self._lock:
            level, then = self._buckets.pop(key, (float(quota), now))
            level = min(float(quota), level + (now - then) * rate)
            limited = tokens > level
            if not limited:
                level -= tokens
            self._buckets[key] = (level, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        if not limited:
            retry_ms = -1
        elif tokens > quota:
            retry_ms = -1  # can never pass
        else:
            retry_ms = max(1, math.ceil((tokens - level) / rate * 1000))
        reset_ms = math.ceil((quota - level) / rate * 1000)
        label = name or (limit.keyword.lower())
        return Decision(limited, quota, int(level), retry_ms, reset_ms, None, label, window_s)


class _Health:
    """Whether Redis is marked down, and when to check it again (doubling back-off)."""

    def __init__(self, recheck_after_s: float, recheck_max_s: float) -> None:
        self.first_s = recheck_after_s
        self.max_s = recheck_max_s
        self._down = False
        self._wait_s = recheck_after_s
        self._next_check = 0.0
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._down

    def may_call(self) -> bool:
        """True when Redis is up, or when this caller is the one to check it again."""
        with self._lock:
            if not self._down:
                return True
            now = time.monotonic()
            if now < self._next_check:
                return False
            # This caller checks; the others keep skipping Redis meanwhile.
            self._next_check = now + self._wait_s
            return True

    def failed(self) -> None:
        with self._lock:
            if self._down:
                self._wait_s = min(self._wait_s * 2, self.max_s)
            else:
                self._down = True
                self._wait_s = self.first_s
            self._next_check = time.monotonic() + self._wait_s
            wait_s = self._wait_s
        log.warning("Redis marked down: checking again in %.3g s", wait_s)

    def succeeded(self) -> None:
        if self._down:
            with self._lock:
                self._down = False
                self._wait_s = self.first_s
            log.warning("Redis is back")


# Every failure of the limiter that fails open or closed (never a 500): Redis errors (connection
# refused, timeouts, "unknown command" from a server without the module, …), socket errors.
FAILURES: Tuple[Type[BaseException], ...] = (
    redis.exceptions.RedisError,
    OSError,
    asyncio.TimeoutError,
    TimeoutError,
)

# The failures that mark Redis down (an error reply does not: the server answered).
OUTAGES: Tuple[Type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
    asyncio.TimeoutError,
    TimeoutError,
)


@dataclass(frozen=True)
class _Pending:
    """A decision to ask the limiter for."""

    rule: Rule
    key: str
    cost: int


class RateLimitFlow:
    """The one decision flow of the WSGI and ASGI middleware and the FastAPI dependency.

    ``prefix``: of Redis keys (``<prefix><rule name>:<key>``). ``fail_open``: while the limiter
    fails and no fallback decides, pass the request (True) or answer 503 (False); a rule's own
    ``fail_open`` wins. ``cache_size``: denials kept in memory (0 disables). ``legacy_headers``:
    add ``X-RateLimit-Limit/Remaining/Reset`` (off by default; the IETF ``RateLimit`` /
    ``RateLimit-Policy`` fields are always sent). ``fallback``: a :class:`MemoryFallback` that
    decides while Redis is down. ``recheck_after_s`` / ``recheck_max_s``: the back-off while Redis
    is down (1 s, doubling, at most 30 s)."""

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        prefix: str = "rl:",
        fail_open: bool = True,
        cache_size: int = 10_000,
        legacy_headers: bool = False,
        fallback: Optional[MemoryFallback] = None,
        recheck_after_s: float = 1.0,
        recheck_max_s: float = 30.0,
    ) -> None:
        self.rules: List[Rule] = list(rules)
        self.prefix = prefix
        self.fail_open = fail_open
        self.legacy_headers = legacy_headers
        self.cache = DenialCache(cache_size)
        self.fallback = fallback
        self.health = _Health(recheck_after_s, recheck_max_s)
        self._charged_lock = threading.Lock()

    # ---------------------------------------------------------------- the flow
    def decide(
        self, limiter: SyncLimiter, request: RequestInfo, rule: Optional[Rule] = None
    ) -> Optional[Outcome]:
        """The outcome for ``request`` (under ``rule``, else the first rule that matches), or
        ``None`` when no rule limits it."""
        step = self._start(request, rule)
        if not isinstance(step, _Pending):
            return step
        limit = step.rule.limit
        lease: Optional[ConcurrencyLease] = None
        try:
            if isinstance(limit, Concurrency):
                lease = ConcurrencyLease(
                    _lease_limiter(limiter), step.key, limit.limit, limit.lease,
                    tokens=step.cost, name=step.rule.label,
                )
                decision = lease.acquire()
            elif step.rule.charge is not None:
                decision = _charging(limiter).check(step.key, limit, tokens=step.cost,
                                                    name=step.rule.label, peek=True)
            else:
                decision = limiter.check(step.key, limit, tokens=step.cost, name=step.rule.label)
        except FAILURES as exc:
            return self._failed(step, exc)
        return self._decided(step, decision, lease, request)

    async def decide_async(
        self, limiter: AsyncLimiter, request: RequestInfo, rule: Optional[Rule] = None
    ) -> Optional[Outcome]:
        """:meth:`decide` with an asyncio limiter."""
        step = self._start(request, rule)
        if not isinstance(step, _Pending):
            return step
        limit = step.rule.limit
        lease: Optional[AsyncConcurrencyLease] = None
        try:
            if isinstance(limit, Concurrency):
                lease = AsyncConcurrencyLease(
                    _async_lease_limiter(limiter), step.key, limit.limit, limit.lease,
                    tokens=step.cost, name=step.rule.label,
                )
                decision = await lease.acquire()
            elif step.rule.charge is not None:
                decision = await _charging(limiter).check(step.key, limit, tokens=step.cost,
                                                          name=step.rule.label, peek=True)
            else:
                decision = await limiter.check(
                    step.key, limit, tokens=step.cost, name=step.rule.label
                )
        except FAILURES as exc:
            return self._failed(step, exc)
        return self._decided(step, decision, lease, request)

    def release(self, outcome: Optional[Outcome]) -> None:
        """Gives back the slot ``outcome`` holds (a concurrency rule's), at most once; a failure
        is logged (the slot then frees itself when its lease runs out), never raised."""
        lease = outcome.lease if outcome is not None else None
        if isinstance(lease, ConcurrencyLease):
            try:
                lease.release()
            except Exception as exc:
                lease._log_release_failure(exc)

    async def release_async(self, outcome: Optional[Outcome]) -> None:
        """:meth:`release` for an outcome of :meth:`decide_async`."""
        lease = outcome.lease if outcome is not None else None
        if isinstance(lease, AsyncConcurrencyLease):
            try:
                await lease.release()
            except Exception as exc:
                lease._log_release_failure(exc)

    def charge(
        self, limiter: SyncLimiter, outcome: Optional[Outcome], response: ResponseInfo
    ) -> Optional[Decision]:
        """Records what the response cost under a rule with ``charge`` (``TOKENS cost FORCE``),
        at most once per outcome; a debt is remembered by the cache of denials. A failure (of the
        charge function or of Redis) is logged, never raised: the response is already sent."""
        step = self._to_charge(outcome)
        if step is None or outcome is None:
            return None
        try:
            cost = _cost_of(step, outcome, response)
            if cost <= 0:
                return None
            decision = _charging(limiter).check(step.key, step.rule.limit, tokens=cost,
                                                name=step.rule.label, force=True)
        except Exception as exc:
            self._charge_failed(step, exc)
            return None
        return self._charged(step, decision)

    async def charge_async(
        self, limiter: AsyncLimiter, outcome: Optional[Outcome], response: ResponseInfo
    ) -> Optional[Decision]:
        """:meth:`charge` with an asyncio limiter."""
        step = self._to_charge(outcome)
        if step is None or outcome is None:
            return None
        try:
            cost = _cost_of(step, outcome, response)
            if cost <= 0:
                return None
            decision = await _charging(limiter).check(step.key, step.rule.limit, tokens=cost,
                                                      name=step.rule.label, force=True)
        except Exception as exc:
            self._charge_failed(step, exc)
            return None
        return self._charged(step, decision)

    def _to_charge(self, outcome: Optional[Outcome]) -> Optional[_Pending]:
        if outcome is None or outcome.pending is None or outcome.pending.rule.charge is None:
            return None
        with self._charged_lock:  # once, whoever reports the response done
            if outcome._charged:
                return None
            outcome._charged.append(True)
        return outcome.pending

    def _charged(self, step: _Pending, decision: Decision) -> Decision:
        self.health.succeeded()
        decision = replace(decision, name=step.rule.label)
        if decision.limited:
            self.cache.put(step.key, decision)  # in debt: refused from memory until repaid
        return decision

    def _charge_failed(self, step: _Pending, exc: BaseException) -> None:
        if isinstance(exc, OUTAGES):
            self.health.failed()
        log.warning("could not charge %s for a response (%s: %s): not recorded", step.rule.label,
                    type(exc).__name__, exc)

    # ---------------------------------------------------------------- its steps
    def plan(self, request: RequestInfo, rule: Optional[Rule] = None) -> Optional[_Pending]:
        """(rule, Redis key, cost) for this request, or ``None`` when no rule applies."""
        if rule is None:
            rule = next((r for r in self.rules if r.matches(request)), None)
            if rule is None:
                return None
        ident = rule.key(request)
        if ident is None:
            return None
        cost = rule.cost(request) if callable(rule.cost) else rule.cost
        return _Pending(rule, f"{self.prefix}{rule.label}:{ident}", cost)

    def _start(self, request: RequestInfo, rule: Optional[Rule]) -> Union[None, Outcome, _Pending]:
        step = self.plan(request, rule)
        if step is None:
            return None
        cached = self.cache.get(step.key)
        if cached is not None:
            headers = cached.headers(legacy=self.legacy_headers)
            return Outcome(
                headers, cached, Refusal(429, headers, step.rule.label, cached, cached=True)
            )
        if not self.health.may_call():
            return self._without_redis(step, None)
        return step

    def _decided(self, step: _Pending, decision: Decision, lease: Optional[Lease] = None,
                 request: Optional[RequestInfo] = None) -> Outcome:
        self.health.succeeded()
        decision = replace(decision, name=step.rule.label)
        if isinstance(step.rule.limit, Concurrency) and decision.retry_after_ms > 1000:
            # The earliest lease's expiry is only the latest a slot frees: any request that ends
            # frees one sooner. Retry after 1 s, as the Node package's concurrencyLimit says.
            decision = replace(decision, retry_after_ms=1000)
        headers = decision.headers(legacy=self.legacy_headers)
        if decision.allowed:
            if step.rule.charge is not None:
                return Outcome(headers, decision, pending=step, request=request)
            return Outcome(headers, decision, lease=lease)
        if not isinstance(step.rule.limit, Concurrency):
            # A concurrency refusal is not cached: a release frees a slot before its retry time.
            self.cache.put(step.key, decision)
        return Outcome(headers, decision, Refusal(429, headers, step.rule.label, decision))

    def _failed(self, step: _Pending, exc: BaseException) -> Outcome:
        if isinstance(exc, OUTAGES):
            self.health.failed()
        else:
            self.health.succeeded()  # an error reply: the server is there
        return self._without_redis(step, exc)

    def _without_redis(self, step: _Pending, exc: Optional[BaseException]) -> Outcome:
        """The fallback's decision, else fail open or closed."""
        if self.fallback is not None:
            decision = self.fallback.check(
                step.key, step.rule.limit, tokens=step.cost, name=step.rule.label
            )
            if decision is not None:
                headers = decision.headers(legacy=self.legacy_headers)
                if decision.allowed:
                    return Outcome(headers, decision)
                return Outcome(headers, decision, Refusal(429, headers, step.rule.label, decision))
        fail_open = self.fail_open if step.rule.fail_open is None else step.rule.fail_open
        if exc is not None:
            log.warning(
                "rate limiter unavailable for %s (%s: %s): failing %s",
                step.rule.label,
                type(exc).__name__,
                exc,
                "open" if fail_open else "closed",
            )
        if fail_open:
            return Outcome({})
        headers = {"Retry-After": "1"}
        return Outcome(headers, None, Refusal(503, headers, step.rule.label))


def _charging(limiter: object) -> Any:
    """The limiter of a charge rule: its ``check`` takes ``peek`` and ``force`` as well
    (:class:`~redis_ratelimit.RateLimiter`, :class:`~redis_ratelimit.AsyncRateLimiter`)."""
    return limiter


def _cost_of(step: _Pending, outcome: Outcome, response: ResponseInfo) -> int:
    charge = step.rule.charge
    assert charge is not None and outcome.request is not None
    return int(charge(outcome.request, response))


_LEASE_METHODS = ("acquire", "renew", "release", "all")


def check_lease_limiter(limiter: object, rules: Iterable[Rule]) -> None:
    """``TypeError`` when a rule holds a concurrency limit and ``limiter`` has no lease
    operations (``acquire``, ``renew``, ``release``, ``all``)."""
    if any(isinstance(rule.limit, Concurrency) for rule in rules):
        missing = [m for m in _LEASE_METHODS if not callable(getattr(limiter, m, None))]
        if missing:
            raise TypeError(
                f"a Concurrency rule needs a limiter with {', '.join(_LEASE_METHODS)} "
                f"(RateLimiter / AsyncRateLimiter); {type(limiter).__name__} lacks "
                f"{', '.join(missing)}"
            )


def _lease_limiter(limiter: object) -> SyncLeaseLimiter:
    check_lease_limiter(limiter, [Rule(Concurrency(1, 1))])
    return limiter  # type: ignore[return-value]


def _async_lease_limiter(limiter: object) -> AsyncLeaseLimiter:
    check_lease_limiter(limiter, [Rule(Concurrency(1, 1))])
    return limiter  # type: ignore[return-value]


def _warn_unbounded(limiter: object) -> None:
    if getattr(limiter, "timeout_s", 0.0) is None:
        log.warning(
            "the rate limiter's Redis client has no socket timeout: a hung Redis holds every "
            "request; build it with RateLimiter.from_url(url) / AsyncRateLimiter.from_url(url) "
            "(0.25 s) or give redis-py socket_timeout=…"
        )


def _render(refusal: Refusal, render: Optional[Render]) -> Rendered:
    if render is None:
        return refusal.status, {"Content-Type": "text/plain", **refusal.headers}, refusal.body
    status, headers, body = render(refusal)
    return status, {**refusal.headers, **headers}, body


WSGIEnviron = Dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[WSGIEnviron, StartResponse], Iterable[bytes]]

_REASONS = {429: "Too Many Requests", 503: "Service Unavailable"}


class WSGIRateLimitMiddleware:
    """WSGI middleware over a sync :class:`~redis_ratelimit.RateLimiter`.

    The timeout is the limiter's client's: ``RateLimiter.from_url(url)`` (socket timeouts of
    0.25 s, no retries). ``render(refusal) -> (status, headers, body)`` renders refusals (default:
    ``text/plain``). Other options: :class:`RateLimitFlow`'s.
    """

    def __init__(
        self,
        app: WSGIApp,
        limiter: SyncLimiter,
        rules: Iterable[Rule],
        *,
        prefix: str = "rl:",
        fail_open: bool = True,
        cache_size: int = 10_000,
        legacy_headers: bool = False,
        fallback: Optional[MemoryFallback] = None,
        recheck_after_s: float = 1.0,
        recheck_max_s: float = 30.0,
        render: Optional[Render] = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.render = render
        self.flow = RateLimitFlow(
            rules,
            prefix=prefix,
            fail_open=fail_open,
            cache_size=cache_size,
            legacy_headers=legacy_headers,
            fallback=fallback,
            recheck_after_s=recheck_after_s,
            recheck_max_s=recheck_max_s,
        )
        check_lease_limiter(limiter, self.flow.rules)
        _warn_unbounded(limiter)

    @property
    def engine(self) -> Optional[str]:
        """The limiter's engine (``"module"``, ``"functions"``, ``"eval"``; ``None`` before the
        first call, or for a limiter that does not say)."""
        return getattr(self.limiter, "engine", None)

    def decide(self, request: RequestInfo) -> Optional[Outcome]:
        return self.flow.decide(self.limiter, request)

    def __call__(self, environ: WSGIEnviron, start_response: StartResponse) -> Iterable[bytes]:
        headers = {
            k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")
        }
        request = RequestInfo(
            environ.get("REQUEST_METHOD", "GET"),
            environ.get("PATH_INFO", "") or "/",
            headers,
            environ.get("REMOTE_ADDR"),
            environ.get("QUERY_STRING", ""),
        )
        outcome = self.decide(request)
        if outcome is None:
            return self.app(environ, start_response)
        if outcome.refusal is not None:
            status, out, body = _render(outcome.refusal, self.render)
            reason = _REASONS.get(status, "Refused")
            start_response(f"{status} {reason}", [*out.items(), ("Content-Length", str(len(body)))])
            return [body]
        extra = list(outcome.headers.items())
        started: List[ResponseInfo] = []

        def start(
            status: str, response_headers: List[Tuple[str, str]], exc_info: Any = None
        ) -> Any:
            if outcome.pending is not None:
                code = status.split(" ", 1)[0]
                headers = {k.lower(): v for k, v in response_headers}
                started[:] = [ResponseInfo(int(code) if code.isdigit() else 0, headers)]
            return start_response(status, list(response_headers) + extra, exc_info)

        if outcome.lease is None and outcome.pending is None:
            return self.app(environ, start)

        def done() -> None:
            self.flow.release(outcome)
            if started:
                self.flow.charge(self.limiter, outcome, started[0])

        try:
            app_body = self.app(environ, start)
        except BaseException:
            self.flow.release(outcome)
            raise
        return _ReleasingBody(app_body, done)


class _ReleasingBody:
    """A WSGI body that gives the request's slot back, and charges what the response cost, when
    the server closes it (PEP 3333: after the last chunk is sent, or when sending fails), after the
    app's own ``close``."""

    def __init__(self, body: Iterable[bytes], release: Callable[[], None]) -> None:
        self.body = body
        self._release: Optional[Callable[[], None]] = release

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        release, self._release = self._release, None
        try:
            close = getattr(self.body, "close", None)
            if callable(close):
                close()
        finally:
            if release is not None:
                release()


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ASGIRateLimitMiddleware:
    """ASGI middleware over an :class:`~redis_ratelimit.AsyncRateLimiter` (HTTP only; other
    scopes pass through). The timeout is the limiter's client's (``AsyncRateLimiter.from_url``:
    0.25 s). Refusals: ``render`` when given, else the wrapped Starlette/FastAPI app's exception
    handlers (see :mod:`redis_ratelimit.starlette`), else ``text/plain``. Other options:
    :class:`RateLimitFlow`'s."""

    def __init__(
        self,
        app: ASGIApp,
        limiter: AsyncLimiter,
        rules: Iterable[Rule],
        *,
        prefix: str = "rl:",
        fail_open: bool = True,
        cache_size: int = 10_000,
        legacy_headers: bool = False,
        fallback: Optional[MemoryFallback] = None,
        recheck_after_s: float = 1.0,
        recheck_max_s: float = 30.0,
        render: Optional[Render] = None,
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.render = render
        self.flow = RateLimitFlow(
            rules,
            prefix=prefix,
            fail_open=fail_open,
            cache_size=cache_size,
            legacy_headers=legacy_headers,
            fallback=fallback,
            recheck_after_s=recheck_after_s,
            recheck_max_s=recheck_max_s,
        )
        check_lease_limiter(limiter, self.flow.rules)
        _warn_unbounded(limiter)

    @property
    def engine(self) -> Optional[str]:
        """The limiter's engine (``"module"``, ``"functions"``, ``"eval"``; ``None`` before the
        first call, or for a limiter that does not say)."""
        return getattr(self.limiter, "engine", None)

    async def decide(self, request: RequestInfo) -> Optional[Outcome]:
        return await self.flow.decide_async(self.limiter, request)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []
        }
        client = scope.get("client")
        request = RequestInfo(
            scope.get("method", "GET"),
            scope.get("path", "/"),
            headers,
            client[0] if client else None,
            (scope.get("query_string") or b"").decode("latin-1"),
        )
        outcome = await self.decide(request)
        if outcome is None:
            await self.app(scope, receive, send)
            return
        if outcome.refusal is not None:
            if self.render is None and await self._app_handler(
                outcome.refusal, scope, receive, send
            ):
                return
            status, out, body = _render(outcome.refusal, self.render)
            raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in out.items()]
            raw.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": raw})
            await send({"type": "http.response.body", "body": body})
            return
        extra = [(k.lower().encode(), v.encode()) for k, v in outcome.headers.items()]
        held = outcome.lease is not None
        charged = outcome.pending is not None
        started: List[ResponseInfo] = []

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                if charged:
                    started.append(ResponseInfo(int(message.get("status", 0)), {
                        k.decode("latin-1").lower(): v.decode("latin-1")
                        for k, v in message.get("headers") or []
                    }))
                if extra:
                    message = dict(message, headers=list(message.get("headers") or []) + extra)
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                if held:
                    await self.flow.release_async(outcome)  # the body is done
                if started:
                    await self.flow.charge_async(self.limiter, outcome, started[0])

        if not held and not charged:
            await self.app(scope, receive, send_with_headers)
            return
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            await self.flow.release_async(outcome)  # once: a no-op after the last body
            if started:  # the app ended before its last body message: charge what started
                await self.flow.charge_async(self.limiter, outcome, started[0])

    async def _app_handler(
        self, refusal: Refusal, scope: Scope, receive: Receive, send: Send
    ) -> bool:
        """Renders ``refusal`` with the Starlette/FastAPI app's exception handlers, if it has
        one for it: True when it did."""
        app = scope.get("app") or self.app
        handlers = getattr(app, "exception_handlers", None)
        if not isinstance(handlers, dict) or not handlers:
            return False
        from starlette.requests import Request

        from .starlette import exception_for

        exc = exception_for(refusal)
        # As Starlette looks them up: by status code, then by the exception's classes.
        handler = handlers.get(refusal.status) or next(
            (handlers[c] for c in type(exc).__mro__ if c in handlers), None
        )
        if handler is None:
            return False
        response = handler(Request(scope, receive), exc)
        if inspect.isawaitable(response):
            response = await response
        for name, value in refusal.headers.items():
            if name.lower() not in response.headers:
                response.headers[name] = value
        await response(scope, receive, send)
        return True
