"""Charging what was used (FORCE): ``force=`` on every call, ``charge()``, and middleware rules
whose cost is computed from the response: checked before the handler, charged when the response
is done (WSGI, ASGI, FastAPI). The scenario of a 1,000-token budget, each response costing 600:
check-then-charge serves 2 requests, not 10 (a refused charge taking nothing served them all)."""

from __future__ import annotations

import asyncio
import io
from typing import Any, Callable, Dict, Iterable, List, Tuple
from wsgiref.util import setup_testing_defaults

import pytest
import redis
from fastapi import Depends, FastAPI, Response  # at module level: FastAPI resolves the annotations
from fastapi.testclient import TestClient

from redis_ratelimit import GCRA, AsyncRateLimiter, FixedWindow, RateLimiter, SlidingLog
from redis_ratelimit.middleware import (
    ASGIRateLimitMiddleware,
    RequestInfo,
    ResponseInfo,
    Rule,
    WSGIRateLimitMiddleware,
)

BUDGET = FixedWindow(1000, 60)


def tokens_used(request: RequestInfo, response: ResponseInfo) -> int:
    """The usage header of an LLM gateway."""
    return int(response.headers.get("x-llm-tokens", "0"))


def test_charge_records_past_the_limit_and_ordinary_calls_wait_for_the_debt(
        url: str, r: redis.Redis) -> None:
    rl = RateLimiter.from_url(url)
    first = rl.charge("budget", BUDGET, 600)
    assert first is not None and first.allowed and first.remaining == 400
    second = rl.charge("budget", BUDGET, 600)  # 200 past the limit: recorded, limited
    assert second is not None and second.limited and second.remaining == 0
    assert second.retry_after_ms > 0
    # Nothing more passes until the debt is repaid: a check, and an ordinary take.
    assert rl.check("budget", BUDGET, peek=True).limited
    assert rl.fixed_window("budget", 1000, 60).limited
    assert rl.charge("budget", BUDGET, 0) is None  # nothing used: nothing sent
    # Without FORCE the same charge takes nothing: the old, leaky check-then-charge.
    assert rl.fixed_window("leaky", 1000, 60, tokens=600).allowed
    assert rl.fixed_window("leaky", 1000, 60, tokens=600).limited
    assert rl.fixed_window("leaky", 1000, 60, peek=True).allowed


@pytest.mark.parametrize("limit", [GCRA(9, 10, 1), SlidingLog(10, 60)])
def test_force_on_other_algorithms_and_in_all(url: str, r: redis.Redis, limit: Any) -> None:
    rl = RateLimiter.from_url(url)
    assert rl.check("f", limit, tokens=8, force=True).allowed
    forced = rl.check("f", limit, tokens=5, force=True)
    assert forced.limited and forced.retry_after_ms > 0
    assert rl.check("f", limit).limited
    both = rl.all([("a1", GCRA(9, 10, 1)), ("a2", FixedWindow(5, 60))], tokens=7, force=True)
    assert both.limited  # 7 > 5: FIXEDWINDOW went into debt, GCRA took its 7 too
    assert rl.fixed_window("a2", 5, 60).limited
    assert rl.gcra("a1", 9, 10, 1, tokens=4).limited  # 7 + 4 > 10


def test_force_with_peek_or_refund_is_refused_before_sending(url: str) -> None:
    rl = RateLimiter.from_url(url)
    with pytest.raises(ValueError, match="force"):
        rl.fixed_window("x", 5, 60, force=True, peek=True)
    with pytest.raises(ValueError, match="force"):
        rl.fixed_window("x", 5, 60, force=True, refund=1)


def test_asyncio_charge(url: str, r: redis.Redis) -> None:
    async def run() -> Tuple[bool, bool]:
        rl = AsyncRateLimiter.from_url(url)
        a = await rl.charge("abudget", BUDGET, 600)
        b = await rl.charge("abudget", BUDGET, 600)
        assert a is not None and b is not None
        return a.allowed, b.limited

    assert asyncio.run(run()) == (True, True)


def llm_wsgi_app(environ: Dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("X-LLM-Tokens", "600")])
    return [b"a completion\n"]


def wsgi_get(app: Any, path: str = "/llm") -> Tuple[int, Dict[str, str]]:
    environ: Dict[str, Any] = {"PATH_INFO": path, "REMOTE_ADDR": "10.0.0.1",
                               "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    seen: List[Any] = []
    body = app(environ, lambda status, headers, exc_info=None: seen.extend([status, headers]))
    b"".join(body)
    close = getattr(body, "close", None)
    if close is not None:
        close()  # what a server does once the body is sent: the charge happens here
    return int(seen[0].split()[0]), dict(seen[1])


def test_wsgi_rule_checks_before_and_charges_the_response_cost(url: str, r: redis.Redis) -> None:
    app = WSGIRateLimitMiddleware(llm_wsgi_app, RateLimiter.from_url(url),
                                  [Rule(BUDGET, path="/llm", charge=tokens_used)])
    statuses = [wsgi_get(app)[0] for _ in range(10)]
    assert statuses == [200, 200] + [429] * 8
    # 1,200 recorded: the budget is 200 in debt.
    assert RateLimiter.from_url(url).check("rl:/llm:10.0.0.1", BUDGET, peek=True).limited


def test_wsgi_charge_failures_are_logged_not_raised(url: str, r: redis.Redis,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    def broken(request: RequestInfo, response: ResponseInfo) -> int:
        raise KeyError("x-llm-tokens")

    app = WSGIRateLimitMiddleware(llm_wsgi_app, RateLimiter.from_url(url),
                                  [Rule(BUDGET, path="/llm", charge=broken)])
    assert wsgi_get(app)[0] == 200
    assert any("could not charge" in rec.getMessage() for rec in caplog.records)


def test_a_concurrency_rule_takes_no_charge() -> None:
    from redis_ratelimit import Concurrency

    with pytest.raises(ValueError, match="charge"):
        Rule(Concurrency(3, 60), charge=tokens_used)


async def llm_asgi_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"x-llm-tokens", b"600")]})
    await send({"type": "http.response.body", "body": b"a ", "more_body": True})
    await send({"type": "http.response.body", "body": b"completion\n"})


async def asgi_get(app: Any, path: str = "/llm") -> int:
    sent: List[Dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": path, "headers": [],
             "client": ("10.0.0.1", 1234), "query_string": b""}

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return int(sent[0]["status"])


def test_asgi_rule_checks_before_and_charges_after_the_last_body(url: str,
                                                                 r: redis.Redis) -> None:
    async def run() -> List[int]:
        app = ASGIRateLimitMiddleware(llm_asgi_app, AsyncRateLimiter.from_url(url),
                                      [Rule(BUDGET, path="/llm", charge=tokens_used)])
        return [await asgi_get(app) for _ in range(10)]

    assert asyncio.run(run()) == [200, 200] + [429] * 8


def test_fastapi_dependency_charges_what_the_endpoint_reports(url: str, r: redis.Redis) -> None:
    from redis_ratelimit.fastapi import RateLimit

    app = FastAPI()
    budget = RateLimit(AsyncRateLimiter.from_url(url), BUDGET, key=lambda request: "tenant",
                       charge=tokens_used)

    @app.get("/llm", dependencies=[Depends(budget)])
    async def llm(response: Response) -> Dict[str, str]:
        response.headers["x-llm-tokens"] = "600"
        return {"completion": "..."}

    with TestClient(app) as client:
        statuses = [client.get("/llm").status_code for _ in range(10)]
    assert statuses == [200, 200] + [429] * 8
