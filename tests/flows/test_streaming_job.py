"""The job's data service feeding real trials, and data validation stopping a job early."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import redis

import ultron
from ultron.datamanager import DataValidationError
from ultron.limiter.resource_limiter import ResourceLimiter

pytest.importorskip("tensorflow", reason="the data service needs the tf extra")
pytest.importorskip("great_expectations", reason="data validation needs the data extra")

TOY = Path(__file__).parents[1] / "data" / "toy"
ROWS = 600

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _data(path: Path, *, bad_label: bool = False) -> Path:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, ROWS)
    if bad_label:
        y[17] = 9
    np.savez(path, x=rng.random((ROWS, 4), dtype=np.float32), y=y, id=np.arange(ROWS))
    return path


def _spec(tmp_path: Path, redis_url: str, data: Path, **extra: object) -> dict:
    return {
        "name": "streaming",
        "code": str(TOY),
        "model": "toy_model:Streamer",
        "search_space": {"x": [1.0, 2.0], "tag": [uuid.uuid4().hex]},
        "strategy": "grid",
        "num_iterations": 2,
        "parallelism": 2,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        "data": {
            "url": str(data),
            "batch_size": 32,
            "shuffle_buffer": ROWS,
            "expectations": [{"expect": "in_set", "column": "y", "values": [0, 1, 2, 3]}],
        },
        **extra,
    }


def test_two_trials_read_one_service_each_epoch_once_in_its_own_order(
    tmp_path: Path,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    service_processes: Callable[[str], list[str]],
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    result = ultron.run(_spec(tmp_path, redis_url, _data(tmp_path / "train.npz")))
    assert result.status == "completed" and len(result.trials) == 2
    log = [json.loads(line) for line in calls.read_text().splitlines()]
    assert len(log) == 4  # two trials x two epochs
    for entry in log:
        assert sorted(entry["ids"]) == list(range(ROWS))  # every example of the epoch, once
    first = {e["epoch"]: e for e in log if e["x"] == 1.0}
    second = {e["epoch"]: e for e in log if e["x"] == 2.0}
    assert first[0]["ids"] != second[0]["ids"]  # each trial its own shuffled order
    assert first[0]["ids"] != first[1]["ids"]  # and a new order each epoch
    overlap = min(first[1]["end"], second[1]["end"]) - max(first[0]["start"], second[0]["start"])
    assert overlap > 0  # they read from the one service at the same time
    assert service_processes(str(tmp_path)) == []


def test_data_that_breaks_an_expectation_stops_the_job_before_any_trial(
    tmp_path: Path,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    service_processes: Callable[[str], list[str]],
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    with pytest.raises(DataValidationError) as info:
        ultron.run(_spec(tmp_path, redis_url, _data(tmp_path / "bad.npz", bad_label=True)))
    assert "y in_set" in str(info.value)  # the failing expectation, named
    assert not calls.exists()  # no trial ran
    # No units held, none waited for: by this job (the session's Redis is shared with the
    # worker's other tests, whose killed jobs' leases live out their TTL).
    (job_dir,) = (tmp_path / "runs").glob("streaming-*")
    limiter = ResourceLimiter(redis.Redis.from_url(redis_url), max_units=64)
    assert job_dir.name not in limiter.holders()
    assert job_dir.name not in [w.job_id for w in limiter.waiters()]
    assert service_processes(str(tmp_path)) == []  # nothing left running
