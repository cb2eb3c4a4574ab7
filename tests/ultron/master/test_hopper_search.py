"""The hopper job's search at the cheapest level: the configurations kept for a resume, the trial
rows made from the runner's result, and the data fingerprint the score cache keys on."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ultron.master.hopper import HopperResult
from ultron.master.hopper_search import _configurations, _final_rows, data_fingerprint
from ultron.master.job_state import JobState
from ultron.master.strategy import build_strategy
from ultron.spec.loader import load_spec
from ultron.trial_records import TrialStatus

SPEC = {
    "code": ".", "model": "pkg.train:Model", "search_space": {"lr": [0.1, 0.2, 0.3]},
    "strategy": "grid", "num_iterations": 3, "parallelism": 2,
    "data": {"url": "s3://bucket/corpus/", "format": "numpy"},
    "execution": {"mode": "hopper", "epochs": 2},
}  # fmt: skip


def test_the_configurations_are_proposed_once_and_read_back_on_resume(tmp_path: Path) -> None:
    spec = load_spec(SPEC, check_code=False)
    state = JobState("j")
    first = _configurations(spec, str(tmp_path), build_strategy(spec), state)
    assert list(first) == ["0000", "0001", "0002"] and state.next_trial == 3
    assert sorted(c["lr"] for c in first.values()) == [0.1, 0.2, 0.3]
    # A resumed job gets the same ones, whatever a fresh strategy would propose.
    (tmp_path / "hopper-configurations.json").write_text('{"0000": {"lr": 0.7}}')
    again = _configurations(spec, str(tmp_path), build_strategy(spec), JobState("j"))
    assert again == {"0000": {"lr": 0.7}}


def test_rows_carry_each_configurations_end_and_its_last_epochs_score() -> None:
    names = ["done", "stop", "fail", "hit", "nan", "top"]
    configs = {m: {"lr": i / 10} for i, m in enumerate(names)}
    epoch = {"loss": 0.5, "acc": 0.9}
    result = HopperResult(
        records=[], orders={},
        epochs={"done": [{"loss": 1.0}, epoch], "stop": [epoch], "fail": [], "hit": [],
                "nan": [{"loss": math.nan}], "top": [epoch, epoch]},
        checkpoints={}, stopped=["stop", "top"], failed={"fail": "ValueError: boom"},
        cached={"hit": {"score": 0.25, "metrics": {"loss": 0.25}}},
    )  # fmt: skip
    rows = _final_rows(result, configs, "loss", 2)
    assert (rows["done"].status, rows["done"].score, rows["done"].reports) == (
        TrialStatus.COMPLETED, 0.5, 2,
    )  # fmt: skip
    assert (rows["stop"].status, rows["stop"].score) == (TrialStatus.STOPPED, 0.5)
    assert rows["top"].status is TrialStatus.COMPLETED  # stopped at its last epoch: done
    assert (rows["fail"].status, rows["fail"].error) == (TrialStatus.FAILED, "ValueError: boom")
    assert (rows["hit"].status, rows["hit"].score) == (TrialStatus.CACHED, 0.25)
    assert rows["nan"].status is TrialStatus.FAILED and rows["nan"].score is None  # never NaN
    assert rows["nan"].error is not None and "loss" in rows["nan"].error


def test_the_data_fingerprint_follows_the_shards(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=np.zeros(3))
    first = data_fingerprint(str(tmp_path))
    assert data_fingerprint(str(tmp_path)) == first
    np.savez(tmp_path / "a.npz", x=np.zeros(5))  # another size
    assert data_fingerprint(str(tmp_path)) != first
