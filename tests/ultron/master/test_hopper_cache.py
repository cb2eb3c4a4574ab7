"""A hopper job and the score cache (real Redis): answered models are not trained."""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import redis

from ultron.master.hopper import HopperJob, HopperRunner
from ultron.master.score_cache import ScoreCache


def test_models_the_cache_answers_are_not_trained(tmp_path: Path, redis_url: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(2):
        np.savez(data / f"s{i}.npz", x=np.zeros((4, 2)), y=np.zeros(4))
    job = HopperJob(
        job_id="cached",
        model="absent:Model",  # never imported: no sub-epoch runs
        configs={"a": {"lr": 0.1}, "b": {"lr": 0.2}},
        data_url=str(data),
        storage=str(tmp_path / "job"),
        partitions=2,
        epochs=3,
    )
    cache = ScoreCache(
        redis.Redis.from_url(redis_url), code_hash="c0de", model=job.model, seed=0,
        metric="loss", tenant="t", namespace=f"test-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    # No Dask client: a job whose every model the cache answers submits nothing.
    runner = HopperRunner(None, job, cache=cache)
    for model in job.configs:
        cache.put(runner.cache_key(model), {"score": 0.5, "metrics": {"loss": 0.5}})
    other = HopperRunner(None, HopperJob(**{**job.__dict__, "epochs": 4}))
    assert cache.get_many([other.cache_key("a")], job_id="x", trial_ids=["a"]) == [None]

    result = runner.run()

    assert sorted(result.cached) == ["a", "b"]
    assert all(hit["score"] == 0.5 for hit in result.cached.values())
    assert result.records == [] and result.orders == {"a": [], "b": []}
