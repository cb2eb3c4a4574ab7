"""Reading and following trial logs: a trial's state from the job's Redis, its log from the
storage (a folder, S3), and a follower that ends once the trial has finished, with every line.

The job's record is written here as the master writes it (JobStore, the stored answer key);
no job runs.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ultron.master.job_state import JobStatus, JobStore
from ultron.master.trial_logs import (
    PENDING,
    RUNNING,
    follow_log,
    logged_trials,
    read_log,
    results_location,
    trial_state,
)
from ultron.redis import keys
from ultron.trial_records import TrialResult, TrialStatus


@pytest.fixture
def job(redis_url: str, tmp_path: Path) -> Iterator[tuple[JobStore, Path]]:
    """A running job whose results go to ``tmp_path/runs/<id>``: (its store, that folder)."""
    redis_client = redis.Redis.from_url(redis_url)  # bytes, as ultron's own client
    store = JobStore(redis_client, f"logs-{uuid.uuid4().hex[:8]}")
    store.set_status(JobStatus.RUNNING)
    results = tmp_path / "runs" / store.job_id
    store.set_results_url(str(results))
    (results / "logs").mkdir(parents=True)
    yield store, results
    redis_client.delete(store.key, store.trials_key, store.transient("running"))
    for key in redis_client.scan_iter(match=keys.job_run(store.job_id, "*")):
        redis_client.delete(key)


def _answer(store: JobStore, trial_id: str, attempt: int, status: TrialStatus) -> None:
    """What ``run_trial`` stores when an attempt ends (after the whole log is written)."""
    key = keys.trial_result(store.job_id, trial_id, attempt)
    store.client.set(key, json.dumps({"status": str(status)}))


def test_a_trials_state_follows_the_job_record(job: tuple[JobStore, Path]) -> None:
    store, _ = job
    client, job_id = store.client, store.job_id
    assert trial_state(client, job_id, "0001") == PENDING  # not dispatched (yet)
    store.mark_running({"0001": {"hyperparameters": {}, "attempt": 1}})
    assert trial_state(client, job_id, "0001") == RUNNING
    _answer(store, "0001", 1, TrialStatus.CRASHED)  # a crash is retried: not finished
    assert trial_state(client, job_id, "0001") == RUNNING
    store.mark_running({"0001": {"hyperparameters": {}, "attempt": 2}})
    _answer(store, "0001", 2, TrialStatus.FAILED)  # its worker's answer, before the row
    assert trial_state(client, job_id, "0001") == "failed"
    store.mark_done("0001")
    assert trial_state(client, job_id, "0001") == "failed"  # between the record and the row
    row = TrialResult("0001", {}, TrialStatus.FAILED)
    client.hset(store.trials_key, "0001", json.dumps(row.to_dict()))
    assert trial_state(client, job_id, "0001") == "failed"
    store.mark_running({"0002": {"hyperparameters": {}, "attempt": 1}})
    store.set_status(JobStatus.CANCELLED)
    assert trial_state(client, job_id, "0002") == "interrupted"


def test_a_follower_ends_with_the_trial_and_has_every_line(
    job: tuple[JobStore, Path], poll: Callable[..., bool]
) -> None:
    store, results = job
    log = results / "logs" / "0003.log"
    log.write_text("first\n")
    store.mark_running({"0003": {"hyperparameters": {}, "attempt": 1}})
    out: list[bytes] = []
    ended: dict[str, Any] = {}
    where = results_location(store.client, store.job_id)
    follower = threading.Thread(
        target=lambda: ended.update(
            state=follow_log(store.client, store.job_id, "0003", where, out.append, poll_s=0.05)
        )
    )
    follower.start()
    assert poll(lambda: b"".join(out) == b"first\n", timeout_s=30)
    with log.open("a") as more:
        more.write("second\nlast\n")  # the worker's last write, then its answer
    _answer(store, "0003", 1, TrialStatus.COMPLETED)
    follower.join(timeout=30)
    assert ended["state"] == "completed"
    assert b"".join(out) == b"first\nsecond\nlast\n"
    assert logged_trials(where) == ["0003"]


def test_a_log_in_s3_is_read_from_an_offset(
    s3_url: str, s3_storage_options: dict[str, Any], tmp_path: Path
) -> None:
    import s3fs

    results = f"{s3_url}/{tmp_path.name}/job-1"
    fs = s3fs.S3FileSystem(**s3_storage_options)
    assert read_log(f"{results}/logs/0001.log") == b"" and logged_trials(results) == []
    fs.pipe_file(f"{results}/logs/0001.log", b"one\n")
    assert read_log(f"{results}/logs/0001.log", 2) == b"e\n"
    fs.pipe_file(f"{results}/logs/0001.log", b"one\ntwo\n")  # rewritten whole, grown
    assert read_log(f"{results}/logs/0001.log", 4) == b"two\n"
    assert read_log(f"{results}/logs/0001.log", 8) == b""
    assert logged_trials(results) == ["0001"]
