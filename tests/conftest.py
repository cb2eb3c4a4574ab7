"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ultron.api import prefect_defaults
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


@pytest.fixture(scope="session")
def ultron_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private ULTRON_HOME for the session: trial environments, embedded Redis, scratch."""
    home = tmp_path_factory.mktemp("ultron-home")
    before = os.environ.get("ULTRON_HOME")
    os.environ["ULTRON_HOME"] = str(home)
    yield home
    if before is None:
        os.environ.pop("ULTRON_HOME", None)
    else:
        os.environ["ULTRON_HOME"] = before


@pytest.fixture(scope="session")
def prefect(ultron_home: Path) -> Iterator[None]:
    """Prefect for real, on a temporary database (one per session: it takes 20-30 s)."""
    from prefect.testing.utilities import prefect_test_harness

    prefect_defaults()
    with prefect_test_harness(server_startup_timeout=180):
        yield
