"""The WSGI and ASGI middleware and the FastAPI dependency: rules, headers, the denial cache,
and failing open or closed — on a timeout (a hung server), a server without the module, and a
refused connection — never a 500."""

from __future__ import annotations

import asyncio
import io
from typing import Any, Dict, List, Optional, Tuple

import pytest
import redis
import redis.asyncio
from fastapi import Depends, FastAPI
from fastapi.testclient import TestClient

from redis_ratelimit import GCRA, AsyncRateLimiter, FixedWindow, Policy, RateLimiter, SlidingLog
from redis_ratelimit.fastapi import RateLimit
from redis_ratelimit.middleware import (
    ASGIRateLimitMiddleware,
    Rule,
    WSGIRateLimitMiddleware,
    header_key,
)
from tests.helpers import RedisServer, calls


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
    limiter = RateLimiter.from_url(f"redis://127.0.0.1:{port}", timeout_s=0.3)
    return WSGIRateLimitMiddleware(hello_wsgi, limiter, RULES, **options)


def test_wsgi_rules_and_headers(server, r) -> None:
    app = wsgi_app(server.port)
    for i in range(3):
        status, headers = wsgi_get(app, "/api/x", user="alice")
        assert status == 200
        assert headers["RateLimit-Policy"] == '"api";q=3;w=3'
        assert headers["RateLimit"].startswith(f'"api";r={2 - i};')
        assert headers["Content-Type"] == "text/plain"
    status, headers = wsgi_get(app, "/api/x", user="alice")
    assert status == 429 and headers["Retry-After"] == "1"
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


def failing_servers() -> List[str]:
    return ["timeout", "no-module", "refused"]


class Broken:
    """A port where the limiter fails in one of three ways."""

    def __init__(self, how: str, refused_port: int) -> None:
        self.how = how
        self.server: Optional[RedisServer] = None
        if how == "refused":
            self.port = refused_port
            return
        self.server = RedisServer(module=(how == "timeout")).start()
        self.port = self.server.port
        if how == "timeout":
            self.server.pause()

    def close(self) -> None:
        if self.server:
            self.server.stop()


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
    client = redis.asyncio.Redis(host="127.0.0.1", port=port)  # no client timeouts: timeout_s
    options.setdefault("timeout_s", 0.3)
    return ASGIRateLimitMiddleware(hello_asgi, AsyncRateLimiter(client), RULES, **options)


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
    limiter = AsyncRateLimiter.from_url(f"redis://127.0.0.1:{port}", timeout_s=0.3)
    options.setdefault("timeout_s", 0.3)
    app = FastAPI()

    @app.get("/items", dependencies=[Depends(RateLimit(limiter, GCRA(1, 1, 1), **options))])
    async def items() -> dict:
        return {"ok": True}

    @app.get("/tiered", dependencies=[Depends(RateLimit(limiter, Policy("tier"), **options))])
    async def tiered() -> dict:
        return {"ok": True}

    return app


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
