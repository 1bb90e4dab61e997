"""The engines (issue 31): the module where the server has it, else the Functions library (loaded
by the client), else EVALSHA of the same code; `engine` says which; recovery after FUNCTION FLUSH,
SCRIPT FLUSH or a restart costs no request; the caller's clock where TIME is refused in scripts;
a Redis Cluster of three primaries. These tests start their own servers (with and without the
module), so they hold whichever engine the rest of the suite runs on."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import redis
import redis.asyncio
from fastapi import FastAPI, Request  # at module level: FastAPI resolves the handler's annotations

import redis_ratelimit
from redis_ratelimit import (
    GCRA,
    LIBRARY_VERSION,
    AsyncRateLimiter,
    FixedWindow,
    ModuleRequiredError,
    RateLimiter,
    SlidingLog,
    SlidingWindow,
)
from redis_ratelimit._engine import EVAL_SHA, LIBRARY_CODE, LIBRARY_PATH, TIME_REFUSED
from tests.helpers import Cluster, RedisServer, calls

REPOSITORY_LIBRARY = Path(__file__).resolve().parents[3] / "functions" / "ratelimit.lua"
NO_SCRIPTS = [arg for command in ("FUNCTION", "FCALL", "FCALL_RO", "EVAL", "EVALSHA", "SCRIPT")
              for arg in ("--rename-command", command, "")]


def test_the_installed_package_carries_the_repository_file() -> None:
    """make test-python installs the package with ``pip install ./clients/python``: its build hook
    (hatch_build.py) copies the one library in (scripts/check-python-artifacts.sh checks the wheel
    and the sdist)."""
    if not REPOSITORY_LIBRARY.exists():
        pytest.skip("not in the repository (an sdist): nothing to compare with")
    assert LIBRARY_PATH.read_bytes() == REPOSITORY_LIBRARY.read_bytes(), (
        f"{LIBRARY_PATH} differs from {REPOSITORY_LIBRARY}: reinstall the package "
        "(pip install ./clients/python)")
    assert LIBRARY_CODE.startswith("#!lua name=ratelimit\n")


@pytest.fixture(scope="module")
def plain() -> Iterator[RedisServer]:
    """A server without the module."""
    with RedisServer(module=False) as s:
        yield s


@pytest.fixture(scope="module")
def with_module() -> Iterator[RedisServer]:
    with RedisServer(module=True) as s:
        yield s


def client(server: RedisServer, **options: Any) -> redis.Redis:
    return redis.Redis("127.0.0.1", server.port, socket_timeout=5, **options)


@pytest.fixture
def p(plain: RedisServer) -> Iterator[redis.Redis]:
    c = client(plain)
    c.flushall()
    c.function_flush()
    c.script_flush()
    yield c
    c.close()


@pytest.fixture
def m(with_module: RedisServer) -> Iterator[redis.Redis]:
    c = client(with_module)
    c.flushall()
    c.function_flush()
    c.script_flush()
    yield c
    c.close()


def libraries(c: redis.Redis) -> List[str]:
    """The names of the libraries on the server (FUNCTION LIST, RESP2's flat pairs)."""
    names = []
    for lib in c.execute_command("FUNCTION", "LIST"):
        fields = dict(zip(lib[::2], lib[1::2])) if isinstance(lib, list) else lib
        name = fields.get(b"library_name", fields.get("library_name"))
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


# ---------------------------------------------------------------- the choice and `engine`


def test_the_module_where_the_server_has_it_and_no_library_loaded(m: redis.Redis) -> None:
    rl = RateLimiter(m)
    assert rl.engine is None  # not found before the first call
    assert rl.gcra("k", 1, 1, 1).allowed
    assert rl.engine == "module"
    assert libraries(m) == []


def test_without_the_module_the_library_loaded_by_the_client(p: redis.Redis) -> None:
    rl = RateLimiter(p)
    assert rl.engine is None
    assert [rl.gcra("k", 1, 1, 60).allowed for _ in range(3)] == [True, True, False]
    assert rl.engine == "functions"
    assert libraries(p) == ["ratelimit"]
    assert p.fcall_ro("rl_version", 0) == LIBRARY_VERSION
    # The module's keys: a GCRA state is a string.
    assert p.type("k") == b"string"


def test_ready_finds_the_engine_without_a_decision(p: redis.Redis, m: redis.Redis) -> None:
    assert RateLimiter(p).ready() == "functions"
    assert RateLimiter(m).ready() == "module"
    assert RateLimiter(m, engine="eval").engine == "eval"  # forced: known at once
    assert asyncio.run(AsyncRateLimiter(redis.asyncio.Redis(
        port=p.connection_pool.connection_kwargs["port"])).ready()) == "functions"


def test_eval_forced_runs_the_same_code_by_evalsha(p: redis.Redis) -> None:
    rl = RateLimiter(p, engine="eval")
    assert [rl.sliding_log("s", 2, 60).allowed for _ in range(3)] == [True, True, False]
    assert rl.engine == "eval"
    assert libraries(p) == []
    assert p.script_exists(EVAL_SHA) == [True]


def test_functions_forced_beside_the_module_decides_on_the_same_keys(m: redis.Redis) -> None:
    via_module = RateLimiter(m, engine="module")
    via_library = RateLimiter(m, engine="functions")
    assert via_module.fixed_window("w", 3, 60).remaining == 2
    assert via_library.fixed_window("w", 3, 60).remaining == 1
    assert via_module.fixed_window("w", 3, 60).remaining == 0
    assert via_library.fixed_window("w", 3, 60).limited
    assert via_library.engine == "functions" and via_module.engine == "module"


def test_the_engine_is_told_by_the_storages_and_the_middleware(p: redis.Redis) -> None:
    pytest.importorskip("limits", minversion="5")
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    from redis_ratelimit.middleware import Rule, WSGIRateLimitMiddleware

    port = p.connection_pool.connection_kwargs["port"]
    for query, engine in (("", "functions"), ("?engine=eval", "eval"),
                          ("?engine=functions&clock=server", "functions")):
        storage = storage_from_string(f"redis+rl://127.0.0.1:{port}{query}")
        assert storage.engine is None or storage.engine == "eval"
        assert MovingWindowRateLimiter(storage).hit(parse("2/minute"), "e" + query)
        assert storage.engine == engine
    # A keyword argument (flask-limiter's storage_options) wins over the URI.
    storage = storage_from_string(f"redis+rl://127.0.0.1:{port}?engine=functions", engine="eval")
    assert storage.engine == "eval"
    limiter = RateLimiter(p)
    middleware = WSGIRateLimitMiddleware(lambda env, start: [b""], limiter, [Rule(GCRA(1, 1, 1))])
    assert middleware.engine is None
    middleware.decide(redis_ratelimit.middleware.RequestInfo("GET", "/", {}, "1.2.3.4"))
    assert middleware.engine == "functions"


def test_bad_engine_or_clock_options_are_refused(p: redis.Redis) -> None:
    with pytest.raises(ValueError, match="engine must be"):
        RateLimiter(p, engine="lua")
    with pytest.raises(ValueError, match="clock must be"):
        RateLimiter(p, clock="local")


# ---------------------------------------------------------------- versions, refusals, policies


def library_with_version(version: int) -> str:
    old = f"local VERSION = {LIBRARY_VERSION}\n"
    assert old in LIBRARY_CODE
    return LIBRARY_CODE.replace(old, f"local VERSION = {version}\n")


def test_an_older_library_is_replaced_and_a_newer_one_kept(p: redis.Redis) -> None:
    p.function_load(library_with_version(LIBRARY_VERSION - 1 if LIBRARY_VERSION > 1 else 0),
                    replace=True)
    assert RateLimiter(p).gcra("v", 1, 1, 1).allowed
    assert p.fcall_ro("rl_version", 0) == LIBRARY_VERSION
    p.function_load(library_with_version(LIBRARY_VERSION + 1000), replace=True)
    rl = RateLimiter(p)
    assert rl.gcra("v", 1, 1, 1).allowed and rl.engine == "functions"
    assert p.fcall_ro("rl_version", 0) == LIBRARY_VERSION + 1000


def test_function_refused_by_acl_takes_the_evalsha_path(plain: RedisServer,
                                                        p: redis.Redis) -> None:
    p.acl_setuser("nofunction", enabled=True, passwords=["+pw"], keys=["~*"],
                  commands=["+@all", "-function"])
    c = client(plain, username="nofunction", password="pw")
    rl = RateLimiter(c)
    assert [rl.gcra("acl", 0, 1, 60).allowed for _ in range(2)] == [True, False]
    assert rl.engine == "eval"
    assert libraries(p) == []
    with pytest.raises(redis.exceptions.ResponseError, match="function"):
        RateLimiter(c, engine="functions").gcra("acl2", 0, 1, 60)


# ---------------------------------------------------------------- the engine logged once


def engine_records(caplog: pytest.LogCaptureFixture) -> List[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "redis_ratelimit" and "engine" in r.getMessage()]


def test_the_engine_settled_on_is_logged_once_at_info(p: redis.Redis, m: redis.Redis,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="redis_ratelimit"):
        for c, engine in ((m, "module"), (p, "functions")):
            caplog.clear()
            rl = RateLimiter(c)
            for _ in range(3):
                rl.gcra("log", 9, 1, 1)
            records = engine_records(caplog)
            assert [(r.levelno, engine in r.getMessage()) for r in records] == [(logging.INFO, True)]
        caplog.clear()
        rl = RateLimiter(p, engine="eval")  # forced: INFO, not the fall back's WARNING
        rl.gcra("log", 9, 1, 1)
        rl.gcra("log", 9, 1, 1)
        [record] = engine_records(caplog)
        assert record.levelno == logging.INFO and "'eval'" in record.getMessage()
        assert "forced" in record.getMessage()
        caplog.clear()
        arl = AsyncRateLimiter(redis.asyncio.Redis(port=p.connection_pool.connection_kwargs["port"]))

        async def three() -> None:
            for _ in range(3):
                await arl.gcra("alog", 9, 1, 1)

        asyncio.run(three())
        [record] = engine_records(caplog)
        assert record.levelno == logging.INFO and "'functions'" in record.getMessage()


def test_a_fall_back_to_evalsha_is_one_warning_with_why_and_the_remedy(
        plain: RedisServer, p: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    p.acl_setuser("nofunction", enabled=True, passwords=["+pw"], keys=["~*"],
                  commands=["+@all", "-function"])
    c = client(plain, username="nofunction", password="pw")
    with caplog.at_level(logging.INFO, logger="redis_ratelimit"):
        rl = RateLimiter(c)
        for _ in range(5):
            rl.gcra("fallback", 9, 1, 1)
        assert rl.engine == "eval"
        [record] = engine_records(caplog)
        message = record.getMessage()
        assert record.levelno == logging.WARNING
        assert "EVALSHA" in message and "5x" in message
        assert "no permissions to run the 'function" in message  # why: the server's own words
        assert "administrator loads the library once" in message and "FCALL" in message
        # The remedy works: once an administrator loaded it, the same user calls it by FCALL.
        caplog.clear()
        p.function_load(LIBRARY_CODE, replace=True)
        rl = RateLimiter(c)
        rl.gcra("fallback", 9, 1, 1)
        assert rl.engine == "functions"
        [record] = engine_records(caplog)
        assert record.levelno == logging.INFO


def test_no_engine_at_all_is_a_redis_error() -> None:
    with RedisServer(module=False, args=NO_SCRIPTS) as s:
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            RateLimiter(client(s)).gcra("k", 1, 1, 1)


@pytest.mark.parametrize("engine", ["functions", "eval"])
def test_policies_are_module_data_a_clear_error_through_the_library(p: redis.Redis,
                                                                     engine: str) -> None:
    rl = RateLimiter(p, engine=engine)
    with pytest.raises(ModuleRequiredError, match="RL.LIMIT needs the redis-ratelimit module"):
        rl.limit("p", "k")
    with pytest.raises(ModuleRequiredError, match="RL.POLICY needs the redis-ratelimit module"):
        rl.policy_list()
    assert isinstance(ModuleRequiredError("x"), redis.exceptions.ResponseError)


# ---------------------------------------------------------------- recovery


CLIENTS = 20
LIMIT = 15


def two_waves(decide: Any, between: Any) -> List[Any]:
    """20 concurrent decisions in two waves of 10, ``between()`` in the middle."""
    results: List[Any] = []
    for wave in range(2):
        barrier = threading.Barrier(CLIENTS // 2)

        def one(_: int) -> Any:
            barrier.wait()
            return decide()

        with ThreadPoolExecutor(CLIENTS // 2) as pool:
            results += list(pool.map(one, range(CLIENTS // 2)))
        if wave == 0:
            between()
    return results


FLUSHES = [("functions", "FUNCTION FLUSH"), ("eval", "SCRIPT FLUSH")]


@pytest.mark.parametrize("engine, flush", FLUSHES)
def test_a_flush_mid_run_costs_no_request_sync_client(p: redis.Redis, engine: str,
                                                      flush: str) -> None:
    rl = RateLimiter(client_of(p), engine=engine)
    decisions = two_waves(lambda: rl.sliding_window("mid", LIMIT, 60),
                          lambda: p.execute_command(*flush.split()))
    assert [d.allowed for d in decisions].count(True) == LIMIT
    assert [d.limited for d in decisions].count(True) == CLIENTS - LIMIT
    assert rl.engine == engine


def client_of(c: redis.Redis) -> redis.Redis:
    kwargs = c.connection_pool.connection_kwargs
    return redis.Redis("127.0.0.1", kwargs["port"], socket_timeout=5)


@pytest.mark.parametrize("engine, flush", FLUSHES)
def test_a_flush_mid_run_costs_no_request_asyncio_and_middleware(p: redis.Redis, engine: str,
                                                                 flush: str) -> None:
    from redis_ratelimit.middleware import ASGIRateLimitMiddleware, Rule

    port = p.connection_pool.connection_kwargs["port"]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def run() -> List[int]:
        limiter = AsyncRateLimiter.from_url(f"redis://127.0.0.1:{port}", timeout_s=5,
                                            engine=engine)
        middleware = ASGIRateLimitMiddleware(app, limiter, [Rule(SlidingLog(LIMIT, 60), name="a")],
                                             fail_open=False, cache_size=0)

        async def get() -> int:
            sent: List[Any] = []

            async def send(message: Any) -> None:
                sent.append(message)

            async def receive() -> Any:
                return {"type": "http.request"}

            await middleware({"type": "http", "method": "GET", "path": "/", "headers": [],
                              "client": ("1.2.3.4", 1)}, receive, send)
            return int(sent[0]["status"])

        statuses = list(await asyncio.gather(*(get() for _ in range(CLIENTS // 2))))
        await limiter.redis.execute_command(*flush.split())
        statuses += await asyncio.gather(*(get() for _ in range(CLIENTS // 2)))
        assert middleware.engine == engine
        return statuses

    statuses = asyncio.run(run())
    assert statuses.count(200) == LIMIT and statuses.count(429) == CLIENTS - LIMIT


def hammer_waves(port: int, between: Any) -> List[int]:
    import http.client

    def get() -> int:
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        con.request("GET", "/")
        status = con.getresponse().status
        con.close()
        return status

    return two_waves(get, between)


@pytest.mark.parametrize("engine, flush", FLUSHES)
@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window-counter"])
def test_flask_limiter_a_flush_mid_run_costs_no_request(p: redis.Redis, engine: str, flush: str,
                                                        strategy: str) -> None:
    pytest.importorskip("limits", minversion="5")
    from flask import Flask
    from flask_limiter import Limiter
    from werkzeug.serving import make_server

    port = p.connection_pool.connection_kwargs["port"]
    app = Flask(__name__)
    limiter = Limiter(key_func=lambda: "everyone", app=app, strategy=strategy,
                      storage_uri=f"redis+rl://127.0.0.1:{port}?engine={engine}",
                      storage_options={"socket_timeout": 5})

    @app.route("/")
    @limiter.limit(f"{LIMIT}/minute")
    def index() -> str:
        return "ok"

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        statuses = hammer_waves(server.server_port, lambda: p.execute_command(*flush.split()))
    finally:
        server.shutdown()
    assert statuses.count(200) == LIMIT and statuses.count(429) == CLIENTS - LIMIT, statuses
    assert limiter.storage.engine == engine  # type: ignore[attr-defined]


@pytest.mark.parametrize("engine, flush", FLUSHES)
def test_slowapi_a_flush_mid_run_costs_no_request(p: redis.Redis, engine: str,
                                                  flush: str) -> None:
    pytest.importorskip("limits", minversion="5")
    import uvicorn
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded

    port = p.connection_pool.connection_kwargs["port"]
    limiter = Limiter(key_func=lambda request: "everyone", strategy="moving-window",
                      storage_uri=f"redis+rl://127.0.0.1:{port}?engine={engine}",
                      storage_options={"socket_timeout": 5})
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore

    @app.get("/")
    @limiter.limit(f"{LIMIT}/minute")
    async def index(request: Request) -> dict:
        return {"ok": True}

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    http_port = server.servers[0].sockets[0].getsockname()[1]
    try:
        statuses = hammer_waves(http_port, lambda: p.execute_command(*flush.split()))
    finally:
        server.should_exit = True
        thread.join(10)
    assert statuses.count(200) == LIMIT and statuses.count(429) == CLIENTS - LIMIT, statuses


def test_a_restart_without_the_module_then_without_the_library() -> None:
    """The same port: first with the module, then restarted without it (the next call finds
    the library and loads it), then restarted again (no persistence: the library is gone; the
    call that meets "function not found" loads it again)."""
    first = RedisServer(module=True).start()
    port = first.port
    rl = RateLimiter(redis.Redis("127.0.0.1", port, socket_timeout=5))
    try:
        assert rl.gcra("r", 5, 1, 60).allowed and rl.engine == "module"
    finally:
        first.stop()
    for _ in range(2):
        server = RedisServer(module=False, port=port).start()
        try:
            decision = None
            for _attempt in range(2):  # the old connection is dropped once (no retries)
                try:
                    decision = rl.gcra("r", 5, 1, 60)
                    break
                except redis.exceptions.ConnectionError:
                    continue
            assert decision is not None and decision.allowed
            assert rl.engine == "functions"
        finally:
            server.stop()


# ---------------------------------------------------------------- the caller's clock


@pytest.fixture
def notime(plain: RedisServer, p: redis.Redis) -> Iterator[redis.Redis]:
    """A client whose user may not run TIME: the server refuses it inside scripts too."""
    p.acl_setuser("notime", enabled=True, passwords=["+pw"], keys=["~*"],
                  commands=["+@all", "-time"])
    c = client(plain, username="notime", password="pw")
    yield c
    c.close()


@pytest.mark.parametrize("engine", ["functions", "eval"])
def test_time_refused_the_callers_clock_logged_once(notime: redis.Redis, engine: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    # Redis: "can't run this command"; Valkey: "no permissions to run the 'time' command".
    with pytest.raises(redis.exceptions.ResponseError, match=TIME_REFUSED):
        notime.eval("return redis.call('TIME')", 0)
    with pytest.raises(redis.exceptions.ResponseError, match=TIME_REFUSED):
        RateLimiter(notime, engine=engine, clock="server").gcra("t", 1, 1, 60)
    rl = RateLimiter(notime, engine=engine)
    with caplog.at_level(logging.WARNING, logger="redis_ratelimit"):
        assert [rl.gcra("t", 1, 1, 60).allowed for _ in range(3)] == [True, True, False]
    warnings = [r for r in caplog.records if "refuses TIME" in r.getMessage()]
    assert len(warnings) == 1 and "NOW" in warnings[0].getMessage()


def test_time_refused_the_storage_reads_the_callers_clock(plain: RedisServer,
                                                          notime: redis.Redis) -> None:
    pytest.importorskip("limits", minversion="5")
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

    storage = storage_from_string(f"redis+rl://notime:pw@127.0.0.1:{plain.port}",
                                  socket_timeout=5)
    item = parse("2/minute")
    for strategy in (MovingWindowRateLimiter, SlidingWindowCounterRateLimiter):
        limiter = strategy(storage)
        assert [limiter.hit(item, "c") for _ in range(3)] == [True, True, False]
        assert limiter.get_window_stats(item, "c").remaining == 0


class Recording:
    """A redis-py client that records what it sends."""

    def __init__(self, inner: redis.Redis) -> None:
        self.inner = inner
        self.sent: List[List[str]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append([str(a) for a in args])
        return self.inner.execute_command(*args, **options)


def test_clock_caller_sends_now_last_server_and_auto_do_not(p: redis.Redis) -> None:
    now_us = int(time.time() * 1e6)
    for engine in ("functions", "eval"):
        rec = Recording(p)
        RateLimiter(rec, engine=engine, clock="caller", now=lambda: now_us).gcra(
            "c" + engine, 1, 1, 1)
        assert rec.sent[-1][-2:] == ["NOW", str(now_us)]
        rec = Recording(p)
        RateLimiter(rec, engine=engine).fixed_window("d" + engine, 1, 1)
        assert "NOW" not in rec.sent[-1]


# ---------------------------------------------------------------- Redis Cluster


def test_a_cluster_of_three_primaries_without_the_module() -> None:
    from redis.cluster import RedisCluster

    with Cluster(3, module=False) as cluster:
        rc = RedisCluster("127.0.0.1", cluster.ports[0], socket_timeout=5)
        nodes = [client_port(port) for port in cluster.ports]
        keys = [f"user:{i}" for i in range(30)]
        assert {rc.keyslot(k) // (16384 // 3) for k in keys} == {0, 1, 2}  # every node
        rl = RateLimiter(rc)
        for k in keys:
            assert [rl.gcra(k, 0, 1, 60).allowed for _ in range(2)] == [True, False]
        assert rl.engine == "functions"
        # One round trip a decision: no COMMAND GETKEYS before each FCALL.
        assert sum(calls(n, "command|getkeys") for n in nodes) == 0
        assert all(libraries(n) == ["ratelimit"] for n in nodes)  # on every primary
        # One node loses the library: the next call there loads it again and decides.
        nodes[1].function_flush()
        for k in keys:
            assert rl.gcra(k, 0, 1, 60).limited
        assert libraries(nodes[1]) == ["ratelimit"]
        # Several keys of one slot: RL.ALL through rl_all.
        d = rl.all([("{t}a", SlidingWindow(2, 60)), ("{t}b", FixedWindow(1, 60))])
        assert d.allowed and rl.all([("{t}a", SlidingWindow(2, 60)),
                                     ("{t}b", FixedWindow(1, 60))]).binding == 1
        # The EVALSHA path, after SCRIPT FLUSH everywhere.
        via_eval = RateLimiter(rc, engine="eval")
        assert via_eval.sliding_log("e:1", 1, 60).allowed
        for n in nodes:
            n.script_flush()
        assert via_eval.sliding_log("e:1", 1, 60).limited
        assert via_eval.sliding_log("e:2", 1, 60).allowed

        async def run() -> None:
            from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

            arc = AsyncRedisCluster("127.0.0.1", cluster.ports[0], socket_timeout=5)
            arl = AsyncRateLimiter(arc)
            for n in nodes:
                n.function_flush()
            for k in keys:
                assert (await arl.gcra(k, 0, 1, 60)).limited
            assert arl.engine == "functions"
            assert sum(calls(n, "command|getkeys") for n in nodes) == 0
            assert all(libraries(n) == ["ratelimit"] for n in nodes)
            await arc.aclose() if hasattr(arc, "aclose") else await arc.close()

        asyncio.run(run())

        pytest.importorskip("limits", minversion="5")
        from limits import parse
        from limits.storage import storage_from_string
        from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter

        storage = storage_from_string(f"redis+rl+cluster://127.0.0.1:{cluster.ports[0]}",
                                      socket_timeout=5)
        item = parse("2/minute")
        for strategy in (MovingWindowRateLimiter, SlidingWindowCounterRateLimiter):
            limiter = strategy(storage)
            for k in ("a", "b", "c", "d"):
                assert [limiter.hit(item, k) for _ in range(3)] == [True, True, False]
                assert limiter.get_window_stats(item, k).remaining == 0
        assert storage.engine == "functions"
        rc.close()
        for n in nodes:
            n.close()


def client_port(port: int) -> redis.Redis:
    return redis.Redis("127.0.0.1", port, socket_timeout=5)


# ---------------------------------------------------------------- detection, scripted


class Scripted:
    """A client whose replies are scripted per command name: a value, or an exception to raise
    (popped in order when a list)."""

    def __init__(self, replies: Any) -> None:
        self.replies = replies
        self.sent: List[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]) if str(args[0]) != "FUNCTION" else f"FUNCTION {args[1]}"
        self.sent.append(name)
        reply = self.replies[name]
        if isinstance(reply, list) and reply and isinstance(reply[0], BaseException):
            reply = reply.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


def test_a_server_that_cannot_answer_now_is_asked_again_not_taken_for_one_without_functions() -> None:
    """READONLY (a replica) on FUNCTION LOAD: the call fails, the engine stays unknown, and the
    next call finds the Functions library; it is never mistaken for a server that refuses
    FUNCTION (which would take the EVALSHA path for good)."""
    fake = Scripted({
        "COMMAND INFO": [None],
        "FCALL_RO": redis.exceptions.ResponseError("Function not found"),
        "FUNCTION LOAD": [redis.exceptions.ReadOnlyError("You can't write against a read only "
                                                         "replica."), "ratelimit"],
        "FCALL": [0, 2, 1, -1, 1000],
    })
    rl = RateLimiter(fake)
    with pytest.raises(redis.exceptions.ReadOnlyError):
        rl.gcra("k", 1, 1, 1)
    assert rl.engine is None
    assert rl.gcra("k", 1, 1, 1).allowed and rl.engine == "functions"
    assert fake.sent.count("FUNCTION LOAD") == 2 and "EVALSHA" not in fake.sent


def test_function_refused_takes_the_eval_path_for_good() -> None:
    fake = Scripted({
        "COMMAND INFO": [None],
        "FCALL_RO": redis.exceptions.ResponseError("unknown command 'FCALL_RO'"),
        "EVALSHA": [0, 2, 1, -1, 1000],
    })
    rl = RateLimiter(fake)
    assert rl.gcra("k", 1, 1, 1).allowed and rl.engine == "eval"
    assert rl.gcra("k", 1, 1, 1).allowed
    assert fake.sent == ["COMMAND INFO", "FCALL_RO", "EVALSHA", "EVALSHA"]


def test_command_info_not_now_is_asked_again_not_taken_for_a_server_without_the_module() -> None:
    fake = Scripted({
        "COMMAND INFO": [redis.exceptions.TryAgainError("Multiple keys request during "
                                                        "rehashing of slot"), [["rl.gcra"]]],
        "RL.GCRA": [0, 2, 1, -1, 1000],
    })
    rl = RateLimiter(fake)
    with pytest.raises(redis.exceptions.TryAgainError):
        rl.gcra("k", 1, 1, 1)
    assert rl.engine is None
    assert rl.gcra("k", 1, 1, 1).allowed and rl.engine == "module"
    assert fake.sent == ["COMMAND INFO", "COMMAND INFO", "RL.GCRA"]


def test_a_new_node_gets_the_library_when_a_slot_moves_to_it() -> None:
    """Resharding to a node added after the library was loaded: the call follows MOVED there,
    meets "function not found", loads the library (on every primary, the new one included) and
    decides; the limiter's state moved with its slot."""
    from redis.cluster import RedisCluster

    with Cluster(3, module=False) as cluster:
        rc = RedisCluster("127.0.0.1", cluster.ports[0], socket_timeout=5)
        rl = RateLimiter(rc)
        key = "moving:1"
        # GCRA, not an epoch-aligned window: joining a node takes seconds, and a
        # window boundary crossed meanwhile would reset the count.
        assert rl.gcra(key, 2, 1, 3600).remaining == 2
        new = RedisServer(module=False, cluster=True, cluster_slots=False).start()
        try:
            target = client_port(new.port)
            target.execute_command("CLUSTER", "MEET", "127.0.0.1", cluster.ports[0])
            slot = rc.keyslot(key)
            source = client_port(rc.get_node_from_key(key).port)
            source_id = source.execute_command("CLUSTER", "MYID").decode()
            target_id = target.execute_command("CLUSTER", "MYID").decode()
            everyone = [client_port(port) for port in [*cluster.ports, new.port]]
            deadline = time.monotonic() + 20
            while not (all(_knows(c, i) for c in everyone for i in (source_id, target_id))
                       and b"cluster_state:ok" in target.execute_command("CLUSTER", "INFO")):
                assert time.monotonic() < deadline, "the new node did not join"
                time.sleep(0.05)
            target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            source.execute_command("MIGRATE", "127.0.0.1", new.port, "", 0, 5000, "KEYS", key)
            for port in [*cluster.ports, new.port]:
                client_port(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            assert libraries(target) == []
            assert rl.gcra(key, 2, 1, 3600).remaining == 1
            assert libraries(target) == ["ratelimit"]
            assert rl.engine == "functions"
        finally:
            new.stop()
            rc.close()


def _knows(c: redis.Redis, node_id: str) -> bool:
    nodes = c.execute_command("CLUSTER", "NODES")
    return node_id in (nodes.decode() if isinstance(nodes, bytes) else str(nodes))
