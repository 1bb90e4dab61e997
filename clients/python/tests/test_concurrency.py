"""Concurrency limits from Python (issue 32): ``with limiter.concurrency(key, limit, lease)`` and
``async with``, against a real server, on the engine the suite runs on (the module, or the
Functions library under ``RATELIMIT_TEST_ENGINE=functions``), and through ``EVALSHA``.

In-flight counts are measured by the workers themselves (a counter each one raises on entering
and lowers before leaving), never read from the server."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Dict, Iterator, List, Optional, Tuple

import httpx
import pytest
import redis
from fastapi import Depends, FastAPI
from fastapi.responses import StreamingResponse

import redis_ratelimit
from redis_ratelimit import (
    GCRA,
    AsyncConcurrencyLease,
    AsyncRateLimiter,
    Concurrency,
    ConcurrencyLease,
    ConcurrencyLimitExceeded,
    FixedWindow,
    RateLimiter,
)
from redis_ratelimit.fastapi import ConcurrencyLimit, RateLimit
from redis_ratelimit.middleware import ASGIRateLimitMiddleware, Rule, WSGIRateLimitMiddleware
from tests.helpers import TEST_ENGINE, RedisServer


def sync_limiter(url: str, **options: Any) -> RateLimiter:
    return RateLimiter.from_url(url, timeout_s=5, **options)


def async_limiter(url: str, **options: Any) -> AsyncRateLimiter:
    return AsyncRateLimiter.from_url(url, timeout_s=5, **options)


def free_slots(rl: RateLimiter, key: str, limit: int) -> int:
    """The free slots now: a RELEASE of an id that holds nothing answers them, writing nothing."""
    return rl.release(key, limit, 30, "nobody").remaining


# ---------------------------------------------------------------- the commands, every engine

def engines() -> List[str]:
    return (["module"] if TEST_ENGINE == "module" else []) + ["functions", "eval"]


@pytest.mark.parametrize("engine", engines())
def test_acquire_renew_release_through_every_engine(url: str, r: redis.Redis,
                                                    engine: str) -> None:
    rl = sync_limiter(url, engine=engine)
    a = rl.acquire("jobs", 2, 30, "a")
    assert (a.limited, a.limit, a.remaining, a.retry_after_ms) == (False, 2, 1, -1)
    assert rl.acquire("jobs", 2, 30, "a").remaining == 1  # acquiring a held id renews it
    assert rl.acquire("jobs", 2, 30, "b").remaining == 0
    refused = rl.acquire("jobs", 2, 30, "c")
    assert refused.limited and 0 < refused.retry_after_ms <= 30_000
    assert rl.renew("jobs", 2, 30, "a").allowed
    lost = rl.renew("jobs", 2, 30, "never-held")
    assert lost.limited and lost.retry_after_ms == -1
    assert rl.release("jobs", 2, 30, "a").remaining == 1
    assert rl.release("jobs", 2, 30, "a").remaining == 1  # releasing twice is not an error
    assert rl.release("jobs", 2, 30, "b").remaining == 2
    assert r.exists("jobs") == 0  # the last release deletes the key
    assert rl.engine == engine
    # The members are the module's: slot k of lease id is "<k>:<id>".
    rl.acquire("jobs", 3, 30, "x", tokens=2)
    assert sorted(r.zrange("jobs", 0, -1)) == [b"1:x", b"2:x"]


def test_concurrency_inside_rl_all_takes_no_slot_when_a_rate_limit_refuses(
        url: str, r: redis.Redis) -> None:
    rl = sync_limiter(url)
    for _ in range(2):
        with rl.concurrency("reports", 3, 30, also=[("reports:hour", FixedWindow(2, 3600))]):
            assert free_slots(rl, "reports", 3) == 2
    with pytest.raises(ConcurrencyLimitExceeded) as refused:
        with rl.concurrency("reports", 3, 30, also=[("reports:hour", FixedWindow(2, 3600))]):
            pytest.fail("the rate limit admitted a third")
    assert refused.value.decision.binding == 0 and refused.value.decision.name == "fixedwindow"
    assert r.exists("reports") == 0  # no slot taken
    # And a concurrency limit refusing takes no token of the rate limit.
    with rl.concurrency("reports2", 1, 30):
        with pytest.raises(ConcurrencyLimitExceeded):
            with rl.concurrency("reports2", 1, 30, also=[("hour2", GCRA(0, 1, 3600))]):
                pass
    assert rl.gcra("hour2", 0, 1, 3600).allowed


def test_all_takes_a_concurrency_limit_with_its_lease_id(url: str, r: redis.Redis) -> None:
    rl = sync_limiter(url)
    pairs = [("rate", GCRA(5, 1, 1)), ("conc", Concurrency(1, 30, "job-1"))]
    assert rl.all(pairs).allowed
    assert r.zrange("conc", 0, -1) == [b"1:job-1"]
    assert rl.all([("rate", GCRA(5, 1, 1)), ("conc", Concurrency(1, 30, "job-2"))]).limited
    with pytest.raises(ValueError, match="lease_id"):
        rl.all([("conc", Concurrency(1, 30))])


# ---------------------------------------------------------------- the context managers

def test_with_acquires_refuses_with_retry_after_and_releases(url: str, r: redis.Redis) -> None:
    rl = sync_limiter(url)
    with rl.concurrency("k", limit=1, lease=30) as lease:
        assert isinstance(lease, ConcurrencyLease) and lease.held
        assert len(lease.id) == 32 and r.zrange("k", 0, -1) == [f"1:{lease.id}".encode()]
        with pytest.raises(ConcurrencyLimitExceeded) as refused:
            with rl.concurrency("k", limit=1, lease=30):
                pytest.fail("a second holder of one slot")
        assert 0 < refused.value.retry_after_ms <= 30_000
        assert refused.value.retry_after_s == -(-refused.value.retry_after_ms // 1000)
        assert refused.value.key == "k" and "retry after" in str(refused.value)
    assert not lease.held and r.exists("k") == 0
    with pytest.raises(ConcurrencyLimitExceeded) as never:
        with rl.concurrency("k", limit=1, lease=30, tokens=2):
            pass
    assert never.value.retry_after_ms == -1 and never.value.retry_after_s is None


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_the_slot_is_freed_when_the_body_raises(url: str, r: redis.Redis, flavour: str) -> None:
    class Boom(Exception):
        pass

    if flavour == "sync":
        rl = sync_limiter(url)
        with pytest.raises(Boom):
            with rl.concurrency("k", 1, 30):
                raise Boom()
    else:
        async def run() -> None:
            arl = async_limiter(url)
            with pytest.raises(Boom):
                async with arl.concurrency("k", 1, 30):
                    raise Boom()
        asyncio.run(run())
    assert r.exists("k") == 0
    assert sync_limiter(url).acquire("k", 1, 30, "next").allowed


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_failed_release_is_logged_never_masking_the_body_exception(
        url: str, r: redis.Redis, flavour: str, caplog: pytest.LogCaptureFixture) -> None:
    class Boom(Exception):
        pass

    def break_the_key() -> None:
        r.delete("k")
        r.set("k", "not a concurrency limit")  # RELEASE then answers WRONGTYPE

    caplog.set_level(logging.WARNING, logger="redis_ratelimit")
    if flavour == "sync":
        with pytest.raises(Boom):
            with sync_limiter(url).concurrency("k", 1, 30):
                break_the_key()
                raise Boom()
        with sync_limiter(url).concurrency("k2", 1, 30):  # no exception: none raised either
            r.set("k2", "x")
    else:
        async def run() -> None:
            arl = async_limiter(url)
            with pytest.raises(Boom):
                async with arl.concurrency("k", 1, 30):
                    break_the_key()
                    raise Boom()
            async with arl.concurrency("k2", 1, 30):
                r.set("k2", "x")
        asyncio.run(run())
    failures = [rec for rec in caplog.records if "releasing concurrency lease" in rec.message]
    assert len(failures) == 2 and "WRONGTYPE" in failures[0].message


def test_sync_threads_never_exceed_the_limit(url: str, r: redis.Redis) -> None:
    """20 threads share one client; each holds a slot for 0-3 ms, 15 times."""
    rl, limit, workers, rounds = sync_limiter(url), 3, 20, 15
    lock = threading.Lock()
    state = {"in_flight": 0, "max": 0, "refused": 0, "held": 0}
    errors: List[BaseException] = []

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        done = 0
        try:
            while done < rounds:
                try:
                    with rl.concurrency("shared", limit=limit, lease=10):
                        with lock:
                            state["in_flight"] += 1
                            state["max"] = max(state["max"], state["in_flight"])
                        time.sleep(rnd.uniform(0, 0.003))
                        with lock:
                            state["in_flight"] -= 1
                            state["held"] += 1
                    done += 1
                except ConcurrencyLimitExceeded:
                    with lock:
                        state["refused"] += 1
                    time.sleep(0.001)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert state["held"] == workers * rounds
    assert state["max"] == limit, state  # reached, never exceeded
    assert state["refused"] > 0
    assert free_slots(rl, "shared", limit) == limit  # no slot lost


def test_asyncio_tasks_never_exceed_the_limit(url: str, r: redis.Redis) -> None:
    """50 tasks share one asyncio client; each holds a slot for 0-3 ms, 10 times."""
    limit, tasks, rounds = 4, 50, 10
    state = {"in_flight": 0, "max": 0, "refused": 0, "held": 0}

    async def run() -> None:
        arl = async_limiter(url)

        async def worker(seed: int) -> None:
            rnd = random.Random(seed)
            done = 0
            while done < rounds:
                try:
                    async with arl.concurrency("shared", limit=limit, lease=10) as lease:
                        assert isinstance(lease, AsyncConcurrencyLease)
                        state["in_flight"] += 1
                        state["max"] = max(state["max"], state["in_flight"])
                        await asyncio.sleep(rnd.uniform(0, 0.003))
                        state["in_flight"] -= 1
                        state["held"] += 1
                    done += 1
                except ConcurrencyLimitExceeded:
                    state["refused"] += 1
                    await asyncio.sleep(0.001)

        await asyncio.wait_for(asyncio.gather(*(worker(i) for i in range(tasks))), 60)

    asyncio.run(run())
    assert state["held"] == tasks * rounds
    assert state["max"] == limit, state
    assert state["refused"] > 0
    assert free_slots(sync_limiter(url), "shared", limit) == limit


# ---------------------------------------------------------------- leases: renewal and expiry

# Renewed every 0.17 s: a renewal thread or task delayed by 0.3 s on a busy machine still keeps it.
LEASE_S = 0.5


def contender_admitted_during(rl: RateLimiter, key: str, seconds: float) -> Optional[float]:
    """Tries to take the one slot of ``key`` every 20 ms for ``seconds``: when it got in (s from
    the start), or ``None``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if rl.acquire(key, 1, LEASE_S, "contender").allowed:
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def test_background_renewal_keeps_the_lease_past_its_lease_time(url: str, r: redis.Redis) -> None:
    rl = sync_limiter(url)
    with rl.concurrency("long", 1, LEASE_S) as lease:
        assert contender_admitted_during(rl, "long", 3 * LEASE_S) is None
        assert lease.renewals >= 5 and not lease.lost
    assert r.exists("long") == 0
    # Without renewal the same work loses its slot after the lease time: what renewal prevents.
    with rl.concurrency("short", 1, LEASE_S, renew=False) as lease:
        admitted = contender_admitted_during(rl, "short", 3 * LEASE_S)
        assert admitted is not None and admitted >= LEASE_S - 0.05
        assert lease.renewals == 0


def test_asyncio_background_renewal_keeps_the_lease(url: str, r: redis.Redis) -> None:
    rl = sync_limiter(url)

    async def run(renew: bool) -> AsyncConcurrencyLease:
        arl = async_limiter(url)
        async with arl.concurrency("long", 1, LEASE_S, renew=renew) as lease:
            # The contender runs in a thread: the loop stays free to renew.
            admitted = await asyncio.get_running_loop().run_in_executor(
                None, contender_admitted_during, rl, "long", 3 * LEASE_S)
            assert (admitted is None) == renew
        return lease

    kept = asyncio.run(run(True))
    assert kept.renewals >= 5 and not kept.lost and r.exists("long") == 0
    lapsed = asyncio.run(run(False))
    assert lapsed.renewals == 0


def test_a_lost_lease_is_noticed_and_logged(url: str, r: redis.Redis,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="redis_ratelimit")
    rl = sync_limiter(url)
    told: List[ConcurrencyLease] = []
    with rl.concurrency("k", 1, LEASE_S, on_lost=told.append) as lease:
        r.delete("k")  # as if it had expired
        deadline = time.monotonic() + 2
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.lost
        time.sleep(0.05)
        assert told == [lease]
        renewals = lease.renewals
        time.sleep(LEASE_S)
        assert lease.renewals == renewals  # renewing stopped
    assert any("was lost" in rec.message for rec in caplog.records)


HOLDER = """
import sys, time
from redis_ratelimit import RateLimiter
rl = RateLimiter.from_url(sys.argv[1], timeout_s=5)
lease = rl.concurrency("crash", 1, float(sys.argv[2]))
lease.__enter__()
print("held", flush=True)
time.sleep(60)
"""


def test_a_killed_holders_slot_frees_after_its_lease(url: str, r: redis.Redis) -> None:
    lease_s = 0.5
    env = dict(os.environ, PYTHONPATH=str(Path(redis_ratelimit.__file__).resolve().parent.parent))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url, str(lease_s)],
                              stdout=subprocess.PIPE, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == b"held"
        time.sleep(2 * lease_s)  # held past its lease: the holder's thread renews it
        rl = sync_limiter(url)
        assert rl.acquire("crash", 1, lease_s, "next").limited
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    refused = rl.acquire("crash", 1, lease_s, "next")
    assert refused.limited and 0 < refused.retry_after_ms <= lease_s * 1000
    free_at = time.monotonic() + refused.retry_after_ms / 1000
    while not rl.acquire("crash", 1, lease_s, "next").allowed:
        assert time.monotonic() < free_at + 1.0, "the dead holder's slot never freed"
        time.sleep(0.005)
    freed = time.monotonic()
    # Not before its lease ran out (the server decides), and soon after it.
    assert freed >= free_at - 0.01
    assert freed - free_at < 0.25


# ---------------------------------------------------------------- options and misuse

def test_options_are_checked(url: str) -> None:
    rl = sync_limiter(url)
    with pytest.raises(ValueError, match="lease"):
        rl.concurrency("k", 1, 0)
    with pytest.raises(ValueError, match="renew_every_s"):
        rl.concurrency("k", 1, 30, renew_every_s=0)
    with pytest.raises(ValueError, match="rate limits"):
        rl.concurrency("k", 1, 30, also=[("k2", Concurrency(1, 30))])
    with pytest.raises(redis.exceptions.ResponseError, match="lease id"):
        rl.acquire("k", 1, 30, "x" * 129)  # the module's concurrency-max-id-length: 128
    lease = rl.concurrency("k", 1, 30, lease_id="mine", renew=False)
    assert lease.id == "mine" and lease.renew_every_s == 10
    assert lease.release() is None  # not held: nothing sent
    assert lease.acquire().allowed and lease.held
    with pytest.raises(RuntimeError, match="already held"):
        lease.acquire()
    assert lease.release() is not None and lease.release() is None


def test_the_engine_is_the_one_the_suite_runs_on(url: str) -> None:
    rl = sync_limiter(url)
    rl.acquire("k", 1, 30, "a")
    assert rl.engine == ("module" if TEST_ENGINE == "module" else "functions")


def test_a_server_restart_is_a_redis_error_at_acquisition() -> None:
    with RedisServer() as s:
        rl = RateLimiter.from_url(f"redis://127.0.0.1:{s.port}")
        assert rl.acquire("k", 1, 30, "a").allowed
    with pytest.raises(redis.exceptions.ConnectionError):
        with rl.concurrency("k", 1, 30):
            pass


# ---------------------------------------------------------------- middleware and FastAPI

class InFlight:
    """In-flight requests, counted by the app itself."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.max = 0

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.max = max(self.max, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1

    def wait_for_max(self, n: int, timeout_s: float) -> None:
        """Hold a request until n have been in flight at once (or timeout_s passed), so that a
        loaded machine cannot serialize the threads and hide a limit that admits too many."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if self.max >= n:
                    return
            time.sleep(0.001)


REPORTS = [Rule(Concurrency(3, 10), path="/reports", key=lambda req: "tenant", name="reports")]
REPORTS_KEY = "rl:reports:tenant"


def wsgi_environ(path: str = "/reports") -> Dict[str, Any]:
    return {"REQUEST_METHOD": "GET", "PATH_INFO": path, "REMOTE_ADDR": "10.0.0.1",
            "QUERY_STRING": "", "wsgi.input": io.BytesIO(b"")}


def test_wsgi_concurrency_rule_admits_at_most_n_until_each_body_is_done(
        url: str, r: redis.Redis) -> None:
    """20 threads act as a WSGI server: call the app, iterate the streamed body, close it."""
    seen = InFlight()

    def reports(environ: Dict[str, Any], start_response: Any) -> Iterator[bytes]:
        seen.enter()
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body() -> Iterator[bytes]:
            try:
                yield b"part 1\n"
                seen.wait_for_max(3, 2.0)
                time.sleep(random.uniform(0, 0.003))
                yield b"part 2\n"
            finally:
                seen.leave()

        return body()

    app = WSGIRateLimitMiddleware(reports, sync_limiter(url), REPORTS)
    statuses: List[int] = []

    def server_thread() -> None:
        for _ in range(15):
            got: Dict[str, Any] = {}

            def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
                got["status"] = int(status.split()[0])

            body = app(wsgi_environ(), start_response)
            try:
                b"".join(body)
            finally:
                getattr(body, "close", lambda: None)()
            statuses.append(got["status"])
            if got["status"] == 429:
                time.sleep(0.001)

    threads = [threading.Thread(target=server_thread) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen.max == 3, seen.max
    assert statuses.count(200) > 0 and statuses.count(429) > 0
    assert set(statuses) == {200, 429}
    assert free_slots(sync_limiter(url), REPORTS_KEY, 3) == 3


def test_wsgi_holds_the_slot_until_the_server_closes_the_body(url: str, r: redis.Redis) -> None:
    def reports(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"a", b"b"]

    app = WSGIRateLimitMiddleware(reports, sync_limiter(url), REPORTS)
    body = app(wsgi_environ(), lambda status, headers, exc_info=None: None)
    assert list(body) == [b"a", b"b"]
    assert r.zcard(REPORTS_KEY) == 1  # sent, not yet closed: still held
    body.close()  # type: ignore[attr-defined]
    assert r.exists(REPORTS_KEY) == 0

    def failing(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        raise RuntimeError("the app failed")

    app = WSGIRateLimitMiddleware(failing, sync_limiter(url), REPORTS)
    with pytest.raises(RuntimeError):
        app(wsgi_environ(), lambda status, headers, exc_info=None: None)
    assert r.exists(REPORTS_KEY) == 0


def test_a_refused_request_gets_429_with_retry_after_and_is_not_cached(
        url: str, r: redis.Redis) -> None:
    one = [Rule(Concurrency(1, 10), path="/reports", key=lambda req: "t", name="one")]

    def reports(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"report"]

    app = WSGIRateLimitMiddleware(reports, sync_limiter(url), one)
    got: List[Tuple[int, Dict[str, str]]] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> None:
        got.append((int(status.split()[0]), dict(headers)))

    first = app(wsgi_environ(), start_response)  # its body not closed yet: the slot is held
    list(app(wsgi_environ(), start_response))
    status, headers = got[-1]
    # A slot frees whenever a request ends: retry in 1 s, not when the 10 s lease would expire.
    assert status == 429 and headers["Retry-After"] == "1"
    assert headers["RateLimit"] == '"one";r=0;t=1' and headers["RateLimit-Policy"] == '"one";q=1'
    first.close()  # type: ignore[attr-defined]
    list(app(wsgi_environ(), start_response))  # admitted at once: the refusal was not cached
    assert [s for s, _ in got] == [200, 429, 200]


async def asgi_call(app: Any, path: str = "/reports") -> Tuple[int, List[Dict[str, Any]]]:
    sent: List[Dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": path, "headers": [],
             "client": ("10.0.0.1", 1234), "query_string": b""}

    async def receive() -> Dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], sent


def test_asgi_concurrency_rule_admits_at_most_n_until_the_last_body_message(
        url: str, r: redis.Redis) -> None:
    seen = InFlight()

    async def reports(scope: Any, receive: Any, send: Any) -> None:
        seen.enter()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part 1\n", "more_body": True})
        await asyncio.sleep(random.uniform(0, 0.003))
        seen.leave()  # before the last message: the slot is given back after it
        await send({"type": "http.response.body", "body": b"part 2\n"})
        await asyncio.sleep(0.002)  # the app lingers after its response: the slot does not

    async def run() -> List[int]:
        app = ASGIRateLimitMiddleware(reports, async_limiter(url), REPORTS)

        async def client() -> List[int]:
            statuses = []
            for _ in range(10):
                status, _ = await asgi_call(app)
                statuses.append(status)
                if status == 429:
                    await asyncio.sleep(0.001)
            return statuses

        results = await asyncio.wait_for(asyncio.gather(*(client() for _ in range(50))), 60)
        return [s for statuses in results for s in statuses]

    statuses = asyncio.run(run())
    assert seen.max == 3, seen.max
    assert set(statuses) == {200, 429}
    assert free_slots(sync_limiter(url), REPORTS_KEY, 3) == 3


def test_asgi_releases_after_the_last_body_or_when_the_app_fails(url: str, r: redis.Redis) -> None:
    held: Dict[str, int] = {}

    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        held["mid-stream"] = r.zcard(REPORTS_KEY)
        await send({"type": "http.response.body", "body": b"b"})
        held["after the last body"] = r.zcard(REPORTS_KEY)

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("the app failed mid-stream")

    async def run() -> None:
        status, sent = await asgi_call(
            ASGIRateLimitMiddleware(streaming, async_limiter(url), REPORTS))
        assert status == 200 and [m.get("body") for m in sent[1:]] == [b"a", b"b"]
        with pytest.raises(RuntimeError):
            await asgi_call(ASGIRateLimitMiddleware(failing, async_limiter(url), REPORTS))

    asyncio.run(run())
    assert held == {"mid-stream": 1, "after the last body": 0}
    assert r.exists(REPORTS_KEY) == 0


@pytest.mark.parametrize("flavour", ["wsgi", "asgi"])
def test_concurrency_rules_fail_open_or_closed(refused_port: int, flavour: str) -> None:
    rules = [Rule(Concurrency(1, 5), path="/closed", fail_open=False), Rule(Concurrency(1, 5))]
    url = f"redis://127.0.0.1:{refused_port}"

    def ok_wsgi(environ: Dict[str, Any], start_response: Any) -> List[bytes]:
        start_response("200 OK", [])
        return [b"ok"]

    async def ok_asgi(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    if flavour == "wsgi":
        app = WSGIRateLimitMiddleware(ok_wsgi, RateLimiter.from_url(url), rules)
        got: List[int] = []
        for path in ("/closed", "/open"):
            body = app(wsgi_environ(path), lambda s, h, e=None: got.append(int(s.split()[0])))
            list(body)
        assert got == [503, 200]
    else:
        app2 = ASGIRateLimitMiddleware(ok_asgi, AsyncRateLimiter.from_url(url), rules)

        async def run() -> List[int]:
            return [(await asgi_call(app2, path))[0] for path in ("/closed", "/open")]

        assert asyncio.run(run()) == [503, 200]


def test_a_concurrency_rule_needs_a_limiter_with_leases() -> None:
    class OnlyCheck:
        def check(self, key: str, limit: Any, *, tokens: int = 1,
                  name: Optional[str] = None) -> Any:
            raise AssertionError("not called")

    with pytest.raises(TypeError, match="acquire"):
        WSGIRateLimitMiddleware(lambda e, s: [], OnlyCheck(), REPORTS)
    with pytest.raises(TypeError, match="ConcurrencyLimit"):
        RateLimit(async_limiter("redis://127.0.0.1:1"), Concurrency(1, 5))


def test_fastapi_concurrency_limit_holds_the_slot_until_the_response_is_sent(
        url: str, r: redis.Redis) -> None:
    seen = InFlight()
    limiter = async_limiter(url)
    app = FastAPI()
    two = ConcurrencyLimit(limiter, Concurrency(2, 10), key=lambda req: "t", name="report")

    @app.get("/report", dependencies=[Depends(two)])
    async def report() -> StreamingResponse:
        seen.enter()

        async def body() -> AsyncIterator[bytes]:
            try:
                yield b"part 1\n"
                await asyncio.sleep(0.01)
                yield b"part 2\n"
            finally:
                seen.leave()

        return StreamingResponse(body())

    async def run() -> List[int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            async def get() -> int:
                response = await client.get("/report")
                if response.status_code == 200:
                    assert response.text == "part 1\npart 2\n"
                return response.status_code

            return list(await asyncio.gather(*(get() for _ in range(12))))

    statuses = asyncio.run(run())
    assert seen.max <= 2 and statuses.count(200) >= 2 and 429 in statuses, (seen.max, statuses)
    assert free_slots(sync_limiter(url), "rl:report:t", 2) == 2


@pytest.mark.module_only
def test_a_concurrency_policy_round_trips(url: str) -> None:
    rl = sync_limiter(url)
    rl.policy_set("reports", Concurrency(3, 30.5))
    got = rl.policy_get("reports")
    assert got is not None and got[0] == Concurrency(3, 30.5)
