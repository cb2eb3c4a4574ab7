"""Trials in warm processes: reuse, user errors, crashes, timeouts, reports.

These call the Dask task function ``run_trial`` directly in this process, so the trial
processes are real children of the test, as they would be of a Dask worker.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from ultron.redis import keys
from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker.pool import shutdown_processes
from ultron.worker.runner import run_trial

TOY = Path(__file__).parents[2] / "data" / "toy"
JOB = f"runner-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _toy_on_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    global JOB
    JOB = f"runner-test-{uuid.uuid4().hex[:8]}"  # a finished attempt's result is kept per job
    # The trial processes inherit the environment: here the toy package comes from PYTHONPATH
    # instead of an installed trial environment, which tests/ultron/test_environment.py covers.
    monkeypatch.setenv("PYTHONPATH", f"{TOY}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    yield
    shutdown_processes()


def _request(tmp_path: Path, redis_url: str, behaviour: str, **extra: Any) -> dict[str, Any]:
    trial_id = extra.pop("trial_id", behaviour)
    return TrialRequest(
        job_id=JOB,
        trial_id=trial_id,
        hyperparameters={"behaviour": behaviour, "x": 3.0},
        model="toy_model:Behaves",
        python=sys.executable,
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial_id),
        log_path=str(tmp_path / "logs" / f"{trial_id}.log"),
        redis_url=redis_url,
        **extra,
    ).to_dict()


def test_ok_trials_reuse_one_warm_process(tmp_path: Path, redis_url: str) -> None:
    first = run_trial(_request(tmp_path, redis_url, "ok", trial_id="a"))
    second = run_trial(_request(tmp_path, redis_url, "ok", trial_id="b"))
    assert first["status"] == second["status"] == TrialStatus.COMPLETED
    assert first["score"] == 3.0
    assert first["metrics"]["pid"] == second["metrics"]["pid"]  # no new interpreter


def test_user_error_is_recorded_with_traceback_and_process_survives(
    tmp_path: Path, redis_url: str
) -> None:
    ok = run_trial(_request(tmp_path, redis_url, "ok", trial_id="before"))
    failed = run_trial(_request(tmp_path, redis_url, "raise"))
    after = run_trial(_request(tmp_path, redis_url, "ok", trial_id="after"))
    assert failed["status"] == TrialStatus.FAILED
    assert "ValueError: this configuration always fails" in failed["error"]
    assert 'raise ValueError("this configuration always fails")' in failed["traceback"]
    assert after["metrics"]["pid"] == ok["metrics"]["pid"]


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [("nan", "finite number"), ("no_metric", "without the objective metric 'loss'")],
)
def test_unusable_scores_are_user_errors(
    tmp_path: Path, redis_url: str, behaviour: str, words: str
) -> None:
    result = run_trial(_request(tmp_path, redis_url, behaviour))
    assert result["status"] == TrialStatus.FAILED
    assert words in result["error"]


def test_crash_is_classified_and_the_process_replaced(tmp_path: Path, redis_url: str) -> None:
    before = run_trial(_request(tmp_path, redis_url, "ok", trial_id="before"))
    crashed = run_trial(_request(tmp_path, redis_url, "exit"))
    after = run_trial(_request(tmp_path, redis_url, "ok", trial_id="after"))
    assert crashed["status"] == TrialStatus.CRASHED
    assert "exited with code 1" in crashed["error"]
    assert after["status"] == TrialStatus.COMPLETED
    assert after["metrics"]["pid"] != before["metrics"]["pid"]


def test_timeout_stops_the_trial(tmp_path: Path, redis_url: str) -> None:
    result = run_trial(_request(tmp_path, redis_url, "hang", timeout=2.0))
    assert result["status"] == TrialStatus.TIMEOUT
    assert "trial_timeout" in result["error"]
    assert run_trial(_request(tmp_path, redis_url, "ok"))["status"] == TrialStatus.COMPLETED


def test_reports_reach_redis_and_the_curve(tmp_path: Path, redis_url: str) -> None:
    request = _request(tmp_path, redis_url, "ok", trial_id="quad")
    request.update(model="toy_model:Quadratic", hyperparameters={"x": 1.0})
    result = run_trial(request)
    assert result["status"] == TrialStatus.COMPLETED and result["score"] == 1.0
    assert [point["step"] for point in result["curve"]] == [0, 1, 2]
    client = redis.Redis.from_url(redis_url)
    stored = [json.loads(v) for v in client.lrange(f"ultron:job:{JOB}:run:reports:quad", 0, -1)]
    assert [point["loss"] for point in stored] == [2.0, 1.5, 1.0 + 1 / 3]
    log = Path(request["log_path"])
    assert log.exists()


def test_a_finished_attempt_run_again_returns_its_result(tmp_path: Path, redis_url: str) -> None:
    calls = tmp_path / "calls.txt"
    os.environ["TOY_CALLS_FILE"] = str(calls)
    try:
        request = _request(tmp_path, redis_url, "ok", trial_id="twice")
        first = run_trial(request)
        again = run_trial(request)  # what Dask does when the result was on a lost worker
    finally:
        del os.environ["TOY_CALLS_FILE"]
    assert again == first
    assert len(calls.read_text().splitlines()) == 1  # trained once


def test_a_stored_answer_of_another_configuration_is_not_returned(
    tmp_path: Path, redis_url: str
) -> None:
    # The same trial id and attempt with another configuration (a restarted master that
    # sampled that id again differently): the old answer must not be taken for this one's.
    calls = tmp_path / "calls.txt"
    os.environ["TOY_CALLS_FILE"] = str(calls)
    try:
        first = run_trial(_request(tmp_path, redis_url, "ok", trial_id="reused"))
        other = _request(tmp_path, redis_url, "ok", trial_id="reused")
        other["hyperparameters"] = {"behaviour": "ok", "x": 4.0}
        second = run_trial(other)
    finally:
        del os.environ["TOY_CALLS_FILE"]
    assert (first["score"], second["score"]) == (3.0, 4.0)
    assert second["hyperparameters"] == {"behaviour": "ok", "x": 4.0}
    assert len(calls.read_text().splitlines()) == 2  # trained twice
    stored = redis.Redis.from_url(redis_url).get(f"ultron:job:{JOB}:run:result:reused:1")
    assert stored is not None and json.loads(stored)["score"] == 4.0  # the key is the new one's


def test_a_stored_crash_is_run_again(tmp_path: Path, redis_url: str) -> None:
    # A crash is the infrastructure's: the attempt's trial process was killed as the previous
    # master's cluster closed. Run again, the attempt trains instead of returning the crash.
    request = _request(tmp_path, redis_url, "ok", trial_id="killed")
    client = redis.Redis.from_url(redis_url)
    crash = {
        "trial_id": "killed",
        "hyperparameters": request["hyperparameters"],
        "status": "crashed",
        "error": "trial process killed by SIGKILL",
    }
    client.set(f"ultron:job:{JOB}:run:result:killed:1", json.dumps(crash))
    result = run_trial(request)
    assert result["status"] == TrialStatus.COMPLETED and result["score"] == 3.0


def test_a_trial_asked_to_stop_before_it_started_never_runs(
    tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trial queued behind a busy worker when the job's target was reached: the master set
    # its stop flag as it did every running trial's. Its model must not run, and the trial
    # after it (no flag) runs as ever.
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    client = redis.Redis.from_url(redis_url)
    asked = {"decision": "target reached", "at": 0.0, "grace": 30.0, "job": True}
    client.set(keys.trial_stop(JOB, "queued"), json.dumps(asked))
    withdrawn = run_trial(_request(tmp_path, redis_url, "ok", trial_id="queued"))
    assert withdrawn["status"] == TrialStatus.STOPPED and withdrawn["score"] is None
    assert "(target reached) before it started" in withdrawn["error"]
    assert not calls.exists()
    # Nothing stored for it: the same attempt resumed by a later run of the job trains.
    client.delete(keys.trial_stop(JOB, "queued"))
    assert run_trial(_request(tmp_path, redis_url, "ok", trial_id="queued"))["score"] == 3.0
    assert len(calls.read_text().splitlines()) == 1
