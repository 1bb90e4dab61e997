"""Concurrency limits from Python (issue 32): ``with limiter.concurrency(key, limit, lease)`` and
``async with``, against a real server, on the engine the suite runs on (the module, or the
Functions library under ``RATELIMIT_TEST_ENGINE=functions``), and through ``EVALSHA``.

In-flight counts are measured by the workers themselves (a counter each one raises on entering
and lowers before leaving), never read from the server."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, List, Optional

import pytest
import redis

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

LEASE_S = 0.3


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
        assert contender_admitted_during(rl, "long", 4 * LEASE_S) is None
        assert lease.renewals >= 6 and not lease.lost
    assert r.exists("long") == 0
    # Without renewal the same work loses its slot after the lease time: what renewal prevents.
    with rl.concurrency("short", 1, LEASE_S, renew=False) as lease:
        admitted = contender_admitted_during(rl, "short", 4 * LEASE_S)
        assert admitted is not None and admitted >= LEASE_S - 0.05
        assert lease.renewals == 0


def test_asyncio_background_renewal_keeps_the_lease(url: str, r: redis.Redis) -> None:
    rl = sync_limiter(url)

    async def run(renew: bool) -> AsyncConcurrencyLease:
        arl = async_limiter(url)
        async with arl.concurrency("long", 1, LEASE_S, renew=renew) as lease:
            # The contender runs in a thread: the loop stays free to renew.
            admitted = await asyncio.get_running_loop().run_in_executor(
                None, contender_admitted_during, rl, "long", 4 * LEASE_S)
            assert (admitted is None) == renew
        return lease

    kept = asyncio.run(run(True))
    assert kept.renewals >= 6 and not kept.lost and r.exists("long") == 0
    lapsed = asyncio.run(run(False))
    assert lapsed.renewals == 0


def test_a_lost_lease_is_noticed_and_logged(url: str, r: redis.Redis,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="redis_ratelimit")
    rl = sync_limiter(url)
    with rl.concurrency("k", 1, LEASE_S) as lease:
        r.delete("k")  # as if it had expired
        deadline = time.monotonic() + 2
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.02)
        assert lease.lost
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
