"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from ultron.redis_server import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Redis server, embedded and private to this test session."""
    with EmbeddedRedis(tmp_path_factory.mktemp("redis"), appendonly=False) as server:
        yield server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the session's Redis (``decode_responses=True``), closed after the test.

    The server is shared by all tests: use keys under a namespace of your own, do not flush.
    """
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()
