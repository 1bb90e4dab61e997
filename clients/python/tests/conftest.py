"""Fixtures: a redis-server with the module ($RATELIMIT_MODULE) on a free loopback port, or
without it under ``RATELIMIT_TEST_ENGINE=functions`` (tests/helpers.py)."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest
import redis

from tests.helpers import TEST_ENGINE, RedisServer, away_from_window_end, free_port


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "module_only: needs the module (server-side policies); skipped when the suite "
        "runs on the Functions library (RATELIMIT_TEST_ENGINE=functions)")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    if TEST_ENGINE == "module":
        return
    skip = pytest.mark.skip(reason="module only: server-side policies are module data")
    for item in items:
        if item.get_closest_marker("module_only"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


@pytest.fixture
def r(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis("127.0.0.1", server.port, socket_timeout=5)
    client.flushall()
    if TEST_ENGINE == "module":
        client.execute_command("RL.POLICY", "LOAD", "REPLACE", "")
    # Tests count in windows of 60 s aligned to the clock: each starts at least 1.5 s before
    # a minute ends (expected cost: 1.5/60 of the tests wait 0.75 s).
    away_from_window_end(client, 60)
    yield client
    client.close()


@pytest.fixture
def url(server: RedisServer, r: redis.Redis) -> str:
    return f"redis://127.0.0.1:{server.port}"


@pytest.fixture
def refused_port() -> int:
    """A loopback port nothing listens on."""
    port = free_port()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    return port
