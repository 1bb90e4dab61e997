"""The engine that decides (issue 31): the module's commands when the server has the module, else
the Functions library (``functions/ratelimit.lua``, which the package carries as ``ratelimit.lua``
byte for byte: copied in when the package is built, hatch_build.py),
else the same code through ``EVALSHA``. Contract: docs/functions.md.

Every command of ``_commands`` is written in the module's words (``RL.GCRA key …``);
:class:`SyncEngine` / :class:`AsyncEngine` send it as is to the module, or turn it into ``FCALL``
or ``EVALSHA`` when the module is absent, keep the library loaded (after ``FUNCTION FLUSH``, a
failover, a restart, a new cluster node: "function not found" reloads it and the call is retried
once; ``NOSCRIPT`` sends the script whole once) and pass the caller's clock (``NOW <unix_µs>``)
where the server refuses ``TIME`` in scripts, logging that once. The Node package's
``lib/engine.js`` does the same, with the same option names and values.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type, Union

import redis.exceptions

__all__ = [
    "ENGINES",
    "CLOCKS",
    "LIBRARY_CODE",
    "LIBRARY_VERSION",
    "EVAL_BODY",
    "EVAL_SHA",
    "ModuleRequiredError",
    "SyncEngine",
    "AsyncEngine",
]


def _library_path() -> Path:
    """The repository's ``functions/ratelimit.lua`` when this is ``clients/python/src`` of a
    checkout (``PYTHONPATH=src``, an editable install), else the library the package carries
    (``redis_ratelimit/ratelimit.lua``, copied in when the package is built: hatch_build.py)."""
    here = Path(__file__).resolve().parent
    parents = list(here.parents)
    if [p.name for p in parents[:3]] == ["src", "python", "clients"] and len(parents) > 3:
        checkout = parents[3] / "functions" / "ratelimit.lua"
        if checkout.is_file():
            return checkout
    packaged = here / "ratelimit.lua"
    if packaged.is_file():
        return packaged
    raise RuntimeError(
        f"redis-ratelimit-client: the package has no {packaged} (the Functions library): "
        "reinstall it (pip install redis-ratelimit-client, or pip install ./clients/python "
        "from a checkout of the repository)")


#: The library: the file ``FUNCTION LOAD`` takes (first line ``#!lua name=ratelimit``).
LIBRARY_PATH = _library_path()
LIBRARY_CODE = LIBRARY_PATH.read_text(encoding="utf-8")
def _eval_form(code: str) -> str:
    """``code`` as the ``EVAL`` form (``EVAL_BODY``)."""
    kept, skipping = [], False
    for line in code[code.index("\n") + 1:].split("\n"):
        if line == "-- fast paths: begin":
            skipping = True
        if not skipping:
            kept.append(line)
        if line == "-- fast paths: end":
            skipping = False
    return "\n".join(kept)


#: The ``EVAL`` form: the same file without its first line and without its fast paths (the
#: lines from ``-- fast paths: begin`` to ``-- fast paths: end``, which the ``EVAL`` form
#: never runs); it dispatches on ``ARGV[1]``.
EVAL_BODY = _eval_form(LIBRARY_CODE)
EVAL_SHA = hashlib.sha1(EVAL_BODY.encode("utf-8")).hexdigest()


def _library_version(code: str) -> int:
    m = re.search(r"^local VERSION = (\d+)$", code, re.M)
    if m is None:
        raise RuntimeError(f"{LIBRARY_PATH} has no 'local VERSION = n' line")
    return int(m.group(1))


#: The embedded copy's version (``local VERSION = n``: what ``rl_version`` returns).
LIBRARY_VERSION = _library_version(LIBRARY_CODE)

#: The engines, in the order ``"auto"`` tries them.
ENGINES = ("module", "functions", "eval")
#: What the INFO line says of each engine (logger ``redis_ratelimit``).
ENGINE_DESCRIPTIONS = {
    "module": "the server has the redis-ratelimit module (RL.* commands)",
    "functions": "the Functions library 'ratelimit' by FCALL (loaded where it was absent or older "
                 f"than this package's version {LIBRARY_VERSION})",
    "eval": "the Functions library's code by EVALSHA",
}
#: The WARNING of a fall back to ``EVALSHA`` (``%s``: the server's refusal).
EVAL_FALLBACK = (
    "redis-ratelimit: engine 'eval': the server refused FUNCTION or FCALL (%s), so the library's "
    "code runs by EVALSHA, about 5x the instructions of FCALL. Remedy: an administrator loads "
    "the library once (make load-functions REDIS_URL=..., or redis-cli -x FUNCTION LOAD REPLACE "
    "< ratelimit.lua: docs/functions.md); users without FUNCTION then call it with FCALL"
)
#: Whose clock the library reads: ``"auto"`` (the server's, the caller's where the server
#: refuses ``TIME`` in scripts), ``"server"``, ``"caller"``.
CLOCKS = ("auto", "server", "caller")

Node = Any

# The library's function for each module command it offers.
FUNCTION_OF = {
    "RL.GCRA": "rl_gcra",
    "RL.TOKENBUCKET": "rl_tokenbucket",
    "RL.LEAKYBUCKET": "rl_leakybucket",
    "RL.FIXEDWINDOW": "rl_fixedwindow",
    "RL.SLIDINGWINDOW": "rl_slidingwindow",
    "RL.SLIDINGLOG": "rl_slidinglog",
    "CL.THROTTLE": "cl_throttle",
    "RL.ALL": "rl_all",
    "RL.CONCURRENCY": "rl_concurrency",
}

_FUNCTION_NOT_FOUND = re.compile(r"function not found", re.I)
_UNKNOWN_COMMAND = re.compile(r"unknown command", re.I)
# What a server answers when a script may not call TIME: ElastiCache Serverless ("ERR This Redis
# command is not allowed from script"), an ACL user without +time ("ERR The user executing the
# script can't run this command or subcommand"), other versions' wordings. The same as Node's.
TIME_REFUSED = re.compile(
    r"not allowed from scripts?|can't run this command|no permissions to run the 'time' command",
    re.I,
)
# Replies that say "not now" rather than "not allowed": detection is tried again on the next call.
_NOT_NOW = re.compile(r"^(LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|BUSY|READONLY|NOREPLICAS|OOM)\b")
_NOT_NOW_CLASSES = tuple(
    c
    for c in (
        getattr(redis.exceptions, name, None)
        for name in ("ReadOnlyError", "BusyLoadingError", "TryAgainError", "ClusterDownError",
                     "MasterDownError", "OutOfMemoryError")
    )
    if isinstance(c, type)
)


class ModuleRequiredError(redis.exceptions.ResponseError):
    """A command only the module has (server-side policies: ``RL.POLICY``, ``RL.LIMIT``), sent
    while the Functions library decides. A ``ResponseError``, as the module's absence always was:
    the middleware fails open or closed on it."""


def _not_now(exc: BaseException) -> bool:
    return isinstance(exc, _NOT_NOW_CLASSES) or bool(_NOT_NOW.match(str(exc)))


def _reply_error(exc: BaseException) -> bool:
    return isinstance(exc, redis.exceptions.ResponseError)


def caller_clock_us() -> int:
    """This process's clock: µs since the Unix epoch."""
    return time.time_ns() // 1000


@dataclass(frozen=True)
class LibraryCall:
    """A module command as a library call: the function, its keys and the rest."""

    fname: str
    keys: List[Any]
    rest: List[Any]


def is_module_command(args: Sequence[Any]) -> bool:
    return str(args[0]).upper().startswith(("RL.", "CL."))


def library_call(args: Sequence[Any]) -> LibraryCall:
    """``args`` (the module's words) as a library call; :class:`ModuleRequiredError` for a
    command the library does not have."""
    command = str(args[0]).upper()
    fname = FUNCTION_OF.get(command)
    if fname is None:
        raise ModuleRequiredError(
            f"{command} needs the redis-ratelimit module: server-side policies (RL.POLICY, "
            "RL.LIMIT) are module data, not in the Functions library (give the limit itself, "
            "or load the module)"
        )
    if fname == "rl_all":
        n = int(args[1])
        return LibraryCall(fname, list(args[2:2 + n]), list(args[2 + n:]))
    return LibraryCall(fname, [args[1]], list(args[2:]))


def library_command(engine: str, call: LibraryCall, now_us: Optional[int],
                    with_body: bool = False) -> List[Any]:
    """The command words of ``call`` through ``engine``: ``FCALL``, or ``EVALSHA`` (``EVAL``
    with the body when ``with_body``); ``NOW now_us`` last when given."""
    now = [] if now_us is None else ["NOW", str(now_us)]
    if engine == "functions":
        return ["FCALL", call.fname, len(call.keys), *call.keys, *call.rest, *now]
    return ["EVAL" if with_body else "EVALSHA", EVAL_BODY if with_body else EVAL_SHA,
            len(call.keys), *call.keys, call.fname, *call.rest, *now]


def _module_reply(reply: Any) -> bool:
    """``COMMAND INFO rl.gcra``'s raw reply: one nil for an unknown command."""
    return isinstance(reply, (list, tuple)) and len(reply) > 0 and reply[0] is not None


def _version(reply: Any) -> int:
    try:
        return int(reply)
    except (TypeError, ValueError):
        return 0


def _is_cluster(client: Any) -> bool:
    return callable(getattr(client, "get_primaries", None))


def _keyed_node(client: Any, args: Sequence[Any], keys: Sequence[Any]) -> Optional[Node]:
    """In a cluster, the primary that serves an ``FCALL``'s first key, or ``None`` (not a
    cluster, no key, an ``EVALSHA``, or unknown now). redis-py routes ``EVALSHA`` by its keys
    but asks a node ``COMMAND GETKEYS`` (twice) before each ``FCALL``, a command with movable
    keys: naming the node saves those round trips. redis-py still follows ``MOVED`` and ``ASK``
    from there."""
    if not keys or args[0] != "FCALL" or not _is_cluster(client):
        return None
    try:
        return client.get_node_from_key(keys[0])
    except (redis.exceptions.RedisError, LookupError, TypeError):
        return None


def _cluster_retry_errors(client: Any) -> Tuple[Type[BaseException], ...]:
    """The errors after which redis-py's cluster client retries a command it routed itself
    (it does not retry one sent to a named node)."""
    errors = getattr(type(client), "ERRORS_ALLOW_RETRY", ())
    return tuple(errors) if isinstance(errors, (tuple, list)) else ()


class _Attempt:
    """One library call and the recoveries it has used (each at most once): the library reloaded
    on "function not found", the script sent whole on ``NOSCRIPT``, the caller's clock where the
    server refuses ``TIME`` in scripts."""

    def __init__(self, state: "_State", engine: str, call: LibraryCall) -> None:
        self.state = state
        self.engine = engine
        self.call = call
        self.reloaded = False
        self.with_body = False
        self.time_refused: Optional[str] = None

    def command(self) -> List[Any]:
        with_now = self.state.caller_clock or self.time_refused is not None
        return library_command(self.engine, self.call, self.state.now() if with_now else None,
                               self.with_body)

    def succeeded(self) -> None:
        if self.time_refused is not None:
            self.state.use_caller_clock(self.time_refused)

    def recovery(self, exc: BaseException) -> Optional[str]:
        """``"reload"`` (load the library, then retry), ``"retry"``, or ``None`` (raise)."""
        if not _reply_error(exc):
            return None
        message = str(exc)
        if self.engine == "functions" and not self.reloaded and _FUNCTION_NOT_FOUND.search(message):
            self.reloaded = True
            return "reload"
        if (self.engine == "eval" and not self.with_body
                and isinstance(exc, redis.exceptions.NoScriptError)):
            self.with_body = True
            return "retry"
        with_now = self.state.caller_clock or self.time_refused is not None
        if not with_now and self.state.clock == "auto" and TIME_REFUSED.search(message):
            self.time_refused = message
            return "retry"
        return None

    def reload_failed(self, exc: BaseException) -> None:
        """``FUNCTION LOAD`` refused now (a failover to a server that refuses it): the ``EVAL``
        form, unless an engine was forced."""
        if self.state.forced is not None or not _reply_error(exc) or _not_now(exc):
            raise exc
        self.state.fallback_reason = str(exc)
        self.state.name = self.engine = "eval"
        self.state.announce("eval")


class _State:
    """What sync and asyncio engines share: the options, the engine in use, the clock."""

    def __init__(self, engine: str, clock: str, now: Optional[Callable[[], int]],
                 logger: Optional[logging.Logger]) -> None:
        if engine != "auto" and engine not in ENGINES:
            raise ValueError(
                f"engine must be 'auto', 'module', 'functions' or 'eval', not {engine!r}")
        if clock not in CLOCKS:
            raise ValueError(f"clock must be 'auto', 'server' or 'caller', not {clock!r}")
        self.forced: Optional[str] = None if engine == "auto" else engine
        self.clock = clock
        self.now: Callable[[], int] = now or caller_clock_us
        self.logger = logger or logging.getLogger("redis_ratelimit")
        #: The engine in use, or ``None`` before the first decision.
        self.name: Optional[str] = self.forced if self.forced in ("module", "eval") else None
        self.caller_clock = clock == "caller"
        #: Grows with every load of the library: a caller that met "function not found" reloads
        #: only if nobody did since it sent.
        self.loads = 0
        #: The engine last logged, and why the library's code runs by EVALSHA (the refusal).
        self.announced: Optional[str] = None
        self.fallback_reason: Optional[str] = None
        self.warned_eval = False

    def announce(self, name: str) -> str:
        """Logs the engine this client settled on, once (again only if it changes: a failover to
        a server without the module): at INFO, or at WARNING, once per client, for a fall back to
        ``EVALSHA`` with why and the remedy. Returns ``name``."""
        if name == self.announced:
            return name
        self.announced = name
        try:
            if name == "eval" and self.forced is None:
                if not self.warned_eval:
                    self.warned_eval = True
                    self.logger.warning(EVAL_FALLBACK, self.fallback_reason)
            else:
                self.logger.info("redis-ratelimit: engine %r: %s%s", name, ENGINE_DESCRIPTIONS[name],
                                 " (forced by the engine option)" if self.forced else "")
        except Exception:  # pragma: no cover - a logger's failure must not fail the decision
            pass
        return name

    def use_caller_clock(self, reason: str) -> None:
        if self.caller_clock:
            return
        self.caller_clock = True
        try:
            self.logger.warning(
                "redis-ratelimit: the server refuses TIME inside scripts (%s); the library's "
                "calls now carry this process's clock (NOW <unix_µs>): keep it NTP-synchronized",
                reason,
            )
        except Exception:  # pragma: no cover - a logger's failure must not fail the decision
            pass

    def after_detection_error(self, exc: BaseException) -> str:
        """The engine when loading the library failed with ``exc``: ``"eval"``, or raise."""
        if self.forced == "functions" or not _reply_error(exc) or _not_now(exc):
            raise exc
        self.fallback_reason = str(exc)
        return "eval"




class SyncEngine:
    """The engine of a sync client: ``client()`` gives the redis-py client (``redis.Redis`` or
    ``redis.RedisCluster``). ``engine``: ``"auto"`` | ``"module"`` | ``"functions"`` |
    ``"eval"``; ``clock``: ``"auto"`` | ``"server"`` | ``"caller"``; ``now()``: the caller's
    clock in µs; ``logger``: told once (warning) when the caller's clock takes over. Safe to
    share between threads."""

    def __init__(self, client: Callable[[], Any], *, engine: str = "auto", clock: str = "auto",
                 now: Optional[Callable[[], int]] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        self.client = client
        self.state = _State(engine, clock, now, logger)
        self._lock = threading.Lock()

    @property
    def name(self) -> Optional[str]:
        return self.state.name

    def _send(self, args: Sequence[Any], node: Optional[Node] = None) -> Any:
        if node is None:
            return self.client().execute_command(*args)
        return self.client().execute_command(*args, target_nodes=node)

    def _targets(self) -> List[Optional[Node]]:
        client = self.client()
        if _is_cluster(client):
            return list(client.get_primaries())
        return [None]

    def _send_keyed(self, args: Sequence[Any], keys: Sequence[Any]) -> Any:
        """A library call: to the primary of its key in a cluster (see ``_keyed_node``); where
        that node fails in a way redis-py would retry, once more with redis-py's own routing
        and retries, as a module command gets."""
        client = self.client()
        node = _keyed_node(client, args, keys)
        if node is not None:
            try:
                return client.execute_command(*args, target_nodes=node)
            except _cluster_retry_errors(client):
                pass
        return client.execute_command(*args)

    def ready(self) -> str:
        """The engine in use, found now if not yet (loading the library if needed)."""
        name = self.state.name
        if name is not None and name == self.state.announced:
            return name
        with self._lock:
            if self.state.name is None:
                self.state.name = self._detect()
            return self.state.announce(self.state.name)

    def _detect(self) -> str:
        targets = self._targets()
        if self.state.forced is None:
            try:
                if _module_reply(self._send(["COMMAND INFO", "rl.gcra"], targets[0])):
                    return "module"
            except redis.exceptions.ResponseError as exc:
                if _not_now(exc):  # CLUSTERDOWN, TRYAGAIN, …: asked again on the next call
                    raise
                # COMMAND refused: no module for us
        try:
            self._load_library(targets)
        except redis.exceptions.RedisError as exc:
            return self.state.after_detection_error(exc)
        return "functions"

    def _load_library(self, targets: Optional[List[Optional[Node]]] = None) -> None:
        """On every primary (or the one server): ``FCALL_RO rl_version 0``; where the library is
        absent or older than the embedded copy, ``FUNCTION LOAD REPLACE``."""
        for node in targets if targets is not None else self._targets():
            try:
                version = _version(self._send(["FCALL_RO", "rl_version", 0], node))
            except redis.exceptions.ResponseError as exc:
                if not _FUNCTION_NOT_FOUND.search(str(exc)):
                    raise
                version = 0
            if version < LIBRARY_VERSION:
                self._send(["FUNCTION", "LOAD", "REPLACE", LIBRARY_CODE], node)
        self.state.loads += 1

    def _reload(self, loads_seen: int) -> None:
        with self._lock:
            if self.state.loads == loads_seen:  # nobody reloaded since this call was sent
                self._load_library()

    def execute(self, args: Sequence[Any]) -> Any:
        """Sends one command (the module's words) through the engine in use."""
        if not is_module_command(args):
            return self._send(args)
        engine = self.ready()
        if engine == "module":
            try:
                return self._send(args)
            except redis.exceptions.ResponseError as exc:
                # The module went away (a failover to a server without it): find the engine again.
                if self.state.forced is not None or not _UNKNOWN_COMMAND.search(str(exc)):
                    raise
                with self._lock:
                    if self.state.name == "module":
                        self.state.name = None
                engine = self.ready()
                if engine == "module":
                    raise
        attempt = _Attempt(self.state, engine, library_call(args))
        while True:
            loads = self.state.loads
            try:
                reply = self._send_keyed(attempt.command(), attempt.call.keys)
            except redis.exceptions.RedisError as exc:
                step = attempt.recovery(exc)
                if step is None:
                    raise
                if step == "reload":
                    try:
                        self._reload(loads)
                    except redis.exceptions.RedisError as load_exc:
                        attempt.reload_failed(load_exc)
                continue
            attempt.succeeded()
            return reply


class AsyncEngine:
    """:class:`SyncEngine` for redis-py's asyncio clients (``redis.asyncio.Redis`` or its
    ``RedisCluster``)."""

    def __init__(self, client: Callable[[], Any], *, engine: str = "auto", clock: str = "auto",
                 now: Optional[Callable[[], int]] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        self.client = client
        self.state = _State(engine, clock, now, logger)
        # One detection or reload at a time, per event loop (a lock binds to its loop).
        self._locks: "dict[int, Any]" = {}

    @property
    def name(self) -> Optional[str]:
        return self.state.name

    def _lock(self) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        lock = self._locks.get(id(loop))
        if lock is None or lock[0] is not loop:
            lock = (loop, asyncio.Lock())
            self._locks = {id(loop): lock}  # the last loop's only: loops come and go in tests
        return lock[1]

    async def _send(self, args: Sequence[Any], node: Optional[Node] = None) -> Any:
        if node is None:
            return await self.client().execute_command(*args)
        return await self.client().execute_command(*args, target_nodes=node)

    async def _targets(self) -> List[Optional[Node]]:
        client = self.client()
        if _is_cluster(client):
            if not client.get_primaries():
                await client.initialize()
            return list(client.get_primaries())
        return [None]

    async def _send_keyed(self, args: Sequence[Any], keys: Sequence[Any]) -> Any:
        client = self.client()
        node = _keyed_node(client, args, keys)
        if node is not None:
            try:
                return await client.execute_command(*args, target_nodes=node)
            except _cluster_retry_errors(client):
                pass
        return await client.execute_command(*args)

    async def ready(self) -> str:
        """The engine in use, found now if not yet (loading the library if needed)."""
        name = self.state.name
        if name is not None and name == self.state.announced:
            return name
        async with self._lock():
            if self.state.name is None:
                self.state.name = await self._detect()
            return self.state.announce(self.state.name)

    async def _detect(self) -> str:
        targets = await self._targets()
        if self.state.forced is None:
            try:
                if _module_reply(await self._send(["COMMAND INFO", "rl.gcra"], targets[0])):
                    return "module"
            except redis.exceptions.ResponseError as exc:
                if _not_now(exc):
                    raise
        try:
            await self._load_library(targets)
        except redis.exceptions.RedisError as exc:
            return self.state.after_detection_error(exc)
        return "functions"

    async def _load_library(self, targets: Optional[List[Optional[Node]]] = None) -> None:
        for node in targets if targets is not None else await self._targets():
            try:
                version = _version(await self._send(["FCALL_RO", "rl_version", 0], node))
            except redis.exceptions.ResponseError as exc:
                if not _FUNCTION_NOT_FOUND.search(str(exc)):
                    raise
                version = 0
            if version < LIBRARY_VERSION:
                await self._send(["FUNCTION", "LOAD", "REPLACE", LIBRARY_CODE], node)
        self.state.loads += 1

    async def _reload(self, loads_seen: int) -> None:
        async with self._lock():
            if self.state.loads == loads_seen:
                await self._load_library()

    async def execute(self, args: Sequence[Any]) -> Any:
        """Sends one command (the module's words) through the engine in use."""
        if not is_module_command(args):
            return await self._send(args)
        engine = await self.ready()
        if engine == "module":
            try:
                return await self._send(args)
            except redis.exceptions.ResponseError as exc:
                if self.state.forced is not None or not _UNKNOWN_COMMAND.search(str(exc)):
                    raise
                if self.state.name == "module":
                    self.state.name = None
                engine = await self.ready()
                if engine == "module":
                    raise
        attempt = _Attempt(self.state, engine, library_call(args))
        while True:
            loads = self.state.loads
            try:
                reply = await self._send_keyed(attempt.command(), attempt.call.keys)
            except redis.exceptions.RedisError as exc:
                step = attempt.recovery(exc)
                if step is None:
                    raise
                if step == "reload":
                    try:
                        await self._reload(loads)
                    except redis.exceptions.RedisError as load_exc:
                        attempt.reload_failed(load_exc)
                continue
            attempt.succeeded()
            return reply


EngineLike = Union[SyncEngine, AsyncEngine]
