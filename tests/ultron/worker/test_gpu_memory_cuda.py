"""On a real GPU: four ``gpu: 0.25`` trials share it, one allocates past its quarter.

Skipped without CUDA (CI has none). Runs with or without the project's conftest (on a bare GPU
machine: ``pytest --noconftest -m gpu``), so it starts its own Redis. The worker is a real Dask
worker of one GPU running four trials at once, as a shared GPU worker does: each trial claims a
quarter of GPU 0 (:mod:`ultron.worker.devices`) and its process is capped at a quarter of its
memory (:mod:`ultron.worker.gpu_memory`).
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

from ultron.spec.sections import Resources
from ultron.trial_records import TrialRequest, TrialStatus

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

MODEL = """
import os

import torch


class Allocate:
    def score(self, hp, checkpoint_path, resume):
        with open(os.path.join(checkpoint_path, "pid"), "w") as out:
            out.write(str(os.getpid()))
        total = torch.cuda.get_device_properties(0).total_memory
        held = torch.empty(int(total * hp["share"]), dtype=torch.uint8, device="cuda")
        held.fill_(1)
        torch.cuda.synchronize()
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        return {
            "loss": float(held.numel()) / total,
            "pid": os.getpid(),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "fraction": fraction(0) if fraction else None,
        }
"""


@pytest.fixture(scope="module")
def own_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis of this module's own: the project's conftest may not be loaded here."""
    from ultron.servers.redis_process import EmbeddedRedis

    with EmbeddedRedis(tmp_path_factory.mktemp("redis"), appendonly=False) as server:
        yield server.url


@pytest.fixture
def code_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "cuda_model.py").write_text(MODEL)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # the worker finds GPU 0
    monkeypatch.setenv("ULTRON_GPUS", "1")
    return folder


def _request(tmp_path: Path, code: Path, redis_url: str, share: float) -> dict[str, Any]:
    trial_id = uuid.uuid4().hex[:8]
    return TrialRequest(
        job_id="gpu-memory-cuda",
        trial_id=trial_id,
        hyperparameters={"share": share, "tag": trial_id},
        model="cuda_model:Allocate",
        python=sys.executable,
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial_id),
        log_path=str(tmp_path / "logs" / f"{trial_id}.log"),
        redis_url=redis_url,
        code_paths=(str(code),),
        gpu_memory_fraction=Resources(gpu=0.25).gpu_memory_fraction,
    ).to_dict()


def _pid(tmp_path: Path, trial: dict[str, Any]) -> int:
    """The trial process's pid, as the model wrote it before it allocated."""
    return int((tmp_path / "ckpt" / trial["trial_id"] / "pid").read_text())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def test_four_quarter_gpu_trials_one_past_its_quarter_is_out_of_memory(
    tmp_path: Path, code_base: Path, own_redis_url: str
) -> None:
    report: dict[str, Any] = {}
    try:
        _run_scenario(tmp_path, code_base, own_redis_url, report)
    finally:
        out = os.environ.get("GPU_MEMORY_TEST_REPORT")  # the device run's record of what happened
        if out:
            Path(out).write_text(json.dumps(report, indent=1, default=str))


def _run_scenario(tmp_path: Path, code_base: Path, redis_url: str, report: dict[str, Any]) -> None:
    from distributed import Client, LocalCluster

    from ultron.worker.runner import run_trial

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=4, resources={"GPU": 1}, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):

        def run(*shares: float) -> list[dict[str, Any]]:
            futures = [
                client.submit(
                    run_trial,
                    _request(tmp_path, code_base, redis_url, share),
                    pure=False,
                    resources={"GPU": 0.25},
                )
                for share in shares
            ]
            return list(client.gather(futures))

        # Three trials take 18% of the GPU each, one 35%: 89% in all fits on the GPU, but
        # 35% is past a quarter.
        wave = run(0.18, 0.18, 0.18, 0.35)
        report["wave"] = [
            {k: t.get(k) for k in ("status", "score", "metrics", "error")} for t in wave
        ]
        assert [t["status"] for t in wave] == [TrialStatus.COMPLETED] * 3 + [
            TrialStatus.OUT_OF_MEMORY
        ]
        assert all(t["metrics"]["fraction"] in (0.25, None) for t in wave[:3])
        assert {t["metrics"]["gpus"] for t in wave[:3]} == {"0"}
        assert "resources.gpu 0.25" in wave[3]["error"]
        assert "OutOfMemoryError" in wave[3]["traceback"]

        # One at a time: a trial, one past its quarter in the same warm process, the next.
        (before,) = run(0.1)
        (over,) = run(0.3)
        (after,) = run(0.1)
        report["sequence"] = [
            {k: t.get(k) for k in ("status", "metrics", "error")} for t in (before, over, after)
        ]
        assert (before["status"], over["status"], after["status"]) == (
            TrialStatus.COMPLETED,
            TrialStatus.OUT_OF_MEMORY,
            TrialStatus.COMPLETED,
        )
        pids = [_pid(tmp_path, t) for t in (*wave, before, over, after)]
        report["pids"] = pids
        assert not _alive(pids[3]) and not _alive(pids[5])  # each OOM's process was retired
        assert pids[5] == pids[4]  # the warm process that ran the trial before
        assert pids[6] not in (pids[3], pids[5])  # the next trial: another process
