"""The WSGI and ASGI middleware and the FastAPI dependency: rules, headers, the denial cache,
and failing open or closed — on a timeout (a hung server), a server without the module, and a
refused connection — never a 500; back-off while Redis is down, the in-memory fallback, calls
bounded by socket timeouts (never cancelled), refusals rendered by the app, one flow."""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from redis_ratelimit import (
    GCRA,
    AsyncRateLimiter,
    Decision,
    FixedWindow,
    Limit,
    Policy,
    RateLimiter,
    SlidingLog,
)
from redis_ratelimit.fastapi import RateLimit, RateLimitExceeded
from redis_ratelimit.middleware import (
    ASGIRateLimitMiddleware,
    MemoryFallback,
    RateLimitFlow,
    Refusal,
    Rule,
    WSGIRateLimitMiddleware,
    header_key,
)
from tests.helpers import HungServer, RedisServer, calls


RULES = [
    Rule(GCRA(2, 1, 1), path="/api/", key=header_key("x-user"), name="api"),
    Rule(SlidingLog(1, 60), path="^/login$", methods={"POST"}, name="login", fail_open=False),
    Rule(FixedWindow(1, 60), path="/free/", key=lambda req: None),
]


# ------------------------------------------------------------------ WSGI

def hello_wsgi(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def wsgi_get(app: Any, path: str, method: str = "GET",
             user: Optional[str] = None) -> Tuple[int, Dict[str, str]]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": "10.0.0.1",
               "QUERY_STRING": "", "wsgi.input": io.BytesIO(b"")}
    if user:
        environ["HTTP_X_USER"] = user
    seen: Dict[str, Any] = {}

    def start_response(status: str, headers: List[Tuple[str, str]], exc_info: Any = None) -> None:
        seen["status"] = int(status.split()[0])
        seen["headers"] = dict(headers)

    b"".join(app(environ, start_response))
    return seen["status"], seen["headers"]


def wsgi_app(port: int, **options: Any) -> WSGIRateLimitMiddleware:
    limiter = RateLimiter.from_url(f"redis://127.0.0.1:{port}")
    return WSGIRateLimitMiddleware(hello_wsgi, limiter, RULES, **options)


def test_wsgi_rules_and_headers(server, r) -> None:
    app = wsgi_app(server.port)
    for i in range(3):
        status, headers = wsgi_get(app, "/api/x", user="alice")
        assert status == 200
        assert headers["RateLimit-Policy"] == '"api";q=3;w=3'
        assert headers["RateLimit"].startswith(f'"api";r={2 - i};')
        assert headers["Content-Type"] == "text/plain"
        assert "X-RateLimit-Limit" not in headers  # the legacy trio is off by default
    status, headers = wsgi_get(app, "/api/x", user="alice")
    assert status == 429 and headers["Retry-After"] == "1"
    assert headers["RateLimit"] == '"api";r=0;t=1'
    legacy = wsgi_get(wsgi_app(server.port, legacy_headers=True), "/api/x", user="al")[1]
    assert (legacy["X-RateLimit-Limit"], legacy["X-RateLimit-Remaining"]) == ("3", "2")
    assert wsgi_get(app, "/api/x", user="bob")[0] == 200
    # Unmatched paths, methods and exempt keys pass without headers.
    assert "RateLimit" not in wsgi_get(app, "/other")[1]
    assert "RateLimit" not in wsgi_get(app, "/login", method="GET")[1]
    assert all(wsgi_get(app, "/free/")[0] == 200 for _ in range(3))
    assert wsgi_get(app, "/login", method="POST")[0] == 200
    assert wsgi_get(app, "/login", method="POST")[0] == 429
    assert r.exists("rl:api:alice", "rl:api:bob", "rl:login:10.0.0.1") == 3


def test_wsgi_denials_are_answered_from_the_cache(server, r) -> None:
    app = wsgi_app(server.port)
    for _ in range(3):
        wsgi_get(app, "/api/", user="carol")
    assert wsgi_get(app, "/api/", user="carol")[0] == 429
    before = calls(r, "rl.gcra")
    for _ in range(10):
        status, headers = wsgi_get(app, "/api/", user="carol")
        assert status == 429 and headers["Retry-After"] == "1"
    assert calls(r, "rl.gcra") == before
    # Without the cache every request reaches Redis.
    uncached = wsgi_app(server.port, cache_size=0)
    for _ in range(3):
        assert wsgi_get(uncached, "/api/", user="carol")[0] == 429
    assert calls(r, "rl.gcra") == before + 3


# redis-server options that take every script command away: no engine can run there.
NO_SCRIPTS = [arg for command in ("FUNCTION", "FCALL", "FCALL_RO", "EVAL", "EVALSHA", "SCRIPT")
              for arg in ("--rename-command", command, "")]


def failing_servers() -> List[str]:
    return ["timeout", "no-engine", "refused"]


class Broken:
    """A port where the limiter fails in one of three ways: a hung server (a socket that accepts
    and never answers), a server without any engine (no module, and scripts refused, as on OCI
    Cache's sharded clusters), a refused connection."""

    def __init__(self, how: str, refused_port: int) -> None:
        self.how = how
        self.server: Optional[RedisServer] = None
        self.hung: Optional[HungServer] = None
        if how == "refused":
            self.port = refused_port
        elif how == "timeout":
            self.hung = HungServer()
            self.port = self.hung.port
        else:
            self.server = RedisServer(module=False, args=NO_SCRIPTS).start()
            self.port = self.server.port

    def close(self) -> None:
        if self.server:
            self.server.stop()
        if self.hung:
            self.hung.close()


@pytest.mark.parametrize("how", failing_servers())
def test_wsgi_fails_open_or_closed(how: str, refused_port: int) -> None:
    broken = Broken(how, refused_port)
    try:
        app = wsgi_app(broken.port)
        status, headers = wsgi_get(app, "/api/", user="dave")
        assert status == 200 and "RateLimit" not in headers  # fails open
        status, headers = wsgi_get(app, "/login", method="POST")
        assert status == 503 and headers["Retry-After"] == "1"  # this rule fails closed
        assert wsgi_get(wsgi_app(broken.port, fail_open=False), "/api/", user="d")[0] == 503
    finally:
        broken.close()


# ------------------------------------------------------------------ ASGI

async def hello_asgi(scope: Dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


async def asgi_get(app: Any, path: str, method: str = "GET",
                   user: Optional[str] = None) -> Tuple[int, Dict[str, str]]:
    headers = [(b"x-user", user.encode())] if user else []
    scope = {"type": "http", "method": method, "path": path, "headers": headers,
             "client": ("10.0.0.2", 1234), "query_string": b""}
    sent: List[Dict[str, Any]] = []

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}


def asgi_app(port: int, **options: Any) -> ASGIRateLimitMiddleware:
    limiter = AsyncRateLimiter.from_url(f"redis://127.0.0.1:{port}")
    return ASGIRateLimitMiddleware(hello_asgi, limiter, RULES, **options)


def test_asgi_rules_headers_and_cache(server, r) -> None:
    async def run() -> None:
        app = asgi_app(server.port)
        for i in range(3):
            status, headers = await asgi_get(app, "/api/", user="erin")
            assert status == 200 and headers["ratelimit"].startswith(f'"api";r={2 - i};')
            assert headers["content-type"] == "text/plain"
        status, headers = await asgi_get(app, "/api/", user="erin")
        assert status == 429 and headers["retry-after"] == "1"
        before = calls(r, "rl.gcra")
        for _ in range(5):
            assert (await asgi_get(app, "/api/", user="erin"))[0] == 429
        assert calls(r, "rl.gcra") == before
        assert (await asgi_get(app, "/elsewhere"))[0] == 200
        assert (await asgi_get(app, "/login", method="POST"))[0] == 200
        assert (await asgi_get(app, "/login", method="POST"))[0] == 429

    asyncio.run(run())


@pytest.mark.parametrize("how", failing_servers())
def test_asgi_fails_open_or_closed(how: str, refused_port: int) -> None:
    broken = Broken(how, refused_port)

    async def run() -> None:
        app = asgi_app(broken.port)
        status, headers = await asgi_get(app, "/api/", user="frank")
        assert status == 200 and "ratelimit" not in headers
        status, headers = await asgi_get(app, "/login", method="POST")
        assert status == 503 and headers["retry-after"] == "1"

    try:
        asyncio.run(asyncio.wait_for(run(), 10))
    finally:
        broken.close()


# ------------------------------------------------------------------ FastAPI dependency

def fastapi_app(port: int, **options: Any) -> FastAPI:
    limiter = AsyncRateLimiter.from_url(f"redis://127.0.0.1:{port}")
    app = FastAPI()

    @app.get("/items", dependencies=[Depends(RateLimit(limiter, GCRA(1, 1, 1), **options))])
    async def items() -> dict:
        return {"ok": True}

    @app.get("/tiered", dependencies=[Depends(RateLimit(limiter, Policy("tier"), **options))])
    async def tiered() -> dict:
        return {"ok": True}

    return app


@pytest.mark.module_only
def test_fastapi_dependency(server, r) -> None:
    RateLimiter(r).policy_set("tier", FixedWindow(1, 60))
    with TestClient(fastapi_app(server.port)) as client:
        first = client.get("/items")
        assert first.status_code == 200
        assert first.headers["ratelimit-policy"] == '"/items";q=2;w=2'
        assert client.get("/items").status_code == 200
        refused = client.get("/items")
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert client.get("/tiered").headers["ratelimit-policy"] == '"/tiered";q=1'
        assert client.get("/tiered").status_code == 429


@pytest.mark.parametrize("how", failing_servers())
def test_fastapi_dependency_fails_open_or_closed(how: str, refused_port: int) -> None:
    broken = Broken(how, refused_port)
    try:
        with TestClient(fastapi_app(broken.port)) as client:
            assert client.get("/items").status_code == 200
        with TestClient(fastapi_app(broken.port, fail_open=False)) as client:
            assert client.get("/items").status_code == 503
    finally:
        broken.close()


# ------------------------------------------------------------------ Redis down: back-off, fallback

def test_wsgi_backs_off_while_redis_is_down() -> None:
    """The first timeout marks Redis down: the next requests do not wait on it; one request
    checks it again after recheck_after_s (doubling while it stays down)."""
    with HungServer() as hung:
        app = wsgi_app(hung.port, recheck_after_s=0.2)
        assert wsgi_get(app, "/api/", user="x")[0] == 200  # waited one timeout, failed open
        sent = hung.commands
        assert sent >= 1
        for _ in range(20):
            assert wsgi_get(app, "/api/", user="x")[0] == 200
        assert hung.commands == sent  # marked down: nothing sent
        # A rule failing closed answers 503 at once too.
        assert wsgi_get(app, "/login", method="POST")[0] == 503
        assert app.flow.health.down
        deadline = time.monotonic() + 5
        while hung.commands == sent and time.monotonic() < deadline:
            time.sleep(0.05)
            wsgi_get(app, "/api/", user="x")
        assert hung.commands == sent + 1  # one request checked it again


def test_wsgi_recovers_when_redis_is_back(server, r, refused_port: int) -> None:
    app = wsgi_app(server.port, recheck_after_s=0.01)
    app.limiter = RateLimiter.from_url(f"redis://127.0.0.1:{refused_port}")
    assert wsgi_get(app, "/api/", user="y")[1].get("RateLimit") is None  # failed open
    assert app.flow.health.down
    app.limiter = RateLimiter.from_url(f"redis://127.0.0.1:{server.port}")
    time.sleep(0.02)
    assert "RateLimit" in wsgi_get(app, "/api/", user="y")[1]
    assert not app.flow.health.down


def test_memory_fallback_decides_while_redis_is_down(refused_port: int) -> None:
    """With fallback=MemoryFallback(), the rule's limit still holds (per process) while Redis
    is down; without it, the rule fails open."""
    app = wsgi_app(refused_port, fallback=MemoryFallback())
    statuses = [wsgi_get(app, "/api/", user="z")[0] for _ in range(4)]
    assert statuses == [200, 200, 200, 429]  # GCRA(2, 1, 1): a burst of 3
    status, headers = wsgi_get(app, "/api/", user="z")
    assert status == 429 and headers["Retry-After"] == "1"
    assert headers["RateLimit-Policy"] == '"api";q=3;w=3'
    # The closed rule is decided by the fallback too (SlidingLog(1, 60)).
    assert [wsgi_get(app, "/login", method="POST")[0] for _ in range(2)] == [200, 429]
    # A policy's limit lives on the server: the fallback cannot decide it.
    assert MemoryFallback().check("k", Policy("p")) is None


def test_memory_fallback_refills_over_the_window() -> None:
    fallback = MemoryFallback(max_keys=2)
    limit = FixedWindow(2, 0.05)
    assert [fallback.check("a", limit).allowed for _ in range(3)] == [True, True, False]
    never = fallback.check("a", limit, tokens=3)
    assert never is not None and never.limited and never.retry_after_ms == -1
    time.sleep(0.06)
    again = fallback.check("a", limit)
    assert again is not None and again.allowed
    fallback.check("b", limit)
    fallback.check("c", limit)
    assert len(fallback._buckets) == 2  # the least recently used went


def test_asgi_backs_off_and_falls_back(refused_port: int) -> None:
    async def run() -> None:
        app = asgi_app(refused_port, fallback=MemoryFallback())
        statuses = [(await asgi_get(app, "/api/", user="w"))[0] for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        assert app.flow.health.down

    asyncio.run(run())


def test_asgi_never_cancels_a_redis_call() -> None:
    """The call is bounded by the client's socket timeout, not cancelled from outside
    (cancelling a redis-py asyncio call could cross replies before 4.5.4: CVE-2023-28858/9)."""
    cancelled: List[str] = []

    class Watching:
        def __init__(self, limiter: AsyncRateLimiter) -> None:
            self.limiter = limiter
            self.timeout_s = limiter.timeout_s

        async def check(self, key: str, limit: Limit, *, tokens: int = 1,
                        name: Optional[str] = None) -> Decision:
            try:
                return await self.limiter.check(key, limit, tokens=tokens, name=name)
            except asyncio.CancelledError:
                cancelled.append(key)
                raise

    with HungServer() as hung:
        # Longer than the old middleware's own 0.5 s bound, which cancelled the call.
        limiter = Watching(AsyncRateLimiter.from_url(f"redis://127.0.0.1:{hung.port}",
                                                     timeout_s=0.6))

        async def run() -> None:
            app = ASGIRateLimitMiddleware(hello_asgi, limiter, RULES)
            assert (await asgi_get(app, "/api/", user="v"))[0] == 200

        asyncio.run(asyncio.wait_for(run(), 10))
    assert cancelled == []


# ------------------------------------------------------------------ refusals rendered by the app

def test_fastapi_refusals_go_through_the_app_exception_handlers(server, r) -> None:
    app = fastapi_app(server.port)

    @app.exception_handler(RateLimitExceeded)
    async def too_many(request: Any, exc: RateLimitExceeded) -> Any:
        from fastapi.responses import JSONResponse

        decision = exc.refusal.decision
        assert decision is not None
        return JSONResponse({"error": "slow down", "rule": exc.refusal.rule,
                             "retry_after_ms": decision.retry_after_ms},
                            status_code=429, headers=exc.headers)

    with TestClient(app) as client:
        client.get("/items")
        client.get("/items")
        refused = client.get("/items")
    assert refused.status_code == 429
    assert refused.json()["error"] == "slow down" and refused.json()["rule"] == "/items"
    assert refused.headers["retry-after"] == "1"


def test_asgi_middleware_renders_refusals_with_the_wrapped_app(server, r) -> None:
    inner = FastAPI()

    @inner.get("/api/")
    async def api() -> dict:
        return {"ok": True}

    @inner.exception_handler(RateLimitExceeded)
    async def too_many(request: Any, exc: RateLimitExceeded) -> Any:
        from fastapi.responses import PlainTextResponse

        return PlainTextResponse("custom", status_code=429)

    limiter = AsyncRateLimiter.from_url(f"redis://127.0.0.1:{server.port}")
    app = ASGIRateLimitMiddleware(inner, limiter, RULES)
    with TestClient(app) as client:
        statuses = [client.get("/api/", headers={"x-user": "u"}) for _ in range(4)]
    assert [s.status_code for s in statuses] == [200, 200, 200, 429]
    assert statuses[3].text == "custom" and statuses[3].headers["retry-after"] == "1"
    assert statuses[0].headers["ratelimit-policy"] == '"api";q=3;w=3'


def test_render_option(server, r) -> None:
    def render(refusal: Refusal) -> Tuple[int, Dict[str, str], bytes]:
        return refusal.status, {"Content-Type": "application/json"}, b'{"limited": true}'

    app = wsgi_app(server.port, render=render)
    for _ in range(3):
        wsgi_get(app, "/api/", user="t")
    status, headers = wsgi_get(app, "/api/", user="t")
    assert status == 429 and headers["Content-Type"] == "application/json"
    assert headers["Retry-After"] == "1"


# ------------------------------------------------------------------ one flow

def test_one_flow_decides_for_wsgi_asgi_and_fastapi(server, r, monkeypatch) -> None:
    """WSGI, ASGI and the FastAPI dependency all decide through RateLimitFlow."""
    seen: List[str] = []
    start = RateLimitFlow._start

    def counting(self: RateLimitFlow, request: Any, rule: Any) -> Any:
        seen.append(request.path)
        return start(self, request, rule)

    monkeypatch.setattr(RateLimitFlow, "_start", counting)
    wsgi_get(wsgi_app(server.port), "/api/wsgi", user="o")
    asyncio.run(asgi_get(asgi_app(server.port), "/api/asgi", user="o"))
    with TestClient(fastapi_app(server.port)) as client:
        assert client.get("/items").status_code == 200
    assert seen == ["/api/wsgi", "/api/asgi", "/items"]


def test_back_off_with_a_scripted_limiter() -> None:
    """Outages mark Redis down and double the wait; an error reply or a decision marks it up."""
    import redis.exceptions

    script: List[Any] = [redis.exceptions.ConnectionError("refused"),
                         redis.exceptions.TimeoutError("timeout"),
                         redis.exceptions.ResponseError("unknown command"),
                         Decision(False, 3, 2, -1, 1000)]
    asked: List[str] = []

    class Scripted:
        def check(self, key: str, limit: Limit, *, tokens: int = 1,
                  name: Optional[str] = None) -> Decision:
            asked.append(key)
            step = script.pop(0)
            if isinstance(step, Exception):
                raise step
            return step

    app = WSGIRateLimitMiddleware(hello_wsgi, Scripted(), RULES, recheck_after_s=0.05,
                                  recheck_max_s=0.08)
    health = app.flow.health
    assert wsgi_get(app, "/api/", user="s")[0] == 200 and health.down  # refused
    assert wsgi_get(app, "/api/", user="s")[0] == 200 and len(asked) == 1  # not asked
    time.sleep(0.06)
    assert wsgi_get(app, "/api/", user="s")[0] == 200 and len(asked) == 2  # checked: timeout
    assert health.down and health._wait_s == 0.08  # doubled, capped
    time.sleep(0.09)
    assert wsgi_get(app, "/login", method="POST")[0] == 503  # checked: an error reply
    assert not health.down and len(asked) == 3
    assert "RateLimit" in wsgi_get(app, "/api/", user="s")[1]
