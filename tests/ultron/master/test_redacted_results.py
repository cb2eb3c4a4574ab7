"""A failed trial's error and traceback enter the master redacted: the trial table in Redis
and the result files never show a secret that the user's exception carried.

A real ``TrialDispatcher`` on a real Dask cluster (in-process workers, a real trial process)
and the session's real Redis.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from distributed import Client, LocalCluster

from ultron.algorithms.base import Direction
from ultron.containerize.environment import TrialEnvironment
from ultron.master.dispatcher import TrialDispatcher
from ultron.master.job_state import JobState, JobStore
from ultron.master.results import write_results
from ultron.secrets import MASK, add_secrets
from ultron.spec.job import JobSpec
from ultron.trial_records import TrialStatus
from ultron.worker.pool import shutdown_processes

TOKEN = f"tok-{uuid.uuid4().hex}"  # a secret the master knows (install_redaction adds them)
URL_PASSWORD = "url-pw-4242"  # in no list: masked because it is a URL's password
MODEL = f"""
class Leaky:
    def score(self, hyperparameters, checkpoint_path, resume):
        raise RuntimeError(
            "login to s3://alice:{URL_PASSWORD}@bucket/x refused for key {TOKEN}"
        )
"""


@pytest.fixture
def client() -> Iterator[Client]:
    with (
        LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster,
        Client(cluster) as dask_client,
    ):
        yield dask_client
    shutdown_processes()


def test_a_trials_error_and_traceback_are_stored_redacted(
    tmp_path: Path, client: Client, redis_url: str
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "leaky_model.py").write_text(MODEL)
    add_secrets([TOKEN])
    spec = JobSpec.model_validate(
        {
            "code": str(code),
            "model": "leaky_model:Leaky",
            "search_space": {"x": [1]},
            "storage": str(tmp_path / "runs"),
        },
        context={"check_paths": False},
    )
    env = TrialEnvironment(
        python=Path(sys.executable), code_hash="0" * 64, root=tmp_path, source=code, reused=True
    )
    store = JobStore(redis.Redis.from_url(redis_url), f"redacted-{uuid.uuid4().hex[:8]}")
    dispatcher = TrialDispatcher(
        client, store, spec=spec, env=env, redis_url=redis_url, scratch=str(tmp_path / "scratch")
    )
    dispatcher.start(dispatcher.request("0001", {"x": 1}))
    result, _ = dispatcher.wait_one()

    assert result.status is TrialStatus.FAILED
    assert result.error is not None and result.traceback is not None
    assert "RuntimeError" in result.error and "RuntimeError" in result.traceback
    for text in (result.error, result.traceback):
        assert TOKEN not in text and URL_PASSWORD not in text
        assert f"s3://alice:{MASK}@bucket/x" in text and f"key {MASK}" in text

    store.save(JobState(store.job_id), [result])  # the trial table in Redis
    stored = b"".join(store.client.hgetall(store.trials_key).values())
    store.client.delete(store.key, store.trials_key, store.curves_key)
    files = write_results(
        str(tmp_path / "results"),
        trials=[result],
        curves={},
        direction=Direction.MINIMIZE,
        metric="loss",
        extra={},
    )
    written = b"".join(Path(path).read_bytes() for path in files.values())
    for blob in (stored, written):
        assert MASK.encode() in blob
        assert TOKEN.encode() not in blob and URL_PASSWORD.encode() not in blob
