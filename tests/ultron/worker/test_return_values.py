"""What ``score`` may return: real numbers as the objective, JSON values beside it, and one
clear error naming the value, its type and the fix for anything else."""

from __future__ import annotations

import csv
import json
import math
import sys
import uuid
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from ultron.algorithms.base import Direction
from ultron.master.results import write_results
from ultron.trial_records import TrialRequest, TrialResult, TrialStatus
from ultron.worker.pool import shutdown_processes
from ultron.worker.process import run_one
from ultron.worker.return_values import add_asked_metrics, objective_and_metrics
from ultron.worker.runner import run_trial


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.25, 0.25),
        (3, 3.0),
        (np.float32(0.5), 0.5),
        (np.int64(7), 7.0),
        (np.array(2.5), 2.5),
        (Fraction(1, 4), 0.25),
    ],
)
def test_real_numbers_are_the_objective(value: Any, expected: float) -> None:
    objective, metrics = objective_and_metrics(value, "loss")
    assert objective == expected and type(objective) is float
    assert metrics == {"loss": expected}


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (None, ["score() returned None (NoneType)", "no return statement", "Fix: "]),
        ("0.25", ["score() returned '0.25' (str)", "not text", "float(...)"]),
        (True, ["score() returned True (bool)", "a boolean is not a score"]),
        (np.bool_(False), ["np.False_ (numpy.bool)", "a boolean is not a score"]),
        ([0.1], ["[0.1] (list)", "a real number"]),
        (1 + 2j, ["(1+2j) (complex)", "a real number"]),
        (math.nan, ["nan", "must be a finite number"]),
        (-math.inf, ["-inf", "must be a finite number"]),
        (10**400, ["must be a finite number"]),
    ],
)
def test_what_is_not_a_number_is_refused_by_name(value: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        objective_and_metrics(value, "loss")
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"loss": None}, ["score() returned 'loss': None (NoneType)"]),
        ({"loss": "0.25"}, ["score() returned 'loss': '0.25' (str)", "not text"]),
        ({"loss": True}, ["'loss': True (bool)", "a boolean is not a score"]),
        ({"accuracy": 0.9}, ["without the objective metric 'loss'", "['accuracy']"]),
    ],
)
def test_the_objective_in_a_dict_follows_the_same_rules(value: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        objective_and_metrics(value, "loss")
    for word in words:
        assert word in str(info.value)


def test_extras_that_json_records_are_kept_as_they_are() -> None:
    returned = {
        "loss": np.float64(0.5),
        "accuracy": np.float32(0.75),
        "epochs": np.int64(12),
        "note": "early plateau",
        "converged": np.bool_(True),
        "best_epoch": None,
        "curve": [0.9, 0.7, "n/a"],
        "per_class": {"cat": 0.5},
    }
    objective, metrics = objective_and_metrics(returned, "loss")
    assert objective == 0.5
    assert metrics == {
        "loss": 0.5,
        "accuracy": 0.75,
        "epochs": 12.0,
        "note": "early plateau",
        "converged": True,
        "best_epoch": None,
        "curve": [0.9, 0.7, "n/a"],
        "per_class": {"cat": 0.5},
    }
    assert type(metrics["converged"]) is bool
    assert json.loads(json.dumps(metrics)) == metrics


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (np.array([1.0, 2.0]), ["'weights': array([1., 2.]) (numpy.ndarray)", ".tolist()"]),
        ({1, 2}, ["'weights': {1, 2} (set)", "cannot be recorded"]),
        (object, ["'weights': <class 'object'> (type)"]),
        ([np.float32(1.0)], ["'weights': [np.float32(1.0)] (list)"]),
    ],
)
def test_an_extra_json_cannot_record_is_named_with_its_key(extra: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        objective_and_metrics({"loss": 0.1, "weights": extra}, "loss")
    for word in words:
        assert word in str(info.value)


def test_a_key_that_is_not_text_is_named() -> None:
    with pytest.raises(ValueError, match=r"the key \(1, 2\) \(tuple\); keys must be text"):
        objective_and_metrics({"loss": 0.1, (1, 2): 3}, "loss")


class _Returns:
    """A model that returns what the hyper-parameter ``value`` names."""

    VALUES: ClassVar[dict[str, Any]] = {"none": None, "text": "0.25", "flag": True, "ok": 0.25}

    def score(self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool) -> Any:
        return self.VALUES[hyperparameters["value"]]


@pytest.mark.parametrize("value", ["none", "text", "flag"])
def test_run_one_records_a_bad_return_as_a_failed_trial(tmp_path: Path, value: str) -> None:
    request = {
        "job_id": "j",
        "trial_id": value,
        "redis_url": "redis://unused",  # nothing is reported, so nothing connects
        "model": "returns:Model",
        "checkpoint_path": str(tmp_path / value),
        "seed": 0,
        "hyperparameters": {"value": value},
        "resume": False,
        "metric": "loss",
    }
    out = run_one(request, {"returns:Model": _Returns})
    assert out["status"] == "failed"
    assert out["error"].startswith("ValueError: score() returned ")
    assert "Fix: " in out["error"]
    assert (
        run_one({**request, "hyperparameters": {"value": "ok"}}, {"returns:Model": _Returns})[
            "score"
        ]
        == 0.25
    )


MODEL = """\
class Model:
    def score(self, hyperparameters, checkpoint_path, resume):
        return {"loss": hyperparameters["x"], "note": "plateau", "converged": True, "best": None}
"""


@pytest.fixture
def job() -> Iterator[str]:
    yield f"return-values-{uuid.uuid4().hex[:8]}"
    shutdown_processes()


def test_text_extras_travel_through_redis_to_the_result_files(
    tmp_path: Path, redis_url: str, job: str
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "returns_text.py").write_text(MODEL)
    trials = []
    for x in (0.5, 0.25):
        request = TrialRequest(
            job_id=job,
            trial_id=f"t{x}",
            hyperparameters={"x": x},
            model="returns_text:Model",
            python=sys.executable,
            metric="loss",
            seed=1,
            checkpoint_path=str(tmp_path / "ckpt" / str(x)),
            log_path=str(tmp_path / "logs" / f"{x}.log"),
            redis_url=redis_url,
            code_paths=(str(code),),
        ).to_dict()
        answer = run_trial(request)
        answer.pop("curve", None)
        trials.append(TrialResult.from_dict(answer))
    assert [t.status for t in trials] == [TrialStatus.COMPLETED] * 2
    assert trials[0].metrics == {"loss": 0.5, "note": "plateau", "converged": True, "best": None}
    files = write_results(
        str(tmp_path / "results"),
        trials=trials,
        curves={},
        direction=Direction.MINIMIZE,
        metric="loss",
        extra={},
    )
    table = json.loads(Path(files["trials.json"]).read_text())
    assert table[1]["metrics"]["note"] == "plateau"
    rows = list(csv.reader(Path(files["leaderboard.csv"]).read_text().splitlines()))
    assert [row[2] for row in rows] == ["loss", "0.25", "0.5"]


class _NonFinite:
    """Extras that JSON has no number for, beside a finite objective."""

    def score(self, hyperparameters: dict[str, Any], checkpoint_path: str, resume: bool) -> Any:
        nan, inf = float("nan"), float("inf")
        return {"loss": 0.25, "aux": nan, "big": np.float64(inf), "curve": [1.0, -inf]}


def test_a_non_finite_extra_is_recorded_as_null_with_a_note_and_the_files_are_strict_json(
    tmp_path: Path, strict_json_files: Callable[[Path], list[Path]]
) -> None:
    request = {
        "job_id": "j",
        "trial_id": "0000",
        "redis_url": "redis://unused",  # nothing is reported, so nothing connects
        "model": "nonfinite:Model",
        "checkpoint_path": str(tmp_path / "ckpt"),
        "seed": 0,
        "hyperparameters": {"x": 1},
        "resume": False,
        "metric": "loss",
    }
    out = run_one(request, {"nonfinite:Model": _NonFinite})
    assert out["status"] == "completed" and out["score"] == 0.25
    assert out["metrics"] == {"loss": 0.25, "aux": None, "big": None, "curve": [1.0, None]}
    assert len(out["notes"]) == 3
    assert "metric aux was nan" in out["notes"][0] and "recorded as null" in out["notes"][0]
    assert "metric big was inf" in out["notes"][1] and "curve[1] was -inf" in out["notes"][2]
    trial = TrialResult.from_dict({**out, "trial_id": "0000", "hyperparameters": {"x": 1}})
    assert trial.notes == out["notes"]
    # A reported value of nan (a diverged loss) reaches curves.json: null there too.
    files = write_results(
        str(tmp_path / "results"),
        trials=[trial],
        curves={"0000": [{"step": 1, "loss": float("nan")}]},
        direction=Direction.MINIMIZE,
        metric="loss",
        extra={"timings": {"x": float("inf")}},
    )
    assert len(strict_json_files(tmp_path / "results")) == 3
    assert json.loads(Path(files["curves.json"]).read_text())["0000"][0]["loss"] is None


def test_several_objectives_need_every_asked_metric_as_a_number() -> None:
    value = {"accuracy": 0.9, "latency_ms": np.float32(12.5), "memory_mb": "big"}
    metrics: dict[str, Any] = {}
    add_asked_metrics(value, metrics, ("accuracy", "latency_ms"))
    assert metrics == {"accuracy": 0.9, "latency_ms": 12.5}
    with pytest.raises(ValueError) as missing:
        add_asked_metrics({"accuracy": 0.9}, {}, ("accuracy", "latency_ms"))
    assert "score() returned no 'latency_ms'" in str(missing.value)
    assert "Fix: return a dict holding each" in str(missing.value)
    with pytest.raises(ValueError, match="bare number"):
        add_asked_metrics(0.9, {}, ("accuracy", "latency_ms"))
    with pytest.raises(ValueError, match="not text"):
        add_asked_metrics(value, {}, ("memory_mb",))
