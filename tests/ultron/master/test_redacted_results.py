"""A failed trial's error and traceback enter the master redacted: the trial table in Redis
and the result files never show a secret that the user's exception carried.

A real ``TrialDispatcher`` on a real Dask cluster (in-process workers, a real trial process)
and the session's real Redis.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributed import Client

from tests.ultron.master.real_dispatcher import in_process_cluster, real_dispatcher
from ultron.algorithms.base import Direction
from ultron.master.job_state import JobState
from ultron.master.results import write_results
from ultron.secrets import MASK, add_secrets
from ultron.trial_records import TrialStatus

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
    with in_process_cluster(1) as dask_client:
        yield dask_client


def test_a_trials_error_and_traceback_are_stored_redacted(
    tmp_path: Path, client: Client, redis_url: str
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "leaky_model.py").write_text(MODEL)
    add_secrets([TOKEN])
    dispatcher = real_dispatcher(client, tmp_path, redis_url, code=code, model="leaky_model:Leaky")
    store = dispatcher.store
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
