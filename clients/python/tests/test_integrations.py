"""flask-limiter and slowapi apps on the real module: switching is `storage_uri="redis+rl://…"`.

20 concurrent clients against a real HTTP server: exactly `limit` requests are admitted.
"""

from __future__ import annotations

import http.client
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import List

import pytest

pytest.importorskip("limits", minversion="5")  # limits 5 needs Python 3.10+
import uvicorn
from fastapi import FastAPI, Request
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded

import redis_ratelimit  # noqa: F401  (registers redis+rl://)
from tests.helpers import TEST_ENGINE, calls


CLIENTS = 20
LIMIT = 7


def hammer(port: int, path: str, n: int = CLIENTS) -> List[int]:
    """n clients at once, one request each; their statuses."""
    barrier = threading.Barrier(n)

    def one(_: int) -> int:
        con = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        con.connect()
        barrier.wait()
        con.request("GET", path)
        status = con.getresponse().status
        con.close()
        return status

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


STRATEGIES = [("moving-window", "rl.slidinglog"), ("sliding-window-counter", "rl.slidingwindow")]


@pytest.mark.parametrize("strategy, command", STRATEGIES)
def test_flask_limiter(url, r, strategy, command) -> None:
    from flask import Flask
    from flask_limiter import Limiter as FlaskLimiter
    from werkzeug.serving import make_server

    app = Flask(__name__)
    limiter = FlaskLimiter(key_func=lambda: "everyone", app=app,
                      storage_uri=url.replace("redis://", "redis+rl://"), strategy=strategy)

    @app.route("/")
    @limiter.limit(f"{LIMIT}/minute")
    def index() -> str:
        return "ok"

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        before = calls(r, command)
        statuses = hammer(server.server_port, "/")
    finally:
        server.shutdown()
    assert statuses.count(200) == LIMIT
    assert statuses.count(429) == CLIENTS - LIMIT
    assert calls(r, command) == before + CLIENTS
    # Where the README says the engine is under flask-limiter.
    assert limiter.storage.engine == TEST_ENGINE


@pytest.mark.parametrize("strategy, command", STRATEGIES)
def test_slowapi(url, r, strategy, command) -> None:
    limiter = Limiter(key_func=lambda request: "everyone",
                      storage_uri=url.replace("redis://", "redis+rl://"), strategy=strategy)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/")
    @limiter.limit(f"{LIMIT}/minute")
    async def index(request: Request) -> dict:
        return {"ok": True}

    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        before = calls(r, command)
        statuses = hammer(port, "/")
    finally:
        server.should_exit = True
        thread.join(10)
    assert statuses.count(200) == LIMIT
    assert statuses.count(429) == CLIENTS - LIMIT
    assert calls(r, command) == before + CLIENTS
    # Where the README says the engine is under slowapi.
    assert limiter.limiter.storage.engine == TEST_ENGINE
