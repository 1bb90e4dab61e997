"""Calendar windows (RL.FIXEDWINDOW key limit DAY|WEEK|MONTH|YEAR [TZ zone]) through the client
and the middleware's rule syntax ("1000/month@Europe/Paris"): the window ends at the next local
boundary, which reset_after_ms and Retry-After say. Fixed offsets run on both engines; IANA
zones where the engine has them (the module; the library refuses them with an error naming the
module when it cannot carry their rules)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Dict
from zoneinfo import ZoneInfo

import pytest
import redis

from redis_ratelimit import FixedWindow, RateLimiter, parse_limit
from redis_ratelimit.middleware import RequestInfo, Rule, WSGIRateLimitMiddleware
from tests.helpers import TEST_ENGINE


def ms_to_next(unit: str, zone: dt.tzinfo) -> int:
    """Milliseconds from now to the next local boundary of ``unit`` in ``zone``."""
    now = dt.datetime.now(dt.timezone.utc)
    local = now.astimezone(zone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if unit == "day":
        start = midnight
        naive_next = start.replace(tzinfo=None) + dt.timedelta(days=1)
    elif unit == "week":
        start = midnight - dt.timedelta(days=local.weekday())
        naive_next = start.replace(tzinfo=None) + dt.timedelta(days=7)
    elif unit == "month":
        naive_next = (midnight.replace(day=1, tzinfo=None) + dt.timedelta(days=32)).replace(day=1)
    else:
        naive_next = midnight.replace(month=1, day=1, year=local.year + 1, tzinfo=None)
    boundary = naive_next.replace(tzinfo=zone)
    return int((boundary - now).total_seconds() * 1000)


OFFSET = dt.timezone(dt.timedelta(hours=5, minutes=30))


@pytest.fixture(autouse=True)
def calendar_engine(request: pytest.FixtureRequest) -> None:
    """Skips the server tests where the engine has no calendar windows yet (the module has them;
    the Functions library follows): it answers a calendar unit with its error about seconds."""
    if "url" not in request.fixturenames:
        return
    url = request.getfixturevalue("url")
    try:
        RateLimiter.from_url(url).fixed_window("cal:probe", 1, "day", peek=True)
    except redis.exceptions.ResponseError as exc:
        pytest.skip(f"the {TEST_ENGINE} engine has no calendar windows: {exc}")


@pytest.mark.parametrize("unit", ["day", "week", "month", "year"])
def test_a_calendar_window_resets_at_the_next_local_boundary(url: str, r: redis.Redis,
                                                             unit: str) -> None:
    rl = RateLimiter.from_url(url)
    first = rl.fixed_window(f"cal:{unit}", 2, unit, tz="+05:30")
    assert first.allowed and first.remaining == 1
    assert abs(first.reset_after_ms - ms_to_next(unit, OFFSET)) < 2000, first
    rl.fixed_window(f"cal:{unit}", 2, unit, tz="+05:30")
    refused = rl.fixed_window(f"cal:{unit}", 2, unit, tz="+05:30")
    assert refused.limited
    assert abs(refused.retry_after_ms - ms_to_next(unit, OFFSET)) < 2000, refused
    # UTC when no zone is given.
    utc = rl.check(f"cal:{unit}:utc", FixedWindow(5, unit))
    assert abs(utc.reset_after_ms - ms_to_next(unit, dt.timezone.utc)) < 2000, utc


def test_a_monthly_quota_in_an_iana_zone(url: str, r: redis.Redis) -> None:
    rl = RateLimiter.from_url(url)
    if TEST_ENGINE != "module":
        try:
            rl.check("cal:paris", FixedWindow(1000, "month", tz="Europe/Paris"))
        except redis.exceptions.ResponseError as exc:
            assert "module" in str(exc), exc  # the library's documented refusal names the module
            return
    d = rl.check("cal:paris", FixedWindow(1000, "month", tz="Europe/Paris"))
    assert d.allowed and d.remaining == 999
    assert abs(d.reset_after_ms - ms_to_next("month", ZoneInfo("Europe/Paris"))) < 2000, d


def test_calendar_windows_in_all(url: str, r: redis.Redis) -> None:
    rl = RateLimiter.from_url(url)
    day = FixedWindow(3, "day", tz="+05:30")
    both = rl.all([("cal:all:d", day), ("cal:all:y", FixedWindow(100, "year"))], tokens=3)
    assert both.allowed and both.remaining == 0
    assert rl.all([("cal:all:d", day), ("cal:all:y", FixedWindow(100, "year"))]).limited


def test_the_rule_syntax() -> None:
    assert parse_limit("1000/month@Europe/Paris") == FixedWindow(1000, "month", tz="Europe/Paris")
    assert parse_limit("100/minute") == FixedWindow(100, 60)
    assert parse_limit("10 per 2 hours") == FixedWindow(10, 7200)
    assert parse_limit("500/day") == FixedWindow(500, "day")
    for bad in ("10/2 months", "5/2 days@UTC", "ten/minute", "5/fortnight"):
        with pytest.raises(ValueError):
            parse_limit(bad)
    with pytest.raises(ValueError, match="tz"):
        FixedWindow(5, 60, tz="UTC")
    assert Rule("2/day@+05:30").limit == FixedWindow(2, "day", tz="+05:30")


def test_the_middleware_takes_a_calendar_rule(url: str, r: redis.Redis) -> None:
    def app(environ: Dict[str, Any], start_response: Any) -> Any:
        start_response("200 OK", [])
        return [b"ok"]

    mw = WSGIRateLimitMiddleware(app, RateLimiter.from_url(url), [Rule("2/day@+05:30", name="sms")])
    request = RequestInfo("GET", "/", {}, "10.0.0.9")
    outcomes = [mw.decide(request) for _ in range(3)]
    assert [o.refusal is None for o in outcomes if o is not None] == [True, True, False]
    refused = outcomes[2]
    assert refused is not None and refused.refusal is not None
    retry = int(refused.refusal.headers["Retry-After"])
    assert abs(retry * 1000 - ms_to_next("day", OFFSET)) < 3000, retry


@pytest.mark.parametrize("scheme", ["redis+rl", "async+redis+rl"])
def test_limits_fixed_window_takes_calendar_windows(url: str, r: redis.Redis, scheme: str) -> None:
    pytest.importorskip("limits", minversion="5")
    from limits import parse
    from limits.aio.strategies import FixedWindowRateLimiter as AsyncFixedWindow
    from limits.storage import storage_from_string
    from limits.strategies import FixedWindowRateLimiter

    port = url.rsplit(":", 1)[1]
    storage = storage_from_string(f"{scheme}://127.0.0.1:{port}?calendar=%2B05:30")
    day, month, hourly = parse("2/day"), parse("1/month"), parse("2/hour")

    async def run() -> Any:
        limiter = AsyncFixedWindow(storage)
        hits = [await limiter.hit(day, "u") for _ in range(3)]
        return hits, await limiter.get_window_stats(day, "u"), await limiter.hit(month, "u"), \
            [await limiter.hit(hourly, "u") for _ in range(3)]

    if scheme.startswith("async"):
        import asyncio

        hits, stats, month_hit, hourly_hits = asyncio.run(run())
    else:
        limiter = FixedWindowRateLimiter(storage)
        hits = [limiter.hit(day, "u") for _ in range(3)]
        stats = limiter.get_window_stats(day, "u")
        month_hit, hourly_hits = limiter.hit(month, "u"), [limiter.hit(hourly, "u") for _ in range(3)]
    assert hits == [True, True, False]
    assert stats.remaining == 0
    assert abs((stats.reset_time - dt.datetime.now().timestamp()) * 1000
               - ms_to_next("day", OFFSET)) < 2000, stats
    assert month_hit
    assert hourly_hits == [True, True, False]  # not a calendar unit: limits' own INCR
    # The calendar key is the module's; the hourly one limits' INCR counter.
    keys = {k.decode() for k in r.keys("*")}
    assert any(k.endswith("/2/1/day/rl.fixedwindow") for k in keys), keys
    assert any(k.endswith("/2/1/hour") for k in keys), keys
