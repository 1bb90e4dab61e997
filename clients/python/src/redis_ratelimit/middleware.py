"""ASGI and WSGI middleware: per-route rules, key functions, fail-open/fail-closed, and a local
cache of denials.

    app = ASGIRateLimitMiddleware(app, AsyncRateLimiter(redis.asyncio.Redis(...)), rules=[
        Rule(GCRA(4, 10, 1), path="/api/", key=header_key("x-api-key")),
        Rule(SlidingLog(5, 60), path="/login", methods={"POST"}, fail_open=False),
    ])

The first rule whose ``path`` (a prefix, or a regular expression when it starts with ``^``) and
``methods`` match decides; a request no rule matches, or whose key function returns ``None``,
passes untouched. Allowed responses get the rate-limit headers (:meth:`Decision.headers`);
refusals get 429 with them and ``Retry-After`` when a retry can pass (a cost above the limit gets
429 without it). When Redis fails (connection refused, a timeout, a server without the module,
any Redis error) the rule fails open (the request passes, without headers) or closed (503 with
``Retry-After: 1``); it is never a 500. A refusal is remembered in memory until its
``retry_after_ms``: the same key is answered 429 without asking Redis.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import (
    Any,
    Awaitable,
    Callable,
    Collection,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    Union,
)

import redis.exceptions

from ._core import Decision, Limit, Policy

log = logging.getLogger("redis_ratelimit")

__all__ = [
    "RequestInfo",
    "Rule",
    "Outcome",
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


@dataclass
class Rule:
    """One rate limit on the requests it matches.

    ``limit``: an algorithm and its parameters (``GCRA(4, 10, 1)``) or a server-side
    ``Policy("name")``. ``path``: a prefix, or a regular expression when it starts with ``^``.
    ``methods``: upper-case methods, or ``None`` for all. ``key``: the requester's identity
    (``None`` exempts the request). ``cost``: tokens per request, or a function of the request.
    ``name``: the label in the headers and in the Redis key (default: the path).
    ``fail_open``: overrides the middleware's setting.
    """

    limit: Limit
    path: str = "/"
    methods: Optional[Collection[str]] = None
    key: KeyFunc = client_ip
    cost: Union[int, Callable[[RequestInfo], int]] = 1
    name: Optional[str] = None
    fail_open: Optional[bool] = None
    _regex: Optional["re.Pattern[str]"] = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.path.startswith("^"):
            self._regex = re.compile(self.path)
        if self.methods is not None:
            self.methods = {m.upper() for m in self.methods}
        if self.name is None:
            self.name = self.limit.name if isinstance(self.limit, Policy) else self.path

    def matches(self, request: RequestInfo) -> bool:
        if self.methods is not None and request.method.upper() not in self.methods:
            return False
        if self._regex is not None:
            return self._regex.match(request.path) is not None
        return request.path.startswith(self.path)


@dataclass(frozen=True)
class Outcome:
    """What to answer: ``status`` ``None`` means "pass the request on" (adding ``headers``)."""

    status: Optional[int]
    headers: Dict[str, str]
    decision: Optional[Decision] = None
    cached: bool = False

    @property
    def body(self) -> bytes:
        return b"Too Many Requests\n" if self.status == 429 else b"Service Unavailable\n"


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
        return replace(decision, remaining=0, retry_after_ms=left_ms,
                       reset_after_ms=max(decision.reset_after_ms, left_ms))

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


class _Engine:
    """The decisions shared by the WSGI and ASGI middleware and the FastAPI dependency."""

    def __init__(self, rules: Iterable[Rule], *, prefix: str = "rl:", fail_open: bool = True,
                 timeout_s: float = 0.5, cache_size: int = 10_000,
                 legacy_headers: bool = True) -> None:
        self.rules: List[Rule] = list(rules)
        self.prefix = prefix
        self.fail_open = fail_open
        self.timeout_s = timeout_s
        self.legacy_headers = legacy_headers
        self.cache = DenialCache(cache_size)

    def plan(self, request: RequestInfo) -> Optional[Tuple[Rule, str, int]]:
        """(rule, Redis key, cost) for this request, or ``None`` when no rule applies."""
        for rule in self.rules:
            if rule.matches(request):
                planned = self.plan_for(rule, request)
                return None if planned is None else (rule, *planned)
        return None

    def plan_for(self, rule: Rule, request: RequestInfo) -> Optional[Tuple[str, int]]:
        """(Redis key, cost) of ``rule`` for this request; ``None`` when its key is ``None``."""
        ident = rule.key(request)
        if ident is None:
            return None
        cost = rule.cost(request) if callable(rule.cost) else rule.cost
        return f"{self.prefix}{rule.name}:{ident}", cost

    def cached(self, key: str) -> Optional[Outcome]:
        decision = self.cache.get(key)
        if decision is None:
            return None
        return Outcome(429, decision.headers(legacy=self.legacy_headers), decision, cached=True)

    def decided(self, rule: Rule, key: str, decision: Decision) -> Outcome:
        decision = replace(decision, name=rule.name or decision.name)
        headers = decision.headers(legacy=self.legacy_headers)
        if decision.allowed:
            return Outcome(None, headers, decision)
        self.cache.put(key, decision)
        return Outcome(429, headers, decision)

    def failed(self, rule: Rule, exc: BaseException) -> Outcome:
        fail_open = self.fail_open if rule.fail_open is None else rule.fail_open
        log.warning("rate limiter unavailable for %s (%s: %s): failing %s", rule.name,
                    type(exc).__name__, exc, "open" if fail_open else "closed")
        if fail_open:
            return Outcome(None, {})
        return Outcome(503, {"Retry-After": "1"})


# Every failure of the limiter that fails open or closed (never a 500): Redis errors (connection
# refused, timeouts, "unknown command" from a server without the module, …), socket errors and
# asyncio timeouts.
FAILURES: Tuple[Type[BaseException], ...] = (
    redis.exceptions.RedisError, OSError, asyncio.TimeoutError, TimeoutError)


class WSGIRateLimitMiddleware:
    """WSGI middleware over a sync :class:`~redis_ratelimit.RateLimiter`.

    The timeout is the redis-py client's: build the limiter with
    ``RateLimiter.from_url(url, timeout_s=0.5)`` (socket timeouts, no retries; redis-py 7's
    default retries with backoff take seconds before a dead server is reported). Options: ``prefix`` (of Redis keys, default ``"rl:"``),
    ``fail_open`` (default True), ``cache_size`` (denials kept in memory, 0 disables),
    ``legacy_headers`` (``X-RateLimit-*``, default True).
    """

    def __init__(self, app: Callable[..., Any], limiter: Any, rules: Iterable[Rule],
                 **options: Any) -> None:
        self.app = app
        self.limiter = limiter
        self.engine = _Engine(rules, **options)

    def decide(self, request: RequestInfo) -> Optional[Outcome]:
        plan = self.engine.plan(request)
        if plan is None:
            return None
        rule, key, cost = plan
        outcome = self.engine.cached(key)
        if outcome is not None:
            return outcome
        try:
            decision = self.limiter.check(key, rule.limit, tokens=cost, name=rule.name)
        except FAILURES as exc:
            return self.engine.failed(rule, exc)
        return self.engine.decided(rule, key, decision)

    def __call__(self, environ: Dict[str, Any], start_response: Callable[..., Any]) -> Any:
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items()
                   if k.startswith("HTTP_")}
        request = RequestInfo(environ.get("REQUEST_METHOD", "GET"),
                              environ.get("PATH_INFO", "") or "/", headers,
                              environ.get("REMOTE_ADDR"), environ.get("QUERY_STRING", ""))
        outcome = self.decide(request)
        if outcome is None:
            return self.app(environ, start_response)
        if outcome.status is not None:
            body = outcome.body
            start_response(f"{outcome.status} {'Too Many Requests' if outcome.status == 429 else 'Service Unavailable'}",
                           [("Content-Type", "text/plain"), ("Content-Length", str(len(body))),
                            *outcome.headers.items()])
            return [body]
        extra = list(outcome.headers.items())

        def start(status: str, response_headers: List[Tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, list(response_headers) + extra, exc_info)

        return self.app(environ, start)


class ASGIRateLimitMiddleware:
    """ASGI middleware over an :class:`~redis_ratelimit.AsyncRateLimiter` (HTTP only; other
    scopes pass through). ``timeout_s`` (default 0.5) bounds each decision
    (``asyncio.wait_for``); other options as :class:`WSGIRateLimitMiddleware`'s."""

    def __init__(self, app: Callable[..., Awaitable[None]], limiter: Any, rules: Iterable[Rule],
                 **options: Any) -> None:
        self.app = app
        self.limiter = limiter
        self.engine = _Engine(rules, **options)

    async def decide(self, request: RequestInfo) -> Optional[Outcome]:
        plan = self.engine.plan(request)
        if plan is None:
            return None
        rule, key, cost = plan
        outcome = self.engine.cached(key)
        if outcome is not None:
            return outcome
        try:
            decision = await asyncio.wait_for(
                self.limiter.check(key, rule.limit, tokens=cost, name=rule.name),
                self.engine.timeout_s)
        except FAILURES as exc:
            return self.engine.failed(rule, exc)
        return self.engine.decided(rule, key, decision)

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        client = scope.get("client")
        request = RequestInfo(scope.get("method", "GET"), scope.get("path", "/"), headers,
                              client[0] if client else None,
                              (scope.get("query_string") or b"").decode("latin-1"))
        outcome = await self.decide(request)
        if outcome is None:
            await self.app(scope, receive, send)
            return
        if outcome.status is not None:
            body = outcome.body
            raw = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
            raw += [(k.lower().encode(), v.encode()) for k, v in outcome.headers.items()]
            await send({"type": "http.response.start", "status": outcome.status, "headers": raw})
            await send({"type": "http.response.body", "body": body})
            return
        extra = [(k.lower().encode(), v.encode()) for k, v in outcome.headers.items()]

        async def send_with_headers(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and extra:
                message = dict(message, headers=list(message.get("headers") or []) + extra)
            await send(message)

        await self.app(scope, receive, send_with_headers)
