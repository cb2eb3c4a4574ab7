"""What a trial process's environment holds: no Redis URL and no secrets, and the object
store's credentials only for a trial that reads an object store itself.

Like ``test_runner.py`` these call the Dask task function ``run_trial`` directly, so the trial
processes are real children of the test, as they would be of a Dask worker, and inherit its
environment (monkeypatched here) through the runner.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed  # noqa: F401  # as in a Dask worker: its nanny's settings in Dask's config
import pytest

from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker import runner
from ultron.worker.pool import checkin, checkout, shutdown_processes
from ultron.worker.runner import reads_object_store, run_trial, warm_up_worker

MODEL = """
import os


class Environ:
    def score(self, hp, checkpoint_path, resume):
        return {"score": 1.0, "env": sorted(os.environ), "pid": os.getpid()}


class Settings:
    def score(self, hp, checkpoint_path, resume):
        names = ("MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "OPENBLAS_NUM_THREADS")
        return {"score": 1.0, "env": {name: os.environ.get(name) for name in names}}
"""

SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
    "AWS_SESSION_TOKEN": "aws-session-0123456789",
    "MY_API_TOKEN": "my-api-token-0123456789",
}
AWS = {"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}
# What a trial of a job with a data service gets (DataServiceHandle.trial_config()'s shape).
SERVICE_DATA = {"service": "s1", "dispatcher": "grpc://localhost:5050", "manifest": {"root": "/d"}}
REMOTE_DATA = {"service": "s1", "manifest": {"root": "s3://bucket/staged"}}


@pytest.fixture
def code_base(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / f"code-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "env_model.py").write_text(MODEL)
    yield folder
    shutdown_processes()


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> None:
    """The Dask worker's environment holds the job's Redis URL and secrets."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("KEPT_SETTING", "plain")
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def _request(
    tmp_path: Path,
    code: Path,
    redis_url: str,
    data: dict[str, Any] | None,
    **fields: Any,
) -> dict[str, Any]:
    trial_id = uuid.uuid4().hex[:8]
    return TrialRequest(
        job_id=f"trial-env-{uuid.uuid4().hex[:8]}",
        trial_id=trial_id,
        hyperparameters={"x": 1},
        model="env_model:Environ",
        python=sys.executable,
        metric="score",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial_id),
        log_path=str(tmp_path / "logs" / f"{trial_id}.log"),
        redis_url=redis_url,
        code_paths=(str(code),),
        data=data,
        **fields,
    ).to_dict()


def _trial_env(answer: dict[str, Any]) -> set[str]:
    assert answer["status"] == TrialStatus.COMPLETED, answer.get("error")
    return set(answer["metrics"]["env"])


@pytest.mark.usefixtures("worker_env")
@pytest.mark.parametrize("data", [None, SERVICE_DATA], ids=["no-data", "data-service"])
def test_a_trial_gets_no_redis_url_and_no_secrets(
    tmp_path: Path, code_base: Path, redis_url: str, data: dict[str, Any] | None
) -> None:
    env = _trial_env(run_trial(_request(tmp_path, code_base, redis_url, data)))
    assert not env & {"REDIS_URL", *SECRETS}
    assert "KEPT_SETTING" in env  # the rest of the worker's environment is there


@pytest.mark.usefixtures("worker_env")
def test_a_trial_that_reads_an_object_store_gets_its_credentials_only(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    env = _trial_env(run_trial(_request(tmp_path, code_base, redis_url, REMOTE_DATA)))
    assert env & {"REDIS_URL", *SECRETS} == AWS


@pytest.mark.usefixtures("worker_env")
def test_a_process_with_credentials_never_serves_a_trial_without_them(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    with_store = run_trial(_request(tmp_path, code_base, redis_url, REMOTE_DATA))
    without = run_trial(_request(tmp_path, code_base, redis_url, None))
    again = run_trial(_request(tmp_path, code_base, redis_url, REMOTE_DATA))
    assert with_store["metrics"]["pid"] != without["metrics"]["pid"]
    assert with_store["metrics"]["pid"] == again["metrics"]["pid"]  # still warm, reused
    assert not _trial_env(without) & {"REDIS_URL", *SECRETS}


@pytest.mark.usefixtures("worker_env")
def test_warm_up_starts_the_processes_the_trials_use(
    tmp_path: Path, code_base: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up as acquire_resources runs it on each worker (no object store) serves a
    data-service trial, and connects the worker's Redis client before the first trial."""
    request = _request(tmp_path, code_base, redis_url, SERVICE_DATA)
    assert not reads_object_store(request["data"])
    monkeypatch.setattr(runner, "_clients", {})  # this worker has not talked to Redis yet
    logs = str(tmp_path / "logs")
    assert warm_up_worker(redis_url, sys.executable, [str(code_base)], "env_model:Environ", logs)
    assert list(runner._clients) == [redis_url]
    answer = run_trial(request)
    assert not _trial_env(answer) & {"REDIS_URL", *SECRETS}
    assert shutdown_processes() == 1  # the warmed-up process ran it: no second one was started


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, False),
        (SERVICE_DATA, False),
        ({"manifest": {"root": "file:///d"}}, False),
        (REMOTE_DATA, True),
        ({"urls": ["gs://bucket/a", "/local"]}, True),
    ],
)
def test_reads_object_store(data: dict[str, Any] | None, expected: bool) -> None:
    assert reads_object_store(data) is expected


def test_a_trial_gets_its_threads_and_not_dask_s_allocator_setting(
    tmp_path: Path, code_base: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dask worker's environment holds what its nanny set: glibc's trim threshold and one
    thread for OpenMP, MKL and OpenBLAS. A trial of ``resources.cpu: 3`` gets three threads and
    the system's allocator, and a user's own setting stays (ultron.worker.threads)."""
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # not Dask's value: the user's
    request = _request(tmp_path, code_base, redis_url, None, threads=3)
    request["model"] = "env_model:Settings"
    answer = run_trial(request)
    assert answer["status"] == TrialStatus.COMPLETED, answer.get("error")
    assert answer["metrics"]["env"] == {
        "MALLOC_TRIM_THRESHOLD_": None,
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "OPENBLAS_NUM_THREADS": "2",
    }


def test_a_warm_process_serves_only_trials_of_its_threads(tmp_path: Path, code_base: Path) -> None:
    """Numeric libraries size their thread pools as the process starts: a process started for
    one thread never serves a trial of three, and goes back to the trials of one."""
    log = str(tmp_path / "logs" / "worker.log")
    one = checkout(sys.executable, [str(code_base)], log, threads=1)
    checkin(one)
    three = checkout(sys.executable, [str(code_base)], log, threads=3)
    checkin(three)
    again = checkout(sys.executable, [str(code_base)], log, threads=1)
    checkin(again)
    assert three.proc.pid != one.proc.pid
    assert again.proc.pid == one.proc.pid
