"""Whole HPO jobs through ``ultron.run``: four Prefect tasks, a Dask LocalCluster, real Redis."""

from __future__ import annotations

import csv
import json
import uuid
from pathlib import Path

import pytest
import redis

import ultron
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.progress import ProgressEvent, listening
from ultron.tasks.acquire_resources import default_max_units
from ultron.trial_records import TrialStatus

REPO = Path(__file__).parents[2]
TOY = REPO / "tests" / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _read_artifacts(job_id: str) -> dict[str, object]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    key = "".join(c if c.isalnum() else "-" for c in job_id.lower())
    # Filtered on the server: it holds every earlier test's artifacts too, more than a page.
    only_this_job = ArtifactFilter(key=ArtifactFilterKey(like_=key))
    with get_client(sync_client=True) as client:
        found = {
            a.key: a
            for a in client.read_artifacts(artifact_filter=only_this_job)
            if a.key and a.key.startswith(key)
        }
    return found


def test_quickstart_end_to_end(tmp_path: Path, redis_url: str) -> None:
    result = ultron.run(
        REPO / "examples" / "quickstart" / "job.yaml",
        redis_url=redis_url,
        storage=str(tmp_path / "runs"),
    )
    assert result.status == "completed"
    assert len(result.trials) == 12  # exactly num_iterations
    scored = [t.score for t in result.trials if t.status.ok]
    assert scored and result.best_score == max(scored)  # maximize accuracy
    best = next(t for t in result.trials if t.score == result.best_score)
    assert result.best_config == best.hyperparameters
    assert result.best_score > 0.5  # a real model learned something

    files = {name: Path(path) for name, path in result.files.items()}
    assert json.loads(files["best.json"].read_text())["best_config"] == result.best_config
    rows = list(csv.DictReader(files["leaderboard.csv"].open()))
    assert len(rows) == len(scored) and float(rows[0]["accuracy"]) == result.best_score
    assert len(json.loads(files["trials.json"].read_text())) == 12
    curves = json.loads(files["curves.json"].read_text())
    assert all(len(curves[t.trial_id]) == 15 for t in result.trials if t.status.ok)

    checkpoints = Path(result.results_url) / "checkpoints"
    for trial in result.trials:  # finalize waited for every upload: the last two, committed
        committed = sorted(
            p.parent.name for p in (checkpoints / trial.trial_id).glob("*/_COMMITTED")
        )
        assert committed == ["epoch-0013", "epoch-0014"]

    artifacts = _read_artifacts(result.job_id)
    assert any(k.endswith("-leaderboard") for k in artifacts)
    assert any(k.endswith("-progress") for k in artifacts)

    client = redis.Redis.from_url(redis_url)
    limiter = ResourceLimiter(client, max_units=default_max_units())
    assert limiter.in_use() == 0
    assert list(client.scan_iter(match=f"ultron:job:{result.job_id}:run:*")) == []
    saved = client.hgetall(f"ultron:job:{result.job_id}")  # what a restarted master reads
    assert saved[b"status"] == b"completed"
    assert client.hlen(f"ultron:job:{result.job_id}:trials") == 12
    assert "rng" in json.loads(saved[b"algorithm"])


@pytest.mark.parametrize("loop", ["batch", "async"])
def test_small_space_trains_each_configuration_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loop: str
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    tag = uuid.uuid4().hex  # a fresh configuration space: the embedded cache outlives jobs
    events: list[ProgressEvent] = []
    with listening(events.append):
        result = ultron.run(
            {
                "name": "small-space",
                "code": str(TOY),
                "model": "toy_model:Quadratic",
                "search_space": {"x": [0, 1, 2, 3], "tag": [tag]},
                "num_iterations": 10,
                "parallelism": 2,
                "loop": loop,
                "storage": str(tmp_path / "runs"),
            }  # no redis_url: the embedded server
        )
    trained = [json.loads(line) for line in calls.read_text().splitlines()]
    distinct = {json.dumps(t, sort_keys=True) for t in (x.hyperparameters for x in result.trials)}
    assert len(result.trials) == 10
    assert len(trained) == len(distinct)  # each configuration trained once
    assert result.cache_hits == 10 - len(distinct)
    assert sum(t.status is TrialStatus.CACHED for t in result.trials) == result.cache_hits
    assert result.best_score == min(t.score for t in result.trials if t.score is not None)
    # One when the job is accepted (none done yet), then one per trial, cached ones too.
    assert [e.done for e in events] == list(range(0, 11))
    assert events[-1].best_score == result.best_score


def test_failing_trial_is_recorded_and_job_completes(tmp_path: Path, redis_url: str) -> None:
    result = ultron.run(
        {
            "name": "failures",
            "code": str(TOY),
            "model": "toy_model:Behaves",
            "search_space": {"behaviour": ["ok", "raise"], "x": [1.0, 2.0]},
            "strategy": "grid",
            "num_iterations": 4,
            "parallelism": 2,
            "objective": {"metric": "loss"},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    assert result.status == "completed"
    by_behaviour: dict[str, list] = {"ok": [], "raise": []}
    for trial in result.trials:
        by_behaviour[trial.hyperparameters["behaviour"]].append(trial)
    assert [t.status for t in by_behaviour["raise"]] == [TrialStatus.FAILED] * 2
    assert all("this configuration always fails" in t.traceback for t in by_behaviour["raise"])
    assert all(t.attempts == 1 for t in by_behaviour["raise"])  # user errors are not retried
    assert [t.status for t in by_behaviour["ok"]] == [TrialStatus.COMPLETED] * 2
    assert result.best_config == {"behaviour": "ok", "x": 1.0}
