"""Tenants share a cluster, a Redis and a storage root, and nothing else (issue "Shared safely").

Tenant A runs a job; tenant B runs the same spec (same code, seed and configurations) and trains
every trial anew: the score cache is a tenant's own. A's own rerun is answered by the cache
alone. Each job's checkpoints lie under its own prefix, ``<storage>/<job_id>/checkpoints``, and
tenant B cannot run A's job id: the run is refused naming ``tenant``, and A's trial table, state
and files stay as they were. The toy model counts its trainings in ``TOY_CALLS_FILE``.
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
from ultron.master.job_state import JobStore
from ultron.master.results import HPOResult
from ultron.trial_records import TrialStatus

TOY = Path(__file__).parents[1] / "data" / "toy"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _trainings(calls: Path) -> int:
    """Trainings started so far: each logs its first epoch once (nothing here resumes)."""
    if not calls.exists():
        return 0
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    return sum(1 for row in rows if row.get("event") == "epoch" and row["epoch"] == 0)


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _state(client: redis.Redis, job_id: str) -> tuple[dict[Any, Any], ...]:
    """The job's record, trial table and curves; not the time of its master's last heartbeat,
    which a refused run stamps too: it holds the job's lease (one master at a time) while it
    checks the spec, and changes nothing of the job."""
    store = JobStore(client, job_id)
    record = {
        k: v for k, v in client.hgetall(store.key).items() if k not in ("heartbeat", b"heartbeat")
    }
    return (record, *(client.hgetall(key) for key in (store.trials_key, store.curves_key)))


def test_tenants_share_no_scores_checkpoints_or_job_ids(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    storage = tmp_path / "runs"
    tag = uuid.uuid4().hex  # configurations no earlier test of this session scored
    tenant_a, tenant_b = f"team-a-{tag[:6]}", f"team-b-{tag[:6]}"
    spec = {
        "name": "tenants",
        "code": str(TOY),
        "model": "toy_model:Checkpointed",
        "search_space": {"x": [1.0, 2.0], "tag": [tag]},
        "strategy": "grid",
        "num_iterations": 2,
        "parallelism": 2,
        "seed": 7,
        "storage": str(storage),
        "redis_url": redis_url,
    }

    def run(tenant: str, **more: Any) -> HPOResult:
        return ultron.run({**spec, "tenant": tenant}, **more)

    a = run(tenant_a)
    assert [t.status for t in a.trials] == [TrialStatus.COMPLETED] * 2
    assert _trainings(calls) == 2
    a_files = _files(storage / a.job_id)

    b = run(tenant_b)  # the same computation, another tenant: a cache miss for every trial
    assert b.job_id != a.job_id and b.cache_hits == 0
    assert [t.status for t in b.trials] == [TrialStatus.COMPLETED] * 2
    assert _trainings(calls) == 4
    assert sorted(t.hyperparameters["x"] for t in b.trials) == [1.0, 2.0]

    again = run(tenant_a)  # A's own computation again: all from A's cache
    assert [t.status for t in again.trials] == [TrialStatus.CACHED] * 2
    assert again.cache_hits == 2 and _trainings(calls) == 4

    for job in (a, b):  # each job's checkpoints under its own prefix
        checkpoints = storage / job.job_id / "checkpoints"
        for trial in job.trials:
            committed = list((checkpoints / trial.trial_id).glob("*/_COMMITTED"))
            assert committed, f"no committed checkpoint of {job.job_id}/{trial.trial_id}"
    assert _files(storage / a.job_id) == a_files  # nothing of B's (or the rerun's) in A's

    a_state = _state(redis_client, a.job_id)
    with pytest.raises(SpecError, match="tenant"):
        run(tenant_b, job_id=a.job_id)
    assert _state(redis_client, a.job_id) == a_state
    assert _files(storage / a.job_id) == a_files
    assert _trainings(calls) == 4
