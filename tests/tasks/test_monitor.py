"""The job's artifacts follow the trials without holding up the master: updates only remember,
a thread writes at most once per period and once more at the end (Prefect for real, under
``prefect_test_harness``)."""

from __future__ import annotations

import json
import uuid

import pytest

from ultron.master.job_state import JobState
from ultron.master.progress import ProgressEvent, listening
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialResult, TrialStatus

pytestmark = pytest.mark.usefixtures("prefect")


def test_writes_are_throttled_and_the_last_one_comes_at_close() -> None:
    from prefect import flow, task
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from ultron.tasks.monitor import JobMonitor

    spec = JobSpec.model_validate(
        {"code": ".", "model": "m:M", "search_space": {"x": [1]}, "num_iterations": 30},
        context={"check_paths": False},
    )
    job_id = f"monitor-{uuid.uuid4().hex[:8]}"
    events: list[ProgressEvent] = []

    @task
    def search() -> None:
        # A period longer than the test: only the first write and the closing one happen.
        monitor = JobMonitor(spec, job_id, JobState(job_id), every_s=3600)
        for n in range(30):
            trial = TrialResult(f"{n:04d}", {"x": n}, TrialStatus.COMPLETED, score=float(n))
            monitor.update(JobState(job_id), running=1, last=trial)
        monitor.close()
        monitor.close()  # twice is fine

    @flow
    def job() -> None:
        search()

    with listening(events.append):
        job()
    assert [e.done for e in events] == list(range(1, 31))  # every trial told at once
    assert events[-1].best_score == 0.0  # minimize: the lowest score
    key = job_id.lower()
    # Filtered on the server: it holds every earlier test's artifacts too, more than a page.
    only_this_job = ArtifactFilter(key=ArtifactFilterKey(like_=key))
    with get_client(sync_client=True) as client:
        found = [
            a
            for a in client.read_artifacts(artifact_filter=only_this_job)
            if a.key and a.key.startswith(key)
        ]
    boards = [a for a in found if a.key == f"{key}-leaderboard"]
    assert len(boards) == 1  # no write between the first (no trials yet) and the last
    rows = json.loads(boards[0].data) if isinstance(boards[0].data, str) else boards[0].data
    assert [row["trial"] for row in rows][:3] == ["0000", "0001", "0002"]  # best first
    assert "30 of 30 trials (30 completed); best score 0 with {'x': 0}" in boards[0].description
    progress = [a for a in found if a.key == f"{key}-progress"]
    assert len(progress) == 1 and float(progress[0].data) == 100.0
