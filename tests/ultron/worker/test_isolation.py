"""Trial isolation with real trial processes: the memory limit, the processes a trial starts,
and paths built from user input in the checkpoint API.

Like ``test_runner.py`` these call the Dask task function ``run_trial`` directly, so the trial
processes are real children of the test, as they would be of a Dask worker.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dask.utils import parse_bytes

from ultron.checkpoints import new_checkpoint_dir, save_torch
from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker.pool import shutdown_processes
from ultron.worker.runner import run_trial

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_DATA, /proc and subreapers are Linux's"
)

MODEL = """
import os, signal, subprocess, sys, time

import numpy as np

SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]
# Starts a child in a session of its own and exits at once: the grandchild is an orphan.
DOUBLE = [
    sys.executable,
    "-c",
    "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', "
    "'import time; time.sleep(300)'], start_new_session=True, stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL); print(p.pid, flush=True)",
]


class Greedy:
    def score(self, hp, checkpoint_path, resume):
        held = [np.ones(int(hp["chunk_mb"]) * 2**20, dtype=np.uint8)
                for _ in range(int(hp["chunks"]))]
        return {"loss": float(len(held)), "pid": os.getpid()}


class Spawner:
    def score(self, hp, checkpoint_path, resume):
        if hp.get("ignore_sigterm"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen(SLEEP, start_new_session=True)
        double = subprocess.run(DOUBLE, capture_output=True, text=True, check=True)
        pids = [child.pid, int(double.stdout.split()[0])]
        with open(os.path.join(checkpoint_path, "pids"), "w") as out:
            out.write(" ".join(map(str, pids)))
        if hp.get("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(hp.get("sleep", 0)))
        return {"loss": 0.0, "pid": os.getpid()}
"""


PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "isolation-model"
version = "0.1.0"

[tool.setuptools]
py-modules = ["isolation_model"]
"""


@pytest.fixture
def code_base(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / f"code-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    (folder / "isolation_model.py").write_text(MODEL)
    (folder / "pyproject.toml").write_text(PYPROJECT)
    yield folder
    shutdown_processes()


def _request(
    tmp_path: Path, code: Path, redis_url: str, model: str, hp: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    trial_id = uuid.uuid4().hex[:8]
    return TrialRequest(
        job_id=f"isolation-{uuid.uuid4().hex[:8]}",
        trial_id=trial_id,
        hyperparameters=hp,
        model=f"isolation_model:{model}",
        python=sys.executable,
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / "ckpt" / trial_id),
        log_path=str(tmp_path / "logs" / f"{trial_id}.log"),
        redis_url=redis_url,
        code_paths=(str(code),),
        **extra,
    ).to_dict()


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


def _pids(request: dict[str, Any]) -> list[int]:
    return [int(pid) for pid in (Path(request["checkpoint_path"]) / "pids").read_text().split()]


def _gone(pids: list[int], within: float = 0.0) -> bool:
    deadline = time.monotonic() + within
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(map(_alive, pids))


def test_a_trial_beyond_its_memory_limit_is_out_of_memory_and_the_next_one_runs(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    limit = parse_bytes("500Mi")
    greedy = {"chunk_mb": 100, "chunks": 15}  # 1.5 GB, as in the report
    over = run_trial(_request(tmp_path, code_base, redis_url, "Greedy", greedy, memory_limit=limit))
    assert over["status"] == TrialStatus.OUT_OF_MEMORY
    assert "resources.memory" in over["error"] and str(limit) in over["error"]
    assert "Fix: raise resources.memory" in over["error"]
    assert "MemoryError" in over["traceback"]

    modest = {"chunk_mb": 50, "chunks": 2}
    after = run_trial(
        _request(tmp_path, code_base, redis_url, "Greedy", modest, memory_limit=limit)
    )
    assert after["status"] == TrialStatus.COMPLETED
    assert after["score"] == 2.0
    again = run_trial(
        _request(tmp_path, code_base, redis_url, "Greedy", modest, memory_limit=limit)
    )
    assert again["metrics"]["pid"] == after["metrics"]["pid"]  # warm reuse under a limit


def test_the_limit_is_the_trial_process_s_own_and_not_shared_with_other_limits(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    modest = {"chunk_mb": 50, "chunks": 2}
    limited = run_trial(
        _request(tmp_path, code_base, redis_url, "Greedy", modest, memory_limit=parse_bytes("1Gi"))
    )
    free = run_trial(_request(tmp_path, code_base, redis_url, "Greedy", modest))
    assert limited["status"] == free["status"] == TrialStatus.COMPLETED
    assert limited["metrics"]["pid"] != free["metrics"]["pid"]  # a limit is never lifted
    assert str(parse_bytes("1Gi")) in _data_limit(int(limited["metrics"]["pid"]))
    assert "unlimited" in _data_limit(int(free["metrics"]["pid"]))


def _data_limit(pid: int) -> str:
    limits = Path(f"/proc/{pid}/limits").read_text()
    return next(line for line in limits.splitlines() if line.startswith("Max data size"))


def test_processes_a_trial_starts_in_their_own_session_end_with_it(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    request = _request(tmp_path, code_base, redis_url, "Spawner", {})
    result = run_trial(request)
    assert result["status"] == TrialStatus.COMPLETED
    pids = _pids(request)
    assert len(pids) == 2
    assert _gone(pids)  # gone when run_trial returns, not some time later
    after = run_trial(_request(tmp_path, code_base, redis_url, "Spawner", {}))
    assert after["metrics"]["pid"] == result["metrics"]["pid"]  # the trial process lives on


@pytest.mark.parametrize("ignore_sigterm", [False, True])
def test_a_stopped_trial_takes_its_own_session_children_along(
    tmp_path: Path, code_base: Path, redis_url: str, ignore_sigterm: bool
) -> None:
    hp = {"sleep": 60, "ignore_sigterm": ignore_sigterm}
    request = _request(tmp_path, code_base, redis_url, "Spawner", hp, timeout=3.0)
    result = run_trial(request)
    assert result["status"] == TrialStatus.TIMEOUT
    assert _gone(_pids(request), within=2.0)


def test_a_crashed_trial_process_takes_its_own_session_children_along(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    request = _request(tmp_path, code_base, redis_url, "Spawner", {"die": True})
    result = run_trial(request)
    assert result["status"] == TrialStatus.CRASHED
    assert _gone(_pids(request), within=2.0)


@pytest.mark.parametrize("prefix", ["../escape", "a/b", "..", ".", "", "/tmp/x", "a\\b", "a\0b"])
def test_a_checkpoint_prefix_cannot_leave_the_checkpoint_folder(
    tmp_path: Path, prefix: str
) -> None:
    root = tmp_path / "ckpt"
    root.mkdir()
    with pytest.raises(ValueError, match="prefix") as caught:
        new_checkpoint_dir(root, 1, prefix=prefix)
    assert "Fix:" in str(caught.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
    assert not any(root.iterdir())


def test_a_checkpoint_path_that_is_a_symlink_out_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "ckpt"
    root.mkdir()
    os.symlink(outside, root / "epoch-0001")
    with pytest.raises(ValueError, match="outside"):
        new_checkpoint_dir(root, 1)
    assert outside.is_dir() and (root / "epoch-0001").is_symlink()


@pytest.mark.parametrize("filename", ["../state.pt", "/tmp/state.pt", "sub/state.pt", ".."])
def test_save_torch_refuses_a_filename_outside_its_folder(tmp_path: Path, filename: str) -> None:
    pytest.importorskip("torch")
    with pytest.raises(ValueError, match="filename"):
        save_torch({"epoch": 1}, tmp_path / "ckpt", 1, filename=filename)
    assert not list((tmp_path / "ckpt").rglob("*.pt"))


@pytest.mark.slow
@pytest.mark.usefixtures("prefect")
def test_a_job_goes_on_past_a_trial_out_of_memory(
    tmp_path: Path, code_base: Path, redis_url: str
) -> None:
    import ultron

    result = ultron.run(
        {
            "name": "isolation",
            "code": str(code_base),
            "model": "isolation_model:Greedy",
            "search_space": {"chunks": [10, 1], "chunk_mb": [100], "tag": [uuid.uuid4().hex]},
            "strategy": "grid",
            "num_iterations": 2,
            "parallelism": 1,
            "resources": {"memory": "300Mi"},
            "retries": 1,
            "max_failed_share": 0.5,
            "objective": {"metric": "loss"},
            "storage": str(tmp_path / "runs"),
            "redis_url": redis_url,
        }
    )
    assert result.status == "completed"
    by = {t.hyperparameters["chunks"]: t for t in result.trials}
    assert (by[10].status, by[10].attempts) == (TrialStatus.OUT_OF_MEMORY, 1)  # not retried
    assert "raise resources.memory" in (by[10].error or "")
    assert by[1].status is TrialStatus.COMPLETED and by[1].score == 1.0
