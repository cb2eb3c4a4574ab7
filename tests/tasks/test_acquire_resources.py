"""A job that cannot get its units waits, then fails clearly, holding nothing afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

import ultron
from ultron.errors import ResourceTimeoutError
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.tasks.acquire_resources import default_max_units

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def test_job_without_units_fails_clearly_and_holds_nothing(tmp_path: Path, redis_url: str) -> None:
    limiter = ResourceLimiter(redis.Redis.from_url(redis_url), max_units=default_max_units())
    hog = limiter.acquire("another-tenants-job", default_max_units() - 1, ttl_s=120)
    assert hog is not None
    try:
        with pytest.raises(ResourceTimeoutError) as info:
            ultron.run(
                {
                    "name": "starved",
                    "code": str(TOY),
                    "model": "toy_model:Quadratic",
                    "search_space": {"x": [1, 2]},
                    "num_iterations": 2,
                    "parallelism": 2,
                    "acquire_timeout": 2,
                    "storage": str(tmp_path / "runs"),
                    "redis_url": redis_url,
                },
                job_id="starved-job",
            )
        message = str(info.value)
        assert "could not acquire 2 units" in message and "Fix:" in message
        assert limiter.in_use() == hog.units  # the starved job holds nothing
        best = json.loads((tmp_path / "runs" / "starved-job" / "best.json").read_text())
        assert best["status"] == "failed" and "ResourceTimeoutError" in best["error"]
        assert best["timings"]["acquire_resources"] >= 2.0  # it waited with retries
    finally:
        limiter.release(hog)
