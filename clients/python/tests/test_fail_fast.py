"""flask-limiter and slowapi with the README's one-line switch, as written there, on a hung Redis
(a socket that accepts and never answers) and on a refused port: no 500, and each request costs
at most about the 0.25 s timeout — the limits then hold in memory."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

pytest.importorskip("limits", minversion="5")  # limits 5 needs Python 3.10+
from fastapi import FastAPI, Request  # at module level: FastAPI resolves the route's annotations

from tests.helpers import HungServer

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
LIMIT = 3
REQUESTS = 8
# Generous against a loaded machine, far below redis-py's default 5 s socket timeout.
SLOWEST_S = 1.5


def switch_snippet() -> Tuple[str, str]:
    """The README's first Python snippet, split into its flask-limiter and slowapi parts."""
    block = re.search(r"```python\n(.*?)```", README, re.S)
    assert block is not None
    code = block.group(1)
    assert code.startswith("import redis_ratelimit"), "the first snippet must import the package"
    flask_part = code[code.index("# flask-limiter"):code.index("# slowapi")]
    slowapi_part = code[code.index("# slowapi"):]
    return flask_part, slowapi_part


@pytest.fixture(params=["hung", "refused"])
def dead_redis(request: Any, refused_port: int) -> Iterator[str]:
    if request.param == "refused":
        yield f"redis+rl://127.0.0.1:{refused_port}"
        return
    with HungServer() as hung:
        yield f"redis+rl://127.0.0.1:{hung.port}"


def timed(get: Callable[[], int]) -> List[Tuple[int, float]]:
    out = []
    for _ in range(REQUESTS):
        start = time.monotonic()
        status = get()
        out.append((status, time.monotonic() - start))
    return out


def check(results: List[Tuple[int, float]]) -> None:
    statuses = [status for status, _ in results]
    assert 500 not in statuses
    # The in-memory fallback keeps the limit.
    assert statuses == [200] * LIMIT + [429] * (REQUESTS - LIMIT)
    slowest = max(seconds for _, seconds in results)
    assert slowest < SLOWEST_S, results


def test_flask_limiter_with_the_readme_settings(dead_redis: str) -> None:
    from flask import Flask
    from flask_limiter import Limiter
    from flask_limiter.util import get_remote_address

    import redis_ratelimit  # noqa: F401

    app = Flask(__name__)
    code = switch_snippet()[0].replace("redis+rl://localhost:6379", dead_redis)
    scope: Dict[str, Any] = {"Limiter": Limiter, "get_remote_address": get_remote_address,
                             "app": app}
    exec(code, scope)
    limiter = scope["limiter"]

    @app.route("/")
    @limiter.limit(f"{LIMIT}/minute")
    def index() -> str:
        return "ok"

    client = app.test_client()
    check(timed(lambda: client.get("/").status_code))


def test_slowapi_with_the_readme_settings(dead_redis: str) -> None:
    from fastapi.testclient import TestClient
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    code = switch_snippet()[1].replace("redis+rl://localhost:6379", dead_redis)
    scope: Dict[str, Any] = {"Limiter": Limiter, "get_remote_address": get_remote_address}
    exec(code, scope)
    limiter = scope["limiter"]
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    @app.get("/")
    @limiter.limit(f"{LIMIT}/minute")
    async def index(request: Request) -> Dict[str, bool]:
        return {"ok": True}

    with TestClient(app, raise_server_exceptions=False) as client:
        check(timed(lambda: client.get("/").status_code))


def test_the_storage_fails_fast_without_options(refused_port: int) -> None:
    """limits' own redis:// storage keeps redis-py's 5 s socket timeout and retries; ours
    defaults to 0.25 s without retries, even when the app gives no storage_options."""
    from limits.storage import storage_from_string

    import redis_ratelimit  # noqa: F401

    storage = storage_from_string(f"redis+rl://127.0.0.1:{refused_port}")
    kwargs = storage.get_connection().connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 0.25 and kwargs["socket_connect_timeout"] == 0.25
    assert kwargs["retry"]._retries == 0
    # The URI's own options still win.
    storage = storage_from_string(f"redis+rl://127.0.0.1:{refused_port}?socket_timeout=2")
    assert storage.get_connection().connection_pool.connection_kwargs["socket_timeout"] == 2
