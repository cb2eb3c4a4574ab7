"""A run that the job's lifecycle refuses leaves the job's record in Redis as it was."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from ultron.errors import SpecError
from ultron.master.lifecycle import job_lifecycle
from ultron.redis import keys
from ultron.spec.job import JobSpec


def _spec(tmp_path: Path, redis_url: str, **fields: Any) -> JobSpec:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "model.py").write_text("class Model: ...\n")
    return JobSpec.model_validate(
        {
            "code": str(code),
            "model": "model:Model",
            "search_space": {"x": [1, 2]},
            "num_iterations": 2,
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
            **fields,
        },
        context={"check_paths": False},
    )


def _run(spec: JobSpec, job_id: str) -> None:
    """The lifecycle around an empty body, as the flow wraps its tasks."""
    with job_lifecycle(spec, job_id, finalize=lambda *args: {}):
        pass


def _record(client: redis.Redis, job_id: str) -> dict[str, Any]:
    """Every key of the job, and what it holds."""
    found = {}
    for key in client.scan_iter(match=f"*{job_id}*"):
        kind = client.type(key)
        found[key] = client.hgetall(key) if kind == "hash" else client.dump(key)
    return found


def test_a_refused_resume_leaves_the_jobs_record_untouched(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    job_id = f"lifecycle-{uuid.uuid4().hex[:8]}"
    _run(_spec(tmp_path, redis_url, seed=0), job_id)
    before = _record(redis_client, job_id)
    assert "heartbeat" in before[keys.job(job_id)]  # the first run held the job
    with pytest.raises(SpecError, match="seed"):
        _run(_spec(tmp_path, redis_url, seed=1), job_id)  # another computation: refused
    assert _record(redis_client, job_id) == before  # no heartbeat stamped, no lease left


def test_a_refused_first_run_leaves_no_record(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    job_id = f"lifecycle-{uuid.uuid4().hex[:8]}"
    results = tmp_path / "runs" / job_id
    results.mkdir(parents=True)
    (results / "trials.json").write_text('[{"trial_id": "0000"}]')  # another Redis ran the id
    with pytest.raises(SpecError, match="job_id"):
        _run(_spec(tmp_path, redis_url), job_id)
    assert _record(redis_client, job_id) == {}
