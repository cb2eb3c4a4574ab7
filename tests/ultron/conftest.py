"""Fixtures of the limiter's tests: a namespace of keys per test, a limiter on it, a poller."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
import redis

from ultron.limiter.resource_limiter import ResourceLimiter

MAX_UNITS = 10  # the capacity of the limiter fixture; the test modules use the same number

Poll = Callable[..., bool]


@pytest.fixture
def namespace() -> str:
    """Keys of one test, apart from every other test's on the shared server."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def limiter(redis_client: redis.Redis, namespace: str) -> ResourceLimiter:
    return ResourceLimiter(redis_client, max_units=MAX_UNITS, namespace=namespace)


def _poll(condition: Callable[[], bool], *, timeout_s: float, every_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return condition()


@pytest.fixture
def poll() -> Poll:
    """``poll(condition, timeout_s=...)``: whether ``condition()`` came true within the time."""
    return _poll
