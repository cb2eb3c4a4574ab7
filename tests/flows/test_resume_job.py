"""A job id is one computation: continued with a larger budget, refused with another spec.

The flow calls ``check_job_id`` and ``check_or_store_spec`` (``ultron.master.resume``) before
it spends compute, and a refused run leaves the job as it was.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

import ultron
from ultron.errors import SpecError
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _calls(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _spec(tmp_path: Path, redis_url: str, tag: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": "continued",
        "seed": 5,
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0, "high": 4}, "tag": [tag]},
        "num_iterations": 4,
        "parallelism": 2,
        "cache": False,
        "storage": str(tmp_path / "runs"),
        "redis_url": redis_url,
        **fields,
    }


def test_a_finished_job_continues_with_a_larger_budget(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    job_id = f"continued-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex
    first = ultron.run(_spec(tmp_path, redis_url, tag), job_id=job_id)
    assert first.status == "completed" and len(first.trials) == 4 and len(_calls(calls)) == 4

    more = ultron.run(_spec(tmp_path, redis_url, tag, num_iterations=7), job_id=job_id)

    trained = _calls(calls)
    assert len(trained) == 7  # the first four were not trained again
    assert len({json.dumps(c, sort_keys=True) for c in trained}) == 7
    assert more.status == "completed"
    assert [t.trial_id for t in more.trials] == [f"{i:04d}" for i in range(7)]
    assert more.trials[:4] == first.trials  # the history, as it was
    assert all(t.status is TrialStatus.COMPLETED for t in more.trials)
    # The strategy went on from its saved state: it proposed nothing it had proposed before.
    assert len({t.hyperparameters["x"] for t in more.trials}) == 7
    assert len(json.loads(Path(more.files["trials.json"]).read_text())) == 7


def test_another_model_or_space_under_an_old_id_is_refused(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report's case: no second run mixes into the job's leaderboard."""
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    job_id = f"changed-{uuid.uuid4().hex[:8]}"
    tag = uuid.uuid4().hex
    first = ultron.run(_spec(tmp_path, redis_url, tag, num_iterations=2), job_id=job_id)
    files = {name: Path(path).read_bytes() for name, path in first.files.items()}

    space = {"x": {"type": "uniform", "low": 10, "high": 20}, "tag": [tag]}
    changed = _spec(
        tmp_path,
        redis_url,
        tag,
        model="toy_model:Sleepy",
        search_space=space,
        objective={"mode": "maximize"},  # finalize must not re-rank the old leaderboard
        num_iterations=4,
    )
    with pytest.raises(SpecError) as caught:
        ultron.run(changed, job_id=job_id)
    fields = sorted(issue.field for issue in caught.value.issues)
    assert fields == ["model", "objective.mode", "search_space.x.high", "search_space.x.low"]
    assert len(_calls(calls)) == 2  # nothing was trained
    # The refused run changed nothing: not the job's state, not its result files.
    assert {name: Path(path).read_bytes() for name, path in first.files.items()} == files
    status = redis.Redis.from_url(redis_url).hget(f"ultron:job:{job_id}", "status")
    assert status == b"completed"


@pytest.mark.parametrize("form", ["relative", "absolute"])
def test_a_job_id_that_climbs_out_is_refused_before_anything_is_written(
    tmp_path: Path,
    redis_url: str,
    ultron_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    form: str,
) -> None:
    """The report's case: ``<home>/scratch/<id>/checkpoints`` with ``../`` in the id was a
    folder outside ultron's, and finalize deleted it."""
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    outside = ultron_home.parent / f"not-ultrons-{uuid.uuid4().hex[:8]}"
    planted = outside / "checkpoints" / "precious.txt"
    planted.parent.mkdir(parents=True)
    planted.write_text("not ultron's")
    job_id = f"../../{outside.name}" if form == "relative" else str(outside)
    with pytest.raises(SpecError) as caught:
        ultron.run(_spec(tmp_path, redis_url, "t"), job_id=job_id)
    assert [issue.field for issue in caught.value.issues] == ["job_id"]
    assert planted.read_text() == "not ultron's"
    assert [p.name for p in outside.rglob("*")] == ["checkpoints", "precious.txt"]
    assert not (tmp_path / "runs").exists() and _calls(calls) == []
