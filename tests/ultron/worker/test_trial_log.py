"""A trial's output reaches the job's storage while it runs, masked, in a folder and an object
store; a failed trial keeps its last lines.

The shipper is tested on files this test writes; ``run_trial`` with a real trial process that
prints and then waits for a file the test creates, so "while it runs" is a state, not a time.
"""

from __future__ import annotations

import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ultron.errors import SpecError
from ultron.paths import trial_log_url
from ultron.secrets import MASK, add_secrets
from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker.pool import shutdown_processes
from ultron.worker.runner import run_trial
from ultron.worker.trial_log import TAIL_LINES, TrialLogShipper

TOY = Path(__file__).parents[2] / "data" / "toy"
TOKEN = "tok-trial-log-5ecret"  # a secret of the worker's environment (see _secret_env)


def _text(path: Path) -> str:
    return path.read_bytes().decode() if path.exists() else ""


def test_lines_reach_a_folder_while_written_masked(
    tmp_path: Path, poll: Callable[..., bool]
) -> None:
    add_secrets([TOKEN])
    local, stored = tmp_path / "trial.log", tmp_path / "runs" / "logs" / "0001.log"
    shipper = TrialLogShipper(str(local), str(stored), poll_s=0.05)
    shipper.start()
    with local.open("a") as out:
        out.write(f"epoch 1 token={TOKEN}\nprogress 10%\rprogress 20%\rno end yet")
        out.flush()
        assert poll(lambda: "progress 20%" in _text(stored), timeout_s=30)
        # Complete lines (a "\r" ends one) are there, masked; the unfinished one waits.
        assert _text(stored) == f"epoch 1 token={MASK}\nprogress 10%\rprogress 20%\r"
        out.write(" now\n")
    assert shipper.stop() and shipper.errors == []
    assert _text(stored).endswith("progress 20%\rno end yet now\n")
    assert shipper.tail() == [
        f"epoch 1 token={MASK}",
        "progress 10%",
        "progress 20%",
        "no end yet now",
    ]


def test_a_later_attempt_appends_after_a_header_and_keeps_its_own_tail(tmp_path: Path) -> None:
    local, stored = tmp_path / "trial.log", tmp_path / "logs" / "0002.log"
    local.write_text("".join(f"first {n}\n" for n in range(30)))
    TrialLogShipper(str(local), str(stored)).stop()  # never started: stop ships it all
    with local.open("a") as out:
        out.write("second attempt\n")
    second = TrialLogShipper(
        str(local), str(stored), offset=len("".join(f"first {n}\n" for n in range(30))),
        header="[ultron] attempt 2 on worker w-1",
    )  # fmt: skip
    assert second.stop()
    lines = stored.read_text().splitlines()
    assert lines[:30] == [f"first {n}" for n in range(30)]
    assert lines[30:] == ["[ultron] attempt 2 on worker w-1", "second attempt"]
    assert second.tail() == ["second attempt"]
    first_only = TrialLogShipper(str(local), str(tmp_path / "other.log"))
    first_only.stop()
    assert len(first_only.tail()) == TAIL_LINES and first_only.tail()[-1] == "second attempt"


def test_an_object_store_log_is_written_whole_while_it_runs(
    tmp_path: Path, s3_url: str, s3_storage_options: dict[str, Any], poll: Callable[..., bool]
) -> None:
    import s3fs

    add_secrets([TOKEN])  # as in the first test: this one may run alone, or first
    fs = s3fs.S3FileSystem(**s3_storage_options)
    local = tmp_path / "trial.log"
    url = f"{s3_url}/{tmp_path.name}/logs/0001.log"

    def stored() -> str:
        fs.invalidate_cache()
        return fs.cat_file(url).decode() if fs.exists(url) else ""

    first = TrialLogShipper(str(local), url, poll_s=0.05, object_interval_s=0.2)
    first.start()
    with local.open("a") as out:
        out.write(f"one {TOKEN}\n")
        out.flush()
        assert poll(lambda: "one" in stored(), timeout_s=60)
        out.write("two\n")
    assert first.stop() and first.errors == []
    assert stored() == f"one {MASK}\ntwo\n"
    local.write_text("three\n")
    again = TrialLogShipper(str(local), url, header="[ultron] attempt 2 on worker w")
    assert again.stop()  # what the first attempt wrote stays in front
    assert stored() == f"one {MASK}\ntwo\n[ultron] attempt 2 on worker w\nthree\n"


@pytest.mark.parametrize("trial_id", ["../other", "a/b", "", ".hidden"])
def test_a_trial_id_cannot_lead_out_of_the_logs_folder(tmp_path: Path, trial_id: str) -> None:
    with pytest.raises(SpecError) as caught:
        trial_log_url(str(tmp_path), trial_id)
    assert caught.value.issues[0].field == "trial_id"
    assert caught.value.issues[0].value == trial_id
    assert trial_log_url("s3://b/runs/j", "0001") == "s3://b/runs/j/logs/0001.log"


@pytest.fixture
def _secret_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # The worker's environment holds the secret (the trial process does not get it: it reads
    # it from a file, as a model that loads a credential would).
    monkeypatch.setenv("TRIAL_LOG_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("PYTHONPATH", f"{TOY}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    yield
    shutdown_processes()


def _request(tmp_path: Path, redis_url: str, trial_id: str, fail: bool) -> dict[str, Any]:
    return TrialRequest(
        job_id=f"trial-log-{uuid.uuid4().hex[:8]}",
        trial_id=trial_id,
        hyperparameters={"folder": str(tmp_path), "x": 1.0, "fail": fail},
        model="toy_model:Chatty",
        python=sys.executable,
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial_id),
        log_path=str(tmp_path / "scratch" / f"trial-{trial_id}.log"),
        log_url=trial_log_url(str(tmp_path / "runs"), trial_id),
        redis_url=redis_url,
    ).to_dict()


@pytest.mark.usefixtures("_secret_env")
def test_a_running_trial_has_its_output_in_the_storage(
    tmp_path: Path, redis_url: str, poll: Callable[..., bool]
) -> None:
    (tmp_path / "secret.txt").write_text(TOKEN)
    requests = [
        _request(tmp_path, redis_url, "ok", False),
        _request(tmp_path, redis_url, "bad", True),
    ]
    results: dict[str, dict[str, Any]] = {}
    runs = [
        threading.Thread(target=lambda r=r: results.update({r["trial_id"]: run_trial(r)}))
        for r in requests
    ]
    for run in runs:
        run.start()
    logs = {r["trial_id"]: Path(r["log_url"]) for r in requests}
    for log in logs.values():  # stdout and stderr, while the trial waits for the release file
        assert poll(lambda log=log: "first-err" in _text(log), timeout_s=120), _text(log)
        assert f"first-out x=1.0 token={MASK}\n" in _text(log)
    assert all(run.is_alive() for run in runs) and not results  # still running
    (tmp_path / "release").touch()
    for run in runs:
        run.join(timeout=120)
    ok, bad = results["ok"], results["bad"]
    assert ok["status"] == TrialStatus.COMPLETED and ok["log_path"] == str(logs["ok"])
    assert "second-out x=1.0\nsecond-err x=1.0\n" in _text(logs["ok"])
    assert ok.get("log_tail") is None  # only a trial that did not complete keeps them
    assert bad["status"] == TrialStatus.FAILED
    assert bad["log_tail"] == [f"failing line {n}" for n in range(30 - TAIL_LINES, 30)]
    for log in logs.values():
        assert TOKEN not in _text(log)
    for request in requests:  # the worker's copy (not masked) is gone once all is stored
        assert not Path(request["log_path"]).exists()
