"""Limits (the algorithms' parameters), decisions and HTTP headers. No I/O here."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, TypedDict, Union

Number = Union[int, float]


def _num(value: Number) -> str:
    """A period for the module: seconds, as Redis parses floats (``repr`` keeps every digit)."""
    if isinstance(value, bool):
        raise TypeError("a period must be a number of seconds, not a bool")
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def _ceil_s(ms: int) -> int:
    """Milliseconds to whole seconds, rounded up (never earlier than the limiter allows)."""
    return -(-ms // 1000)


@dataclass(frozen=True)
class GCRA:
    """``RL.GCRA``: bursts of ``max_burst + 1``, then ``tokens_per_period`` per ``period`` seconds."""

    max_burst: int
    tokens_per_period: int
    period: Number
    keyword = "GCRA"

    def args(self) -> List[str]:
        return [str(self.max_burst), str(self.tokens_per_period), _num(self.period)]

    @property
    def quota(self) -> int:
        """The most tokens one request can take: ``max_burst + 1``."""
        return self.max_burst + 1

    @property
    def window_s(self) -> float:
        """Seconds in which ``quota`` tokens are replenished: ``quota × period / tokens_per_period``."""
        return (self.max_burst + 1) * float(self.period) / self.tokens_per_period


@dataclass(frozen=True)
class TokenBucket:
    """``RL.TOKENBUCKET``: ``capacity`` tokens, refilled at ``refill_tokens`` per ``refill_period`` s."""

    capacity: int
    refill_tokens: int
    refill_period: Number
    keyword = "TOKENBUCKET"

    def args(self) -> List[str]:
        return [str(self.capacity), str(self.refill_tokens), _num(self.refill_period)]

    @property
    def quota(self) -> int:
        return self.capacity

    @property
    def window_s(self) -> float:
        return self.capacity * float(self.refill_period) / self.refill_tokens


@dataclass(frozen=True)
class LeakyBucket:
    """``RL.LEAKYBUCKET``: a queue of ``capacity`` draining ``leak_tokens`` per ``leak_period`` s.

    Not accepted by ``all()`` (the module refuses it in ``RL.ALL``)."""

    capacity: int
    leak_tokens: int
    leak_period: Number
    keyword = "LEAKYBUCKET"

    def args(self) -> List[str]:
        return [str(self.capacity), str(self.leak_tokens), _num(self.leak_period)]

    @property
    def quota(self) -> int:
        return self.capacity

    @property
    def window_s(self) -> float:
        return self.capacity * float(self.leak_period) / self.leak_tokens


#: The calendar windows of ``RL.FIXEDWINDOW`` and their nominal length in seconds (for the
#: ``w`` of the headers and the in-memory fallback: a month or a day in a zone with daylight
#: saving is not always that long; the server's ``reset_after_ms`` is exact).
CALENDAR_UNITS: Dict[str, int] = {"DAY": 86400, "WEEK": 604800, "MONTH": 2592000,
                                  "YEAR": 31536000}


@dataclass(frozen=True)
class FixedWindow:
    """``RL.FIXEDWINDOW``: ``limit`` tokens per epoch-aligned window of ``window`` seconds, or per
    calendar window: ``window`` ``"day"``, ``"week"`` (ISO, from Monday), ``"month"`` or
    ``"year"``, from one local boundary to the next in ``tz`` (an IANA zone such as
    ``"Europe/Paris"``, or ``"+05:30"``; UTC by default): ``FixedWindow(1000, "month",
    tz="Europe/Paris")``."""

    limit: int
    window: Union[Number, str]
    tz: Optional[str] = None
    keyword = "FIXEDWINDOW"

    def __post_init__(self) -> None:
        if isinstance(self.window, str):
            if self.keyword != "FIXEDWINDOW" or self.window.upper() not in CALENDAR_UNITS:
                raise ValueError(
                    f"a window of {self.keyword} is a number of seconds"
                    + (", or day, week, month or year" if self.keyword == "FIXEDWINDOW" else "")
                    + f", not {self.window!r}")
        elif self.tz is not None:
            raise ValueError("tz takes a calendar window (day, week, month or year), "
                             "not one in seconds")

    @property
    def calendar(self) -> Optional[str]:
        """The calendar unit (``"MONTH"``…), or ``None`` for a window in seconds."""
        return self.window.upper() if isinstance(self.window, str) else None

    def args(self) -> List[str]:
        if isinstance(self.window, str):
            unit = [str(self.limit), self.window.upper()]
            return unit + (["TZ", self.tz] if self.tz is not None else [])
        return [str(self.limit), _num(self.window)]

    @property
    def quota(self) -> int:
        return self.limit

    @property
    def window_s(self) -> float:
        if isinstance(self.window, str):
            return float(CALENDAR_UNITS[self.window.upper()])
        return float(self.window)


_UNIT_SECONDS = {"second": 1, "sec": 1, "s": 1, "minute": 60, "min": 60, "m": 60,
                 "hour": 3600, "h": 3600, "day": 86400, "d": 86400, "week": 604800, "w": 604800,
                 "month": 0, "year": 0, "y": 0}
_CALENDAR_OF = {"day": "day", "d": "day", "week": "week", "w": "week", "month": "month",
                "year": "year", "y": "year"}
_RATE = re.compile(r"^\s*(\d+)\s*(?:/|per\s)\s*(\d+)?\s*([a-z]+?)s?\s*(?:@\s*(\S+))?\s*$", re.I)


def parse_limit(text: str) -> "FixedWindow":
    """A fixed window from the rule syntax ``"<n>/<unit>"`` (or ``"<n> per <unit>"``,
    ``"<n>/<k> <units>"``): ``"100/minute"`` is ``FixedWindow(100, 60)``; ``day``, ``week``,
    ``month`` and ``year`` are calendar windows, in UTC or in the zone after ``@``:
    ``"1000/month@Europe/Paris"`` is ``FixedWindow(1000, "month", tz="Europe/Paris")``;
    ``"10/2 days"`` is 172,800 seconds (a calendar window is one unit)."""
    m = _RATE.match(text)
    unit = m.group(3).lower() if m else ""
    if m is None or unit not in _UNIT_SECONDS:
        raise ValueError(f"a limit is '<n>/<unit>' (second, minute, hour, day, week, month, "
                         f"year), optionally '@<time zone>' for a calendar unit, not {text!r}")
    n, k, zone = int(m.group(1)), int(m.group(2) or 1), m.group(4)
    calendar = _CALENDAR_OF.get(unit)
    if k == 1 and calendar is not None:
        return FixedWindow(n, calendar, tz=zone)
    if zone is not None:
        raise ValueError(f"'@{zone}' takes one calendar unit (day, week, month, year): {text!r}")
    if _UNIT_SECONDS[unit] == 0:
        raise ValueError(f"months and years are calendar windows of one unit: {text!r}")
    return FixedWindow(n, k * _UNIT_SECONDS[unit])


@dataclass(frozen=True)
class SlidingWindow(FixedWindow):
    """``RL.SLIDINGWINDOW``: the sliding window counter, ``limit`` per ``window`` seconds."""

    keyword = "SLIDINGWINDOW"


@dataclass(frozen=True)
class SlidingLog(FixedWindow):
    """``RL.SLIDINGLOG``: the exact sliding log, ``limit`` (≤ 1000 by default) per ``window`` s."""

    keyword = "SLIDINGLOG"


@dataclass(frozen=True)
class Policy:
    """A server-side policy (``RL.POLICY SET``), used as ``POLICY name`` in ``all()``."""

    name: str
    keyword = "POLICY"

    def args(self) -> List[str]:
        return [self.name]

    @property
    def quota(self) -> Optional[int]:
        """Unknown to the client: the policy lives on the server."""
        return None

    @property
    def window_s(self) -> Optional[float]:
        return None


@dataclass(frozen=True)
class Concurrency:
    """``RL.CONCURRENCY``: at most ``limit`` slots held at once, each lease lasting ``lease``
    seconds from its acquisition or renewal unless released or renewed (docs/commands/
    rl.concurrency.md).

    ``lease_id`` names the lease a call acquires: needed where the limit goes into ``all()``
    (``CONCURRENCY limit lease ACQUIRE id``); left ``None`` in a middleware
    :class:`~redis_ratelimit.middleware.Rule` (each request takes a fresh id) and in
    ``policy_set``. Acquire, renew and release one with ``RateLimiter.concurrency()`` (a
    context manager) or ``acquire`` / ``renew`` / ``release``."""

    limit: int
    lease: Number
    lease_id: Optional[str] = None
    keyword = "CONCURRENCY"

    def args(self) -> List[str]:
        """The parameters, ``limit lease`` (without the operation)."""
        return [str(self.limit), _num(self.lease)]

    @property
    def quota(self) -> int:
        """The most slots held at once."""
        return self.limit

    @property
    def window_s(self) -> Optional[float]:
        """``None``: a concurrency limit has no window (and no in-memory fallback)."""
        return None


Limit = Union[GCRA, TokenBucket, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog, Policy,
              Concurrency]


class PolicyOptions(TypedDict):
    """A policy's modes, as ``RL.POLICY GET`` gives them: ``shadow`` (decide, never refuse),
    ``soft`` (percent over the limit still admitted, or ``None``), ``block`` (seconds a refusing
    key stays blocked, or ``None``)."""

    shadow: bool
    soft: Optional[int]
    block: Optional[Number]

COMMANDS: Dict[str, str] = {
    "GCRA": "RL.GCRA",
    "TOKENBUCKET": "RL.TOKENBUCKET",
    "LEAKYBUCKET": "RL.LEAKYBUCKET",
    "FIXEDWINDOW": "RL.FIXEDWINDOW",
    "SLIDINGWINDOW": "RL.SLIDINGWINDOW",
    "SLIDINGLOG": "RL.SLIDINGLOG",
    "CONCURRENCY": "RL.CONCURRENCY",
}

#: The operations of ``RL.CONCURRENCY`` on a lease.
LEASE_OPS = ("ACQUIRE", "RENEW", "RELEASE")


@dataclass(frozen=True)
class Decision:
    """One reply of the module.

    ``limited``: the request was refused (nothing was taken). ``limit``: the most tokens one
    request can take. ``remaining``: tokens left after this call. ``retry_after_ms``: -1 when
    allowed (for a leaky bucket, the delay before doing the work, ≥ 0), else the time until the
    same request would pass, or -1 when it never can (cost above ``limit``). ``reset_after_ms``:
    time until the limiter is full again. ``binding``: for ``all()``, the 0-based index of the
    limit that decided (the refusing one with the longest wait, else the one with the fewest
    ``remaining``); ``None`` for single limits. ``name`` and ``window_s`` only feed ``headers()``.
    """

    limited: bool
    limit: int
    remaining: int
    retry_after_ms: int
    reset_after_ms: int
    binding: Optional[int] = None
    name: str = "default"
    window_s: Optional[float] = field(default=None, compare=False)

    @property
    def allowed(self) -> bool:
        return not self.limited

    @property
    def retry_after_s(self) -> Optional[int]:
        """``Retry-After`` in whole seconds (rounded up, ≥ 1) for a refusal that can pass later."""
        if self.limited and self.retry_after_ms >= 0:
            return max(1, _ceil_s(self.retry_after_ms))
        return None

    def headers(self, name: Optional[str] = None, legacy: bool = False) -> Dict[str, str]:
        """HTTP headers for this decision.

        IETF (draft-ietf-httpapi-ratelimit-headers-10): ``RateLimit-Policy:
        "name";q=<limit>;w=<window s>`` (``w`` left out when the window is unknown, as for a
        policy) and ``RateLimit: "name";r=<remaining>;t=<s>`` (``t``: ``Retry-After`` on a refusal
        that can pass later, else seconds until full); ``Retry-After`` (seconds) on such a
        refusal; with ``legacy`` (off by default) also ``X-RateLimit-Limit/Remaining/Reset``.
        """
        label = name or self.name
        reset_s = _ceil_s(self.reset_after_ms)
        retry_s = self.retry_after_s
        policy = f'"{label}";q={self.limit}'
        if self.window_s is not None:
            policy += f";w={max(1, math.ceil(self.window_s))}"
        headers = {
            "RateLimit-Policy": policy,
            "RateLimit": f'"{label}";r={self.remaining};t={retry_s if retry_s is not None else reset_s}',
        }
        if legacy:
            headers["X-RateLimit-Limit"] = str(self.limit)
            headers["X-RateLimit-Remaining"] = str(self.remaining)
            headers["X-RateLimit-Reset"] = str(reset_s)
        if retry_s is not None:
            headers["Retry-After"] = str(retry_s)
        return headers


def options(tokens: int = 1, refund: Optional[int] = None, peek: bool = False,
            block: Optional[Number] = None, force: bool = False) -> List[str]:
    """The trailing options: ``TOKENS n`` (omitted for 1) or ``REFUND n``, ``FORCE`` (the cost
    recorded whatever the limit says), ``PEEK``, ``BLOCK s``."""
    if force and (peek or refund is not None):
        raise ValueError("force records a cost: it takes neither peek nor refund")
    out: List[str] = []
    if refund is not None:
        out += ["REFUND", str(refund)]
    elif tokens != 1:
        out += ["TOKENS", str(tokens)]
    if force:
        out.append("FORCE")
    if peek:
        out.append("PEEK")
    if block is not None:
        out += ["BLOCK", _num(block)]
    return out


def single_args(key: str, limit: Limit, opts: List[str]) -> List[str]:
    if isinstance(limit, Concurrency):
        if limit.lease_id is None:
            raise ValueError("a Concurrency limit needs a lease_id here (or use concurrency())")
        return concurrency_args(key, limit, "ACQUIRE", limit.lease_id, opts)
    if isinstance(limit, Policy):
        if any(o == "BLOCK" for o in opts):
            raise ValueError("BLOCK belongs to the policy: set it with policy_set(..., block=)")
        return ["RL.LIMIT", key, limit.name, *opts]
    return [COMMANDS[limit.keyword], key, *limit.args(), *opts]


def all_args(pairs: Sequence[Tuple[str, Limit]], opts: List[str], force: bool = False) -> List[str]:
    if not pairs:
        raise ValueError("all() needs at least one (key, limit)")
    if force and ("PEEK" in opts or "REFUND" in opts):
        raise ValueError("force records a cost: it takes neither peek nor refund")
    keys = [k for k, _ in pairs]
    limits: List[str] = []
    for _, limit in pairs:
        if isinstance(limit, LeakyBucket):
            raise ValueError("LEAKYBUCKET cannot be part of RL.ALL")
        limits += [limit.keyword, *limit.args()]
        if force and not isinstance(limit, Concurrency):
            limits.append("FORCE")
        if isinstance(limit, Concurrency):
            if limit.lease_id is None:
                raise ValueError("a Concurrency limit in all() needs its lease_id")
            if "REFUND" in opts:
                raise ValueError("REFUND does not apply to a Concurrency limit: release() it")
            limits += ["ACQUIRE", limit.lease_id]
    return ["RL.ALL", str(len(keys)), *keys, *limits, *opts]


def concurrency_args(key: str, limit: Concurrency, op: str, lease_id: str,
                     opts: List[str]) -> List[str]:
    """``RL.CONCURRENCY key limit lease ACQUIRE|RENEW|RELEASE id [options]`` (``TOKENS`` and
    ``BLOCK`` only for ``ACQUIRE``: the module refuses them elsewhere)."""
    if op not in LEASE_OPS:
        raise ValueError(f"the operation must be one of {', '.join(LEASE_OPS)}, not {op!r}")
    if "REFUND" in opts:
        raise ValueError("REFUND does not apply to a Concurrency limit: release() it")
    if not lease_id:
        raise ValueError("a lease id is 1 or more bytes")
    return ["RL.CONCURRENCY", key, *limit.args(), op, lease_id, *opts]


def parse(reply: Sequence[int], name: str, window_s: Optional[float]) -> Decision:
    limited, limit, remaining, retry_after_ms, reset_after_ms = (int(x) for x in reply[:5])
    binding = int(reply[5]) - 1 if len(reply) > 5 else None
    return Decision(bool(limited), limit, remaining, retry_after_ms, reset_after_ms, binding,
                    name, window_s)


def policy_set_args(name: str, limit: Limit, shadow: bool = False, soft: Optional[int] = None,
                    block: Optional[Number] = None) -> List[str]:
    if isinstance(limit, Policy):
        raise ValueError("a policy's limit is an algorithm, not another policy")
    args = ["RL.POLICY", "SET", name, limit.keyword, *limit.args()]
    if shadow:
        args.append("SHADOW")
    if soft is not None:
        args += ["SOFT", str(soft)]
    if block is not None:
        args += ["BLOCK", _num(block)]
    return args


# The number of parameters of each algorithm a policy can name.
_POLICY_ARITY: Dict[str, int] = {"GCRA": 3, "TOKENBUCKET": 3, "LEAKYBUCKET": 3,
                                 "FIXEDWINDOW": 2, "SLIDINGWINDOW": 2, "SLIDINGLOG": 2,
                                 "CONCURRENCY": 2}


def policy_from_words(words: Sequence[Union[bytes, str]]) -> Tuple[Limit, PolicyOptions]:
    """``RL.POLICY GET``'s words back into a limit and its options (shadow, soft, block).

    Raises ``ValueError`` on an algorithm this client does not know (a newer module's)."""
    w = [x.decode() if isinstance(x, bytes) else str(x) for x in words]
    kind = w[0].upper() if w else ""
    n = _POLICY_ARITY.get(kind)
    if n is None or len(w) < 1 + n:
        raise ValueError(
            f"RL.POLICY GET replied with an algorithm this client does not know: "
            f"{' '.join(w)!r} (known: {', '.join(_POLICY_ARITY)}); upgrade redis-ratelimit-client")
    p = w[1:1 + n]

    def number(s: str) -> Number:
        f = float(s)
        return int(f) if f.is_integer() and "." not in s and "e" not in s.lower() else f

    limit: Limit
    if kind == "GCRA":
        limit = GCRA(int(p[0]), int(p[1]), number(p[2]))
    elif kind == "TOKENBUCKET":
        limit = TokenBucket(int(p[0]), int(p[1]), number(p[2]))
    elif kind == "LEAKYBUCKET":
        limit = LeakyBucket(int(p[0]), int(p[1]), number(p[2]))
    elif kind == "FIXEDWINDOW":
        if p[1].upper() in CALENDAR_UNITS:
            zoned = len(w) > 2 + n and w[1 + n].upper() == "TZ"
            limit = FixedWindow(int(p[0]), p[1].lower(), tz=w[2 + n] if zoned else None)
            if zoned:
                w = w[:1 + n] + w[3 + n:]
        else:
            limit = FixedWindow(int(p[0]), number(p[1]))
    elif kind == "SLIDINGWINDOW":
        limit = SlidingWindow(int(p[0]), number(p[1]))
    elif kind == "CONCURRENCY":
        limit = Concurrency(int(p[0]), number(p[1]))
    else:
        limit = SlidingLog(int(p[0]), number(p[1]))
    opts: PolicyOptions = {"shadow": False, "soft": None, "block": None}
    rest = w[1 + n:]
    i = 0
    while i < len(rest):
        word = rest[i].upper()
        if word == "SHADOW":
            opts["shadow"] = True
        elif word == "SOFT":
            i += 1
            opts["soft"] = int(rest[i])
        elif word == "BLOCK":
            i += 1
            opts["block"] = number(rest[i])
        i += 1
    return limit, opts
