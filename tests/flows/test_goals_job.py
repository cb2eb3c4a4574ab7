"""A job's goals, whole jobs through ``ultron.run``: a time budget and a target end the job
``completed`` with the reason, in the result, ``best.json`` and ``ultron status``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

import ultron
from ultron.master.overview import overview
from ultron.paths import artifact_key
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[2] / "tests" / "data" / "toy"
GRACE_S = 3.0

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _events(calls: Path, event: str) -> list[dict[str, Any]]:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [e for e in map(json.loads, lines) if e["event"] == event]


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(path))
    monkeypatch.setenv("ULTRON_CANCEL_GRACE", str(GRACE_S))
    return path


def _summary_artifact(job_id: str) -> str:
    """The markdown of the job's summary artifact on the flow run."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    key = artifact_key(job_id, "summary")
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
        )
    return str(found[0].data)


def _run(tmp_path: Path, redis_url: str, **fields: Any) -> ultron.HPOResult:
    return ultron.run(
        {
            "name": "goals",
            "code": str(TOY),
            "model": "toy_model:Clocked",
            "redis_url": redis_url,
            "storage": str(tmp_path / "runs"),
            **fields,
        }
    )


def test_a_time_budget_ends_the_job_completed(tmp_path: Path, redis_url: str, calls: Path) -> None:
    budget_s = 10.0
    result = _run(
        tmp_path,
        redis_url,
        search_space={"x": {"type": "uniform", "low": 0.0, "high": 1.0}},
        budget={"trials": 100, "time": f"{budget_s:g} s"},
        parallelism=2,
    )
    assert (result.status, result.end_reason) == ("completed", "time budget"), result.timings
    starts, ends = _events(calls, "start"), _events(calls, "end")
    first = min(e["at"] for e in starts)
    # From the job's first trial on: nothing starts past the budget, everything has ended
    # within the grace after it (1 s of margin for a loaded machine's start-ups).
    assert max(e["at"] for e in starts) <= first + budget_s
    assert max(e["at"] for e in ends) <= first + budget_s + GRACE_S + 1.0
    # The whole task, its set-up and last writes included (5 s of margin for those), less the
    # start of its workers (at its first trial, inside the task: a loaded machine's seconds).
    searched = result.timings["search_loop"] - result.timings["start_workers"]
    assert searched <= budget_s + GRACE_S + 5.0
    assert 2 <= len(result.trials) == len(starts) < 100
    assert all(t.status in (TrialStatus.COMPLETED, TrialStatus.STOPPED) for t in result.trials)
    best = json.loads(Path(result.files["best.json"]).read_text())
    assert best["end_reason"] == "time budget"
    assert overview(redis.Redis.from_url(redis_url), result.job_id).end_reason == "time budget"


def test_a_target_ends_the_job_at_the_first_trial_that_reaches_it(
    tmp_path: Path, redis_url: str, calls: Path
) -> None:
    result = _run(
        tmp_path,
        redis_url,
        search_space={"x": list(range(10)), "sleep": [0.5]},  # short: they queue
        strategy="grid",  # every x once, in an order seeded by the job's seed
        loop="async",
        parallelism=2,
        objective={"mode": "maximize", "target": 7},
        num_iterations=10,
    )
    assert result.status == "completed"
    assert result.end_reason is not None and result.end_reason.startswith("target reached by")
    named = result.end_reason.rsplit(" ", 1)[-1]
    reached = next(t for t in result.trials if t.trial_id == named)
    assert reached.status is TrialStatus.COMPLETED and reached.score is not None
    assert reached.score >= 7
    # The first to reach it (the grid's seeded order, so not always trial 0003): every other
    # trial that completed scored less; nothing started after it. Half-second trials queue
    # behind the 2 workers (ultron.master.async_loop): at most 2 x 2 in flight, the one that
    # reached it included. The others were stopped: running ones, and queued ones that
    # returned without starting (all three of them where the workers were slow to start the
    # queued ones on a loaded machine, and a result came in just before the one that reached it).
    completed = [t for t in result.trials if t.status is TrialStatus.COMPLETED and t != reached]
    assert all(t.score is not None and t.score < 7 for t in completed)
    stopped = [t for t in result.trials if t.status is TrialStatus.STOPPED]
    never = [t for t in stopped if "before it started" in (t.error or "")]
    assert len(stopped) <= 3
    assert all(t.score is None for t in never)
    assert len(completed) + len(stopped) + 1 == len(result.trials)
    assert max(t.trial_id for t in result.trials) <= f"{int(named) + 3:04d}"
    assert len(_events(calls, "start")) == len(result.trials) - len(never) < 10
    best = json.loads(Path(result.files["best.json"]).read_text())
    assert best["end_reason"] == result.end_reason
    assert f"Ended: {result.end_reason}" in _summary_artifact(result.job_id)
