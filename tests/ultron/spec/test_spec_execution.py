"""The spec's ``execution`` section: ``trials`` by default, ``hopper`` with its epochs, and what a
hopper job cannot combine with refused before compute, naming the field, the rule and the fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from ultron.errors import ConfigIssue, SpecError
from ultron.master.hopper_search import check_hopper_model
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

BASE = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}
HOPPER = {
    "execution": {"mode": "hopper", "epochs": 3},
    "data": {"url": "s3://bucket/corpus/", "format": "numpy"},
    "parallelism": 3,
}


def _load(**fields: Any) -> JobSpec:
    return load_spec({**BASE, **fields}, check_code=False)


def _issue(**fields: Any) -> ConfigIssue:
    with pytest.raises(SpecError) as info:
        _load(**fields)
    assert len(info.value.issues) == 1, str(info.value)
    return info.value.issues[0]


def test_trials_is_the_default_and_hopper_takes_its_epochs() -> None:
    assert _load().execution.mode == "trials" and not _load().execution.hopper
    assert _load(execution="trials").execution.epochs is None
    spec = _load(**HOPPER)
    assert spec.execution.hopper and spec.execution.epochs == 3


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"execution": "hopper"}, "execution", "needs the number of epochs"),
        ({"execution": {"mode": "trials", "epochs": 2}}, "execution", "only execution mode"),
        ({"execution": {"mode": "hop", "epochs": 2}}, "execution.mode", "'trials' or 'hopper'"),
        ({"execution": {"mode": "hopper", "epochs": 0}}, "execution.epochs", "greater than"),
        ({**HOPPER, "data": None}, "execution", "data is not set"),
        ({**HOPPER, "data": {"url": "s3://b/x.parquet"}}, "execution", "is not numpy"),
        ({**HOPPER, "loop": "batch"}, "execution", "loop is batch"),
        ({**HOPPER, "min_parallelism": 1}, "execution", "min_parallelism is 1"),
        ({**HOPPER, "budget": {"time": "1h"}}, "execution", "budget.time"),
        ({**HOPPER, "warm_start": {"jobs": ["earlier-job"]}}, "execution", "warm_start seeds"),
        (
            {
                **HOPPER,
                "objectives": [{"metric": "acc", "mode": "max"}, {"metric": "ms", "mode": "min"}],
            },
            "execution",
            "objectives ask each trial for several metrics",
        ),
        (
            {**HOPPER, "constraints": [{"metric": "memory_mb", "max": 2000}]},
            "execution",
            "constraints ask each trial",
        ),
        (
            {**HOPPER, "data": {"url": "s3://b/d/", "format": "numpy", "placement": "stream"}},
            "execution",
            "data.placement (stream)",
        ),
        (
            {**HOPPER, "early_stopping": {"type": "hyperband", "max_resource": 3}},
            "execution",
            "early_stopping.type is hyperband",
        ),
    ],
)
def test_what_hopper_cannot_take_is_one_error_with_its_fix(
    fields: dict[str, Any], field: str, words: str
) -> None:
    issue = _issue(**fields)
    assert issue.field == field and words in issue.rule, issue
    assert issue.fix


@pytest.mark.parametrize("cluster", ["local", "slurm", "kubernetes"])
def test_the_job_s_own_clusters_run_hopper_jobs(cluster: str) -> None:
    # They start one worker per partition (ultron/cluster/slurm.py, kubernetes.py).
    spec = _load(**HOPPER, cluster={"type": cluster})
    assert spec.execution.hopper and spec.cluster.type == cluster


def test_asha_stops_hopper_configurations_after_an_epoch() -> None:
    spec = _load(**HOPPER, early_stopping={"type": "asha", "max_resource": 3})
    assert spec.execution.hopper and spec.early_stopping is not None


def test_a_model_without_train_epoch_is_refused_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hopmodels.py").write_text(
        "class Scores:\n    def score(self, h, c, r):\n        return 0.0\n"
        "class Epochs:\n    def train_epoch(self, h, c, r):\n        return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    check_hopper_model("hopmodels:Epochs")
    with pytest.raises(SpecError) as info:
        check_hopper_model("hopmodels:Scores")
    (issue,) = info.value.issues
    assert issue.field == "model" and "train_epoch" in issue.rule and "train_epoch" in issue.fix
    sys.modules.pop("hopmodels", None)


def test_the_code_base_check_asks_a_hopper_model_for_train_epoch(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\nversion = '0'\n")
    (tmp_path / "m.py").write_text(
        "class Scores:\n    def score(self, h, c, r):\n        return 0.0\n"
        "class Epochs:\n    def train_epoch(self, h, c, r):\n        return {}\n"
    )
    hopper = {**BASE, **HOPPER, "code": str(tmp_path)}
    load_spec({**hopper, "model": "m:Epochs"}, check_code=True)
    with pytest.raises(SpecError) as info:
        load_spec({**hopper, "model": "m:Scores"}, check_code=True)
    (issue,) = info.value.issues
    assert issue.field == "model" and "train_epoch" in issue.rule
