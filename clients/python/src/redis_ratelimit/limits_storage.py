"""Storages for the ``limits`` library (5.x), hence for flask-limiter and slowapi.

Importing this module (``import redis_ratelimit`` does it when ``limits`` is installed)
registers the URI schemes:

* ``redis+rl://``, ``rediss+rl://``, ``redis+rl+unix://`` → :class:`RateLimitStorage`
* ``redis+rl+cluster://host:port,host:port`` → :class:`RateLimitClusterStorage`
* ``async+redis+rl://``, ``async+rediss+rl://``, ``async+redis+rl+unix://`` →
  :class:`AsyncRateLimitStorage`; ``async+redis+rl+cluster://`` → :class:`AsyncRateLimitClusterStorage`

The rest of the URI is that of ``limits``' own Redis storages, plus two options of this package
(in the query string, or as keyword arguments: flask-limiter's ``storage_options``, slowapi's
``storage_options``), the same as the clients':

* ``engine=auto|module|functions|eval``: which engine decides (default ``auto``: the module
  when the server has it, else the Functions library, loaded by the storage, else ``EVALSHA``
  of the same code); the storage's ``engine`` attribute says which one is in use;
* ``clock=auto|server|caller``: whose clock the library reads (default ``auto``: the server's,
  this process's where the server refuses ``TIME`` in scripts, logged once);
* ``calendar=<zone>`` (``UTC``, ``Europe/Paris``, ``+05:30``): the fixed-window strategy's
  ``1/day``, ``1/month`` and ``1/year`` limits become calendar windows in that zone
  (``RL.FIXEDWINDOW <key>/rl.fixedwindow amount DAY|MONTH|YEAR TZ zone``: from midnight, the
  1st, January 1st, where ``limits`` counts 86,400 s, 30 days and 360 days from the first hit);
  refused hits are not counted. Other limits stay on ``limits``' INCR.

Strategies:

* ``moving-window`` → ``RL.SLIDINGLOG`` on ``<key>/rl.slidinglog`` (a sorted set);
* ``sliding-window-counter`` → ``RL.SLIDINGWINDOW`` on ``<key>/rl.slidingwindow`` (one string
  key instead of two; windows aligned to the Unix epoch, as ``limits``' memory and memcached
  storages align theirs: hence ``TimestampedSlidingWindow``);
* ``fixed-window`` stays on ``limits``' INCR + EXPIRE (``incr()`` is not given the limit), but
  with ``calendar=`` (above), where the key (``…/<amount>/1/month``) names the limit and unit.

``limits`` builds the same key for every strategy, hence the suffixes: a limiter's state never
meets another type's (``RL.*`` answers WRONGTYPE on a key of the wrong type).

**Fail fast.** Unless the URI or the options say otherwise, the client's socket timeouts are
0.25 s and redis-py's retries are off (``socket_timeout``, ``socket_connect_timeout``,
``retry``), so that a hung or absent Redis costs at most that per call, and flask-limiter's and
slowapi's ``swallow_errors`` / ``in_memory_fallback_enabled`` take over at once.

``limits`` has no plugin entry point: the schemes exist once this module is imported.
"""

from __future__ import annotations

import re
import time
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis.exceptions

from limits.aio.storage import RedisClusterStorage as _AioRedisClusterStorage
from limits.aio.storage import RedisStorage as _AioRedisStorage
from limits.storage import RedisClusterStorage as _RedisClusterStorage
from limits.storage import RedisStorage as _RedisStorage
from limits.storage.base import TimestampedSlidingWindow

from . import _commands
from ._core import FixedWindow, SlidingLog, SlidingWindow
from ._engine import TIME_REFUSED, AsyncEngine, ModuleRequiredError, SyncEngine, _State
from .client import DEFAULT_TIMEOUT_S, fail_fast

__all__ = [
    "RateLimitStorage",
    "RateLimitClusterStorage",
    "AsyncRateLimitStorage",
    "AsyncRateLimitClusterStorage",
]

MOVING_WINDOW_SUFFIX = "/rl.slidinglog"
SLIDING_WINDOW_SUFFIX = "/rl.slidingwindow"

# The clock these scripts read is the one the engine decides with: the caller's (NOW) when the
# engine passes it (ARGV's last, optional), else the server's, in µs; the module reads it in whole
# ms on Redis 7.0 (ARGV "module" = '1'), the Functions library in µs everywhere. So what they
# report agrees with what the engine decides.

# A log's entries in the window (now - window, now]: the count and the oldest timestamp, and now.
# Entries are scored in µs; the member "B" is a block, not an entry.
# ARGV: window_us, module ('1' or '0'), [now_us].
_MOVING_WINDOW_LUA = """
local now_us = tonumber(ARGV[3])
if not now_us then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if ARGV[2] == '1' and (redis.REDIS_VERSION_NUM or 0) < 0x070200 then now_us = now_us - now_us % 1000 end
end
local from = now_us - tonumber(ARGV[1])
local entries = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', from), '+inf', 'WITHSCORES')
local n, oldest = 0, false
for i = 1, #entries, 2 do
  if entries[i] ~= 'B' then
    n = n + 1
    if not oldest then oldest = entries[i + 1] end
  end
end
return {string.format('%.0f', now_us), n, oldest}
"""

# The clock (µs, as a string) and a sliding window counter's state. ARGV: module, [now_us].
_SLIDING_WINDOW_LUA = """
local now_us = tonumber(ARGV[2])
if not now_us then
  local t = redis.call('TIME')
  local usec = tonumber(t[2])
  if ARGV[1] == '1' and (redis.REDIS_VERSION_NUM or 0) < 0x070200 then usec = usec - usec % 1000 end
  now_us = tonumber(t[1]) * 1000000 + usec
end
return {string.format('%.0f', now_us), redis.call('GET', KEYS[1])}
"""

_ENGINE_OPTIONS = ("engine", "clock", "calendar")


def _engine_options(uri: str, options: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """``engine`` and ``clock`` taken out of the URI's query string and of ``options`` (a keyword
    argument wins over the URI): the URI left for redis-py, and those options."""
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    found = {k: v for k, v in query if k in _ENGINE_OPTIONS}
    if found:
        rest = [(k, v) for k, v in query if k not in _ENGINE_OPTIONS]
        uri = urlunsplit(parts._replace(query=urlencode(rest)))
    for k in _ENGINE_OPTIONS:
        if k in options:
            found[k] = options.pop(k)
    return uri, {"engine": found.get("engine", "auto"), "clock": found.get("clock", "auto"),
                 "logger": options.pop("logger", None), "calendar": found.get("calendar")}


# limits' key of a fixed-window item of one day, month or year: ``…/<amount>/1/<unit>``.
_CALENDAR_ITEM = re.compile(r"/(\d+)/1/(day|month|year)$")
CALENDAR_SUFFIX = "/rl.fixedwindow"


def _calendar_item(zone: Optional[str], key: str) -> Optional[FixedWindow]:
    """The calendar window standing for ``key``'s item under ``calendar=zone``, or ``None``."""
    m = _CALENDAR_ITEM.search(key) if zone else None
    return FixedWindow(int(m.group(1)), m.group(2), tz=zone) if m else None


def _count_after_take(window: FixedWindow, amount: int, reply: Any) -> int:
    """``incr()``'s count: what the window holds after an admitted take; a refusal (which took
    nothing) reads as over the limit."""
    d = _commands.check("", window).read(reply)
    return window.limit - d.remaining if d.allowed else window.limit + amount


def _count_at_peek(window: FixedWindow, reply: Any) -> int:
    """``get()``'s count from a ``PEEK`` (which answers what taking one more would leave)."""
    d = _commands.check("", window).read(reply)
    return window.limit - d.remaining - (1 if d.allowed else 0)


def _helper_args(state: _State, engine: str, args: List[Any]) -> List[Any]:
    """A helper script's ARGV: ``args``, whether the module decides, and the caller's clock when
    the engine passes it."""
    out = [*args, "1" if engine == "module" else "0"]
    if state.caller_clock:
        out.append(str(state.now()))
    return out


def _caller_clock_now(state: _State, exc: BaseException) -> bool:
    """After a helper script's error: whether it was ``TIME`` refused and the caller's clock now
    takes over (then the script is run again)."""
    if state.caller_clock or state.clock != "auto" or not TIME_REFUSED.search(str(exc)):
        return False
    state.use_caller_clock(str(exc))
    return True


def _strip_scheme(uri: str) -> str:
    """``redis+rl://…`` → ``redis://…`` (``+rl`` and ``async+`` dropped, unix kept)."""
    for old, new in (("rediss+rl://", "rediss://"), ("redis+rl+unix://", "redis+unix://"),
                     ("redis+rl+cluster://", "redis+cluster://"), ("redis+rl://", "redis://")):
        if uri.startswith(old):
            return new + uri[len(old):]
    return uri


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _moving_window(reply: Any) -> Tuple[float, int]:
    now_us, count, oldest = reply
    if not count:
        return int(_s(now_us)) / 1e6, 0
    return float(_s(oldest)) / 1e6, int(count)


def _sliding_window(reply: Any, expiry: int) -> Tuple[int, float, int, float]:
    """The state ``[B<until>;]<window_start_us>:<previous>:<current>`` read at the server's now,
    as ``limits`` wants it: (previous count, seconds its weight lasts, current count, seconds
    until it leaves the sliding window)."""
    now, state = reply
    if not state:
        return 0, 0.0, 0, 0.0
    now_us = int(_s(now))
    text = _s(state)
    if text.startswith("B"):
        text = text.split(";", 1)[1]
    start_s, prev_s, cur_s = text.split(":")[:3]
    start, previous, current = int(start_s), int(prev_s), int(cur_s)
    window_us = expiry * 1_000_000
    if now_us < start:  # the clock stepped back: read from the window's start, as the module
        elapsed = 0
    elif now_us < start + window_us:
        elapsed = now_us - start
    elif now_us < start + 2 * window_us:
        previous, current, elapsed = current, 0, now_us - start - window_us
    else:
        return 0, 0.0, 0, 0.0
    left = (window_us - elapsed) / 1e6
    return previous, left, current, left + expiry


def _acquired(reply: Any) -> bool:
    return int(reply[0]) == 0


def _moving_window_call(key: str, limit: int, expiry: int, amount: int) -> List[str]:
    return _commands.check(key, SlidingLog(limit, expiry), tokens=amount).args


def _sliding_window_call(key: str, limit: int, expiry: int, amount: int) -> List[str]:
    return _commands.check(key, SlidingWindow(limit, expiry), tokens=amount).args


class MovingWindowLimitTooLarge(redis.exceptions.ResponseError):
    """A ``moving-window`` limit above what ``RL.SLIDINGLOG`` takes on this server."""


def _too_large(limit: int, error: redis.exceptions.ResponseError) -> redis.exceptions.RedisError:
    """One message for the module's two refusals of a too-large log (above its
    ``sliding-log-max-limit``, or above the setting's own bound of 100000)."""
    text = str(error)
    if limit < 1 or not text.startswith("limit must be") or isinstance(error, ModuleRequiredError):
        return error
    return MovingWindowLimitTooLarge(
        f"moving-window limit {limit} is above what the module's RL.SLIDINGLOG takes on this "
        f"server (its setting sliding-log-max-limit: default 1000, at most 100000); use the "
        f"sliding-window-counter strategy for larger limits (the module said: {text})")


def _fail_fast_options(options: Dict[str, Any], asyncio: bool = False) -> Dict[str, Any]:
    """``limits``' options with this package's defaults: 0.25 s socket timeouts, no retries
    (values in the URI's query string still win: redis-py reads them last)."""
    return fail_fast(DEFAULT_TIMEOUT_S, options, asyncio=asyncio)


class _SyncMixin:
    """RL.* strategies for a sync ``limits`` Redis storage (``self.get_connection()``), through
    the engine in use (``self.engine``)."""

    lua_rl_moving_window: Any
    lua_rl_sliding_window: Any
    _rl: SyncEngine
    _calendar: Optional[str] = None

    def _init_engine(self, engine_options: Dict[str, Any]) -> None:
        self._calendar = engine_options.pop("calendar", None)
        self._rl = SyncEngine(lambda: self.get_connection(),  # type: ignore[attr-defined]
                              **engine_options)

    def _calendar_call(self, key: str, window: FixedWindow, **options: Any) -> Any:
        k = self.prefixed_key(key) + CALENDAR_SUFFIX  # type: ignore[attr-defined]
        return self._rl.execute(_commands.check(k, window, **options).args)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """``limits``' INCR, or with ``calendar=`` a calendar window's take (see the module)."""
        window = _calendar_item(self._calendar, key)
        if window is None:
            return int(super().incr(key, expiry, amount))  # type: ignore[misc]
        return _count_after_take(window, amount, self._calendar_call(key, window, tokens=amount))

    def get(self, key: str) -> int:
        window = _calendar_item(self._calendar, key)
        if window is None:
            return int(super().get(key))  # type: ignore[misc]
        return _count_at_peek(window, self._calendar_call(key, window, peek=True))

    def get_expiry(self, key: str) -> float:
        window = _calendar_item(self._calendar, key)
        if window is None:
            return float(super().get_expiry(key))  # type: ignore[misc]
        reply = self._calendar_call(key, window, peek=True)
        return time.time() + _commands.check("", window).read(reply).reset_after_ms / 1000

    @property
    def engine(self) -> Optional[str]:
        """The engine deciding: ``"module"``, ``"functions"`` or ``"eval"``; ``None`` until the
        first call has found it."""
        return self._rl.name

    def initialize_storage(self, uri: str) -> None:
        super().initialize_storage(uri)  # type: ignore[misc]
        conn = self.get_connection()  # type: ignore[attr-defined]
        self.lua_rl_moving_window = conn.register_script(_MOVING_WINDOW_LUA)
        self.lua_rl_sliding_window = conn.register_script(_SLIDING_WINDOW_LUA)

    def _helper(self, script: Any, keys: List[str], args: List[Any]) -> Any:
        engine = self._rl.ready()
        try:
            return script(keys, _helper_args(self._rl.state, engine, args))
        except redis.exceptions.ResponseError as exc:
            if not _caller_clock_now(self._rl.state, exc):
                raise
        return script(keys, _helper_args(self._rl.state, engine, args))

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        """``RL.SLIDINGLOG <key>/rl.slidinglog limit expiry [TOKENS amount]``: allowed?"""
        k = self.prefixed_key(key) + MOVING_WINDOW_SUFFIX  # type: ignore[attr-defined]
        try:
            reply = self._rl.execute(_moving_window_call(k, limit, expiry, amount))
        except redis.exceptions.ResponseError as exc:
            raise _too_large(limit, exc) from exc
        return _acquired(reply)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        """(oldest entry's time in s, entries) of the log's window at the engine's now."""
        k = self.prefixed_key(key) + MOVING_WINDOW_SUFFIX  # type: ignore[attr-defined]
        return _moving_window(self._helper(self.lua_rl_moving_window, [k], [expiry * 1_000_000]))

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                     amount: int = 1) -> bool:
        """``RL.SLIDINGWINDOW <key>/rl.slidingwindow limit expiry [TOKENS amount]``: allowed?"""
        k = self.prefixed_key(key) + SLIDING_WINDOW_SUFFIX  # type: ignore[attr-defined]
        reply = self._rl.execute(_sliding_window_call(k, limit, expiry, amount))
        return _acquired(reply)

    def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        k = self.prefixed_key(key) + SLIDING_WINDOW_SUFFIX  # type: ignore[attr-defined]
        return _sliding_window(self._helper(self.lua_rl_sliding_window, [k], []), expiry)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.get_connection().delete(  # type: ignore[attr-defined]
            self.prefixed_key(key) + SLIDING_WINDOW_SUFFIX)  # type: ignore[attr-defined]

    def clear(self, key: str) -> None:
        """Deletes the key of every strategy (fixed window, moving window, sliding window)."""
        p = self.prefixed_key(key)  # type: ignore[attr-defined]
        conn = self.get_connection()  # type: ignore[attr-defined]
        for k in (p, p + MOVING_WINDOW_SUFFIX, p + SLIDING_WINDOW_SUFFIX, p + CALENDAR_SUFFIX):
            conn.delete(k)


class RateLimitStorage(_SyncMixin, _RedisStorage, TimestampedSlidingWindow):
    """``limits`` storage on the redis-ratelimit module (or its Functions library):
    ``redis+rl://[:password]@host:port[/db]``, ``rediss+rl://`` (TLS),
    ``redis+rl+unix:///path/to/sock``. Options as ``limits``' ``RedisStorage`` (passed on to
    ``redis.from_url``), and ``engine``, ``clock`` (module docstring)."""

    STORAGE_SCHEME = ["redis+rl", "rediss+rl", "redis+rl+unix"]

    def __init__(self, uri: str, connection_pool: Any = None, key_prefix: str = _RedisStorage.PREFIX,
                 wrap_exceptions: bool = False, **options: Any) -> None:
        uri, engine_options = _engine_options(uri, options)
        self._init_engine(engine_options)
        super().__init__(_strip_scheme(uri), connection_pool=connection_pool,
                         key_prefix=key_prefix, wrap_exceptions=wrap_exceptions,
                         **_fail_fast_options(options))


class RateLimitClusterStorage(_SyncMixin, _RedisClusterStorage, TimestampedSlidingWindow):
    """``redis+rl+cluster://[:password]@host:port,host:port``: a Redis Cluster (the module on
    every node, or the Functions library, which the storage loads on every primary)."""

    STORAGE_SCHEME = ["redis+rl+cluster"]

    def __init__(self, uri: str, key_prefix: str = _RedisStorage.PREFIX,
                 wrap_exceptions: bool = False, **options: Any) -> None:
        uri, engine_options = _engine_options(uri, options)
        self._init_engine(engine_options)
        options.setdefault("socket_timeout", DEFAULT_TIMEOUT_S)
        options.setdefault("socket_connect_timeout", DEFAULT_TIMEOUT_S)
        super().__init__(_strip_scheme(uri), key_prefix=key_prefix,
                         wrap_exceptions=wrap_exceptions, **options)


class _AsyncMixin:
    """RL.* strategies for an async ``limits`` Redis storage (redis-py's asyncio client)."""

    bridge: Any
    _scripts: Optional[Tuple[Any, Any, Any]] = None
    _rl: AsyncEngine
    _calendar: Optional[str] = None

    def _init_engine(self, engine_options: Dict[str, Any]) -> None:
        self._calendar = engine_options.pop("calendar", None)
        self._rl = AsyncEngine(lambda: self._conn(), **engine_options)

    async def _calendar_call(self, key: str, window: FixedWindow, **options: Any) -> Any:
        k = self._rl_key(key, CALENDAR_SUFFIX)
        return await self._rl.execute(_commands.check(k, window, **options).args)

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        window = _calendar_item(self._calendar, key)
        if window is None:
            return int(await super().incr(key, expiry, amount))  # type: ignore[misc]
        reply = await self._calendar_call(key, window, tokens=amount)
        return _count_after_take(window, amount, reply)

    async def get(self, key: str) -> int:
        window = _calendar_item(self._calendar, key)
        if window is None:
            return int(await super().get(key))  # type: ignore[misc]
        return _count_at_peek(window, await self._calendar_call(key, window, peek=True))

    async def get_expiry(self, key: str) -> float:
        window = _calendar_item(self._calendar, key)
        if window is None:
            return float(await super().get_expiry(key))  # type: ignore[misc]
        reply = await self._calendar_call(key, window, peek=True)
        return time.time() + _commands.check("", window).read(reply).reset_after_ms / 1000

    @property
    def engine(self) -> Optional[str]:
        """The engine deciding: ``"module"``, ``"functions"`` or ``"eval"``; ``None`` until the
        first call has found it."""
        return self._rl.name

    def _conn(self) -> Any:
        return self.bridge.get_connection()

    async def _helper(self, which: int, keys: List[str], args: List[Any]) -> Any:
        engine = await self._rl.ready()
        try:
            return await self._script(which)(keys=keys,
                                             args=_helper_args(self._rl.state, engine, args))
        except redis.exceptions.ResponseError as exc:
            if not _caller_clock_now(self._rl.state, exc):
                raise
        return await self._script(which)(keys=keys, args=_helper_args(self._rl.state, engine, args))

    def _script(self, which: int) -> Any:
        """The registered scripts (``EVALSHA``, loaded once per server), for the current client."""
        conn = self._conn()
        if self._scripts is None or self._scripts[0] is not conn:
            self._scripts = (conn, conn.register_script(_MOVING_WINDOW_LUA),
                             conn.register_script(_SLIDING_WINDOW_LUA))
        return self._scripts[which]

    def _rl_key(self, key: str, suffix: str) -> str:
        return str(self.bridge.prefixed_key(key)) + suffix

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        try:
            reply = await self._rl.execute(_moving_window_call(
                self._rl_key(key, MOVING_WINDOW_SUFFIX), limit, expiry, amount))
        except redis.exceptions.ResponseError as exc:
            raise _too_large(limit, exc) from exc
        return _acquired(reply)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> Tuple[float, int]:
        reply = await self._helper(1, [self._rl_key(key, MOVING_WINDOW_SUFFIX)],
                                   [expiry * 1_000_000])
        return _moving_window(reply)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int,
                                           amount: int = 1) -> bool:
        reply = await self._rl.execute(_sliding_window_call(
            self._rl_key(key, SLIDING_WINDOW_SUFFIX), limit, expiry, amount))
        return _acquired(reply)

    async def get_sliding_window(self, key: str, expiry: int) -> Tuple[int, float, int, float]:
        reply = await self._helper(2, [self._rl_key(key, SLIDING_WINDOW_SUFFIX)], [])
        return _sliding_window(reply, expiry)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self._conn().delete(self._rl_key(key, SLIDING_WINDOW_SUFFIX))

    async def clear(self, key: str) -> None:
        conn = self._conn()
        for suffix in ("", MOVING_WINDOW_SUFFIX, SLIDING_WINDOW_SUFFIX, CALENDAR_SUFFIX):
            await conn.delete(self._rl_key(key, suffix))


def _async_uri(uri: str) -> str:
    return "async+" + _strip_scheme(uri[len("async+"):] if uri.startswith("async+") else uri)


class AsyncRateLimitStorage(_AsyncMixin, _AioRedisStorage, TimestampedSlidingWindow):
    """``limits.aio`` storage on the module: ``async+redis+rl://host:port`` (redis-py's asyncio
    client; ``implementation`` other than ``"redispy"`` is refused)."""

    STORAGE_SCHEME = ["async+redis+rl", "async+rediss+rl", "async+redis+rl+unix"]

    def __init__(self, uri: str, wrap_exceptions: bool = False, implementation: str = "redispy",
                 key_prefix: str = _AioRedisStorage.PREFIX, **options: Any) -> None:
        if implementation != "redispy":
            raise ValueError("AsyncRateLimitStorage runs on redis-py (implementation='redispy')")
        uri, engine_options = _engine_options(uri, options)
        self._init_engine(engine_options)
        super().__init__(_async_uri(uri), wrap_exceptions=wrap_exceptions,
                         implementation="redispy", key_prefix=key_prefix,
                         **_fail_fast_options(options, asyncio=True))


class AsyncRateLimitClusterStorage(_AsyncMixin, _AioRedisClusterStorage, TimestampedSlidingWindow):
    """``async+redis+rl+cluster://host:port,host:port``."""

    STORAGE_SCHEME = ["async+redis+rl+cluster"]

    def __init__(self, uri: str, wrap_exceptions: bool = False, implementation: str = "redispy",
                 key_prefix: str = _AioRedisStorage.PREFIX, **options: Any) -> None:
        if implementation != "redispy":
            raise ValueError("AsyncRateLimitClusterStorage runs on redis-py")
        uri, engine_options = _engine_options(uri, options)
        self._init_engine(engine_options)
        options.setdefault("socket_timeout", DEFAULT_TIMEOUT_S)
        options.setdefault("socket_connect_timeout", DEFAULT_TIMEOUT_S)
        super().__init__(_async_uri(uri), wrap_exceptions=wrap_exceptions,
                         implementation="redispy", key_prefix=key_prefix, **options)


