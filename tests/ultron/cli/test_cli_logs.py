"""``ultron logs``: what it refuses (exit 2, the fix named), what it lists and shows.

The job's record is written here as the master writes it; the follow of a running trial is in
``tests/flows/test_trial_logs.py`` (a real job) and ``tests/ultron/master/test_trial_logs.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from typer.testing import CliRunner

from ultron.master.job_state import JobStatus, JobStore
from ultron.master.trial_logs import RUNNING


@pytest.fixture
def job(redis_url: str, tmp_path: Path) -> Iterator[tuple[JobStore, Path]]:
    """A running job whose results go to ``tmp_path/runs/<id>``: (its store, that folder)."""
    store = JobStore(redis.Redis.from_url(redis_url), f"cli-logs-{uuid.uuid4().hex[:8]}")
    store.set_status(JobStatus.RUNNING)
    results = tmp_path / "runs" / store.job_id
    store.set_results_url(str(results))
    (results / "logs").mkdir(parents=True)
    yield store, results
    store.client.delete(store.key, store.transient("running"))


def _logs(redis_url: str, *args: str) -> Any:
    from ultron.cli.main import app

    return CliRunner().invoke(app, ["logs", *args, "--redis-url", redis_url])


def test_the_command_refuses_what_it_cannot_show(
    job: tuple[JobStore, Path], redis_url: str
) -> None:
    store, results = job
    unknown = _logs(redis_url, "no-such-job-x1")
    assert unknown.exit_code == 2 and "not known to this Redis" in unknown.output
    no_trial = _logs(redis_url, store.job_id, "-f")
    assert no_trial.exit_code == 2 and "ultron logs JOB TRIAL -f" in no_trial.output
    missing = _logs(redis_url, store.job_id, "0009")
    assert missing.exit_code == 2 and "has no log" in missing.output
    empty = _logs(redis_url, store.job_id)
    assert empty.exit_code == 0 and "no trial log (yet)" in empty.output
    (results / "logs" / "0004.log").write_text("hello\n")
    store.mark_running({"0004": {"hyperparameters": {}, "attempt": 1}})
    listed = _logs(redis_url, store.job_id)
    assert listed.exit_code == 0 and "0004" in listed.output and RUNNING in listed.output
    shown = _logs(redis_url, store.job_id, "0004")
    assert shown.exit_code == 0 and shown.stdout == "hello\n"
