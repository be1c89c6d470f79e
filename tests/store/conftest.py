"""The store tests' Redis: one real redis-server per module, a store per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from bot.store.store import JobStore
from harness.redis_server import RedisServer, running_redis
from tests.store.kit import open_store


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture
def client(server: RedisServer) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(server.url)
    yield connection
    connection.close()


@pytest.fixture
def store(server: RedisServer) -> Iterator[JobStore]:
    jobs = open_store(server.url, events_maxlen=50, snapshot_max_bytes=4096)
    yield jobs
    jobs.gateway.client.close()
