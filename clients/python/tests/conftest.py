"""Fixtures: a redis-server with the module ($RATELIMIT_MODULE) on a free loopback port."""

from __future__ import annotations

import socket
from typing import Iterator

import pytest
import redis

from tests.helpers import RedisServer, free_port


@pytest.fixture(scope="session")
def server() -> Iterator[RedisServer]:
    with RedisServer() as s:
        yield s


@pytest.fixture
def r(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis("127.0.0.1", server.port, socket_timeout=5)
    client.flushall()
    client.execute_command("RL.POLICY", "LOAD", "REPLACE", "")
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
