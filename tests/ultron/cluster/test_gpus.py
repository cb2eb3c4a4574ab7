"""This machine's GPUs: where they are found, how many trials fit, and the local GPU cluster."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from ultron.cluster.gpus import (
    check_local_gpus,
    gpu_slots,
    local_gpu_workers,
    pinned_gpus,
    visible_gpus,
)
from ultron.errors import SpecError
from ultron.spec.loader import load_spec

TOY = Path(__file__).parents[2] / "data" / "toy"


@pytest.fixture
def no_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """An environment where nothing names a GPU (and no nvidia-smi is on PATH)."""
    for name in ("ULTRON_GPUS", "CUDA_VISIBLE_DEVICES", "ULTRON_DASK_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    return monkeypatch


def _spec(**fields: Any) -> Any:
    raw = {
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 4.0}},
        **fields,
    }
    return load_spec(raw)


@pytest.mark.parametrize(
    ("cuda", "ids"),
    [("0,1", ["0", "1"]), (" 2 , 3", ["2", "3"]), ("", []), ("-1", []), ("1,-1,2", ["1"])],
)
def test_cuda_visible_devices_names_the_gpus(no_gpus: Any, cuda: str, ids: list[str]) -> None:
    no_gpus.setenv("CUDA_VISIBLE_DEVICES", cuda)
    assert visible_gpus() == (ids, f"CUDA_VISIBLE_DEVICES={cuda!r}")


def test_the_override_wins_and_nothing_found_is_none(no_gpus: Any) -> None:
    assert visible_gpus()[0] == []
    no_gpus.setenv("CUDA_VISIBLE_DEVICES", "5")
    no_gpus.setenv("ULTRON_GPUS", "3")
    assert visible_gpus() == (["0", "1", "2"], "ULTRON_GPUS=3")


def test_nvidia_smi_lists_the_gpus(no_gpus: Any, tmp_path: Path) -> None:
    # A stand-in nvidia-smi: this machine has no GPU and no driver; its output is the real
    # format of `nvidia-smi -L` on a MIG-less two-GPU machine.
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(
        "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aa)'\n"
        "echo 'GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bb)'\n"
    )
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    assert visible_gpus() == (["0", "1"], "nvidia-smi -L")


def test_slots_per_share() -> None:
    two = ["0", "1"]
    assert [gpu_slots(a, two) for a in (0.5, 0.25, 1 / 3, 1, 2, 3)] == [4, 8, 6, 2, 1, 0]
    assert gpu_slots(0.5, []) == 0


def test_a_job_that_fits_passes_and_one_that_does_not_names_the_fixes(no_gpus: Any) -> None:
    no_gpus.setenv("ULTRON_GPUS", "1")
    assert check_local_gpus(_spec(parallelism=4, resources={"gpu": 0.25})) == ["0"]
    assert check_local_gpus(_spec(parallelism=4)) == []  # no GPU trials: nothing to check
    with pytest.raises(SpecError) as info:
        check_local_gpus(_spec(parallelism=4, resources={"gpu": 1}))
    (issue,) = info.value.issues
    assert (issue.field, issue.value) == ("resources.gpu", 1)
    assert (
        "needs 4 GPU slots" in issue.rule and "1 GPU(s) (ULTRON_GPUS=1), room for 1" in issue.rule
    )
    assert "lower parallelism to 1" in issue.fix and "gpu: 0.25 runs 4 trials per GPU" in issue.fix


def test_no_gpu_at_all_and_other_backends(no_gpus: Any) -> None:
    with pytest.raises(SpecError, match=r"has 0 GPU\(s\) \(neither NVML.*room for 0"):
        check_local_gpus(_spec(resources={"gpu": 0.5}))
    # Trials that leave the machine are the cluster's to place: nothing is counted here.
    remote = _spec(resources={"gpu": 8}, cluster={"type": "address", "address": "tcp://h:8786"})
    assert check_local_gpus(remote) == []
    no_gpus.setenv("ULTRON_DASK_ADDRESS", "tcp://h:8786")
    assert check_local_gpus(_spec(resources={"gpu": 8})) == []


def test_local_workers_are_pinned_to_gpus_that_exist(no_gpus: Any) -> None:
    no_gpus.setenv("ULTRON_GPUS", "2")
    workers = local_gpu_workers(_spec(parallelism=3, resources={"gpu": 0.5}), 2**30)
    assert [w["env"]["CUDA_VISIBLE_DEVICES"] for w in workers.values()] == ["0", "1", "0"]
    assert {
        (w["nthreads"], w["resources"]["GPU"], w["memory_limit"]) for w in workers.values()
    } == {(1, 0.5, 2**30)}
    # A worker started with that environment hands out its own GPU, not all of ULTRON_GPUS
    # (ultron.worker.devices asks visible_gpus; an empty variable counts as unset).
    for name, value in workers["gpu-worker-1"]["env"].items():
        no_gpus.setenv(name, value)
    assert visible_gpus()[0] == ["1"]


def test_local_slots_spread_over_the_gpus() -> None:
    four = ["0", "1", "2", "3"]
    assert [pinned_gpus(0.5, four[:2], s) for s in range(4)] == [["0"], ["1"], ["0"], ["1"]]
    assert [pinned_gpus(2, four, s) for s in range(2)] == [["0", "1"], ["2", "3"]]
