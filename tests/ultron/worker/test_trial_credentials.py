"""A trial reaches only its own job: it holds no Redis credentials, and its reports and its
checkpoint still reach the job through its worker.

The model below is a tenant's code that goes looking: it gathers everything it can see of its
trial (its environment, its argv, the request's fields ``ultron.current_trial()`` holds, what
``score`` is given) and tries to use it on the job's Redis, a password-protected embedded server
(:mod:`ultron.servers.home_redis`) whose URL, password included, is in the worker's
environment. Like ``test_runner.py`` it calls the Dask task function ``run_trial`` in this
process, so the trial process is a real child of it, as of a Dask worker.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from ultron.redis import keys
from ultron.servers.home_redis import RedisServer, start_redis, stop_redis
from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker.checkpoint_store import committed_names, listing, remote_fs
from ultron.worker.pool import shutdown_processes
from ultron.worker.runner import run_trial

_PR_GET_DUMPABLE = 3  # linux/prctl.h

MODEL = r"""
import json, os, re
import redis
import ultron
from ultron.checkpoints import mark_complete, new_checkpoint_dir
from ultron.model import current_trial


class Snoop:
    def score(self, hp, checkpoint_path, resume):
        with open("/proc/self/cmdline", "rb") as cmdline:
            argv = cmdline.read().decode(errors="replace").split("\0")
        context = vars(current_trial())  # its callable `send` aside
        seen = json.dumps(
            {"env": dict(os.environ), "argv": argv, "hp": hp, "checkpoint": checkpoint_path,
             "context": {k: v for k, v in context.items() if isinstance(v, str)}}
        )
        # Every Redis URL it can find, and the server's socket (a path anyone could guess).
        targets = re.findall(r"(?:redis|rediss|unix)://[^\s\"']+", seen)
        targets.append("unix://" + hp["socket"])
        attempts = {}
        for url in targets:
            try:
                redis.Redis.from_url(url, socket_timeout=10).set("ultron:stolen", "1")
                attempts[url] = "connected"
            except redis.RedisError as exc:
                attempts[url] = f"{type(exc).__name__}: {exc}"
        decisions = [str(ultron.report(step, loss=1.0 / (step + 1))) for step in range(3)]
        folder = new_checkpoint_dir(checkpoint_path, 3)
        (folder / "weights.txt").write_text("0.25")
        mark_complete(folder)
        return {"loss": 0.25, "seen": seen, "attempts": attempts, "decisions": decisions}
"""


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    """The embedded server of a fresh home: a Unix socket and a password it requires. A short
    path under /tmp: a Unix socket's path has at most 107 bytes."""
    home = Path(tempfile.mkdtemp(prefix="ultron-creds-", dir="/tmp"))
    try:
        yield start_redis(home)
    finally:
        stop_redis(home)
        shutil.rmtree(home)


@pytest.fixture
def code_base(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / f"code-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "snoop_model.py").write_text(MODEL)
    yield folder
    shutdown_processes()


def _password(url: str) -> str:
    password = redis.connection.parse_url(url).get("password")
    assert password and len(password) >= 16  # the server really requires one
    return str(password)


def test_a_trial_finds_no_credentials_and_its_reports_and_checkpoint_reach_the_job(
    tmp_path: Path, code_base: Path, locked_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", locked_redis.url)  # the worker's environment holds it
    password = _password(locked_redis.url)
    job, trial = f"creds-{uuid.uuid4().hex[:8]}", "snoop"
    request = TrialRequest(
        job_id=job,
        trial_id=trial,
        hyperparameters={"socket": str(locked_redis.socket)},
        model="snoop_model:Snoop",
        python=sys.executable,
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial),
        log_path=str(tmp_path / "logs" / f"{trial}.log"),
        redis_url=locked_redis.url,
        code_paths=(str(code_base),),
        stream_reports=True,
        checkpoint_url=str(tmp_path / "store" / trial),
    ).to_dict()
    answer = run_trial(request)
    assert answer["status"] == TrialStatus.COMPLETED, answer.get("error")
    metrics = answer["metrics"]

    seen = metrics["seen"]
    assert password not in seen  # not in its environment, argv, request or arguments
    assert not any(url.startswith(("redis://:", "unix://:")) for url in metrics["attempts"])
    assert set(json.loads(seen)["context"]) == {"job_id", "trial_id"}
    for url, outcome in metrics["attempts"].items():  # whatever it found, the server refuses
        assert outcome.startswith("AuthenticationError") and "uthentication" in outcome, url

    # Its reports went through the worker, under the job's keys, and early stopping hears them.
    assert metrics["decisions"] == ["continue"] * 3
    assert answer["reports"] == 3 and [p["step"] for p in answer["curve"]] == [0, 1, 2]
    client = redis.Redis.from_url(locked_redis.url, decode_responses=True)
    try:
        stored = [json.loads(v) for v in client.lrange(keys.trial_reports(job, trial), 0, -1)]
        assert [entry["loss"] for entry in stored] == [1.0, 0.5, 1 / 3]
        stream = [json.loads(v) for v in client.lrange(keys.report_stream(job), 0, -1)]
        assert [entry["trial_id"] for entry in stream] == [trial] * 3
        assert client.exists("ultron:stolen") == 0
    finally:
        client.close()
    # Its checkpoint reached the job's store through the worker's syncer, committed.
    fs, root = remote_fs(str(tmp_path / "store" / trial), {})
    assert committed_names(listing(fs, root)) == ["epoch-0003"]
    assert (tmp_path / "store" / trial / "epoch-0003" / "weights.txt").read_text() == "0.25"
    # The worker is not dumpable: a trial process of the same (non-root) user cannot read its
    # /proc/PID/environ or its memory, where the Redis URL is.
    assert ctypes.CDLL(None).prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def test_a_stop_reaches_the_trial_through_its_worker(
    tmp_path: Path, code_base: Path, locked_redis: RedisServer
) -> None:
    """The worker answers a report with the job's stop flag: ``report`` returns STOP."""
    job, trial = f"creds-{uuid.uuid4().hex[:8]}", "stopped"
    client = redis.Redis.from_url(locked_redis.url)
    try:
        client.set(keys.trial_stop(job, trial), json.dumps({"decision": "asha", "at": 4e9}))
        request = TrialRequest(
            job_id=job,
            trial_id=trial,
            hyperparameters={"socket": str(locked_redis.socket)},
            model="snoop_model:Snoop",
            python=sys.executable,
            metric="loss",
            seed=1,
            checkpoint_path=str(tmp_path / "ckpt" / trial),
            log_path=str(tmp_path / "logs" / f"{trial}.log"),
            redis_url=locked_redis.url,
            code_paths=(str(code_base),),
        ).to_dict()
        answer = run_trial(request)
    finally:
        client.close()
    assert answer["status"] == TrialStatus.COMPLETED, answer.get("error")
    assert answer["metrics"]["decisions"] == ["stop"] * 3
