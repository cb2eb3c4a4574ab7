"""The quickstart through ``cluster: {type: slurm}``: two Dask workers as SLURM jobs on a real
(one-node, loopback) SLURM cluster; one worker job is cancelled with ``scancel`` mid-trial.

Mid-trial by state, not by timing: the quickstart's model, gated, holds each trial after its
fifth epoch until the test has seen both worker jobs running in ``squeue`` and cancelled one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

import ultron
from ultron.redis import keys
from ultron.trial_records import TrialStatus

QUICKSTART = Path(__file__).parents[2] / "examples" / "quickstart" / "job.yaml"

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


# The quickstart's model, but each trial waits after its epoch GATE_EPOCH (reported, its
# checkpoint written) until the file hyperparameters["gate"] exists: the test opens it once it
# has seen both worker jobs running and cancelled one, so no trial can end before that.
_GATED = """
import os, time

import ultron
from digits_mlp.train import Model

GATE_EPOCH = 4


class Gated(Model):
    def score(self, hyperparameters, checkpoint_path, resume):
        report, gate = ultron.report, hyperparameters["gate"]

        def gated(step, **metrics):
            answer = report(step, **metrics)
            deadline = time.monotonic() + 400
            while step == GATE_EPOCH and not os.path.exists(gate):
                if time.monotonic() > deadline:
                    raise TimeoutError("the test never opened the gate")
                time.sleep(0.05)
            return answer

        ultron.report = gated
        try:
            return super().score(hyperparameters, checkpoint_path, resume)
        finally:
            ultron.report = report
"""
GATE_EPOCH = 4


def _gated_quickstart(folder: Path) -> Path:
    """The quickstart's code base with the gated model beside it (``gated:Gated``)."""
    shutil.copytree(QUICKSTART.parent / "code", folder)
    (folder / "gated.py").write_text(_GATED)
    return folder


def _until(what: str, condition: Callable[[], bool], timeout_s: float = 400.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never reached: {what}")
        time.sleep(0.1)


def _at_the_gate(client: redis.Redis, job_id: str, storage: Path) -> bool:
    """Whether two trials wait at the gate: reported epochs 0..GATE_EPOCH, and each has a
    checkpoint committed to the storage (the one its retry resumes from)."""
    found = client.scan_iter(match=keys.trial_reports(job_id, "*"), count=10_000)
    reported = sum(int(client.llen(key)) > GATE_EPOCH for key in found)
    committed = {p.parts[-3] for p in storage.glob(f"{job_id}/checkpoints/*/*/_COMMITTED")}
    return reported >= 2 and len(committed) >= 2


def _worker_jobs(slurm: Any) -> list[list[str]]:
    lines = slurm.squeue("--states=RUNNING", "--format=%i %j")
    return [line.split() for line in lines if "quickstart-digits" in line]


def test_quickstart_on_slurm_survives_a_cancelled_worker_job(
    tmp_path: Path, redis_url: str, slurm: Any
) -> None:
    job_id = f"slurm-quickstart-{uuid.uuid4().hex[:6]}"
    client = redis.Redis.from_url(redis_url)
    storage, gate = tmp_path / "runs", tmp_path / "gate-open"
    cancelled: dict[str, Any] = {}
    errors: list[BaseException] = []

    def cancel_a_worker_job() -> None:
        try:
            _until("two trials at the gate", lambda: _at_the_gate(client, job_id, storage))
            # Both trials are mid-way, so both worker jobs run (or SLURM has not said so yet).
            _until("two worker jobs running in squeue", lambda: len(_worker_jobs(slurm)) == 2)
            ours = _worker_jobs(slurm)
            subprocess.run(["scancel", ours[0][0]], check=True)
            cancelled.update(job=ours[0][0], running=len(ours), names={name for _, name in ours})
        except BaseException as exc:  # handed to the test
            errors.append(exc)
        finally:
            gate.touch()

    canceller = threading.Thread(target=cancel_a_worker_job, daemon=True)
    canceller.start()
    spec = yaml.safe_load(QUICKSTART.read_text())
    result = ultron.run(
        QUICKSTART,
        job_id=job_id,
        code=str(_gated_quickstart(tmp_path / "code")),
        model="gated:Gated",
        search_space={**spec["search_space"], "gate": [str(gate)]},
        cluster={"type": "slurm", "walltime": "00:15:00"},
        num_iterations=6,  # three rounds of two: enough for a cancel mid-way, in CI's budget
        cache=False,  # train every trial, though an earlier test scored the quickstart's
        redis_url=redis_url,
        storage=str(storage),
    )
    canceller.join(timeout=5)
    assert not errors, errors

    assert cancelled.get("running") == 2, f"two worker jobs were not running: {cancelled}"
    assert result.status == "completed"
    assert len(result.trials) == 6  # num_iterations, each configuration once
    assert len({t.trial_id for t in result.trials}) == 6
    configs = {tuple(sorted(t.hyperparameters.items())) for t in result.trials}
    assert len(configs) == 6
    assert all(t.status is TrialStatus.COMPLETED and t.score is not None for t in result.trials)
    # The trial its cancelled job was running failed once (the worker died) and was retried on
    # another worker; nothing else ran twice.
    assert sorted(t.attempts for t in result.trials) == [1] * 5 + [2]
    (retried,) = [t for t in result.trials if t.attempts == 2]
    curves = json.loads(Path(result.files["curves.json"]).read_text())
    steps = [report["step"] for report in curves[retried.trial_id]]
    assert steps[0] > 0 and steps[-1] == 14  # it resumed from its checkpoint, not epoch 0
    (job_name,) = cancelled["names"]
    assert all(str(t.worker).startswith(f"{job_name}-") for t in result.trials)  # SLURM's
    # finalize closed the cluster: no job of ours is queued, running or completing.
    assert slurm.squeue() == []
