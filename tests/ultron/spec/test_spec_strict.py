"""Strict values in a spec: numbers are numbers (a whole number is fine where a float is asked,
text is not), counts and times have upper bounds, a tenant is named like a job id, and what a
spec's text echoes back has its control characters and bidi overrides escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from ultron.errors import ConfigIssue, SpecError, printable
from ultron.spec.job import MAX_RETRIES, MAX_TIMEOUT_S, JobSpec
from ultron.spec.loader import load_spec

ULTRON = Path(sys.executable).parent / "ultron"
BASE: dict[str, Any] = {
    "code": ".",
    "model": "pkg.train:Model",
    "search_space": {"lr": {"type": "uniform", "low": 0, "high": 1}},
}


def _only_issue(**changes: Any) -> ConfigIssue:
    with pytest.raises(SpecError) as info:
        load_spec({**BASE, **changes})
    assert len(info.value.issues) == 1, str(info.value)
    return info.value.issues[0]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"parallelism": "2"}, "parallelism"),
        ({"num_iterations": "10"}, "num_iterations"),
        ({"seed": "7"}, "seed"),
        ({"retries": "1"}, "retries"),
        ({"trial_timeout": "60"}, "trial_timeout"),
        ({"max_failed_share": "0.5"}, "max_failed_share"),
        (
            {"search_space": {"lr": {"type": "uniform", "low": "0", "high": 1}}},
            "search_space.lr.low",
        ),
        ({"search_space": {"n": {"type": "int", "low": 1, "high": "8"}}}, "search_space.n.high"),
        ({"resources": {"cpu": "2"}}, "resources.cpu"),
        ({"early_stopping": {"type": "asha", "max_resource": "9"}}, "early_stopping.max_resource"),
        ({"cluster": {"type": "kubernetes", "min_workers": "1"}}, "cluster.min_workers"),
        ({"data": {"url": "/d", "batch_size": "64"}}, "data.batch_size"),
        ({"parallelism_fact": "two"}, "parallelism_fact"),
    ],
)
def test_a_number_written_as_text_is_refused(changes: dict[str, Any], field: str) -> None:
    issue = _only_issue(**changes)
    assert issue.field == field, str(issue)
    assert "not text" in issue.rule, str(issue)
    assert "without quotes" in issue.fix or field == "parallelism_fact", str(issue)


def test_whole_numbers_stand_for_floats_and_the_papers_text_numbers_pass() -> None:
    spec = load_spec({**BASE, "trial_timeout": 5, "resources": {"cpu": 2}, "max_failed_share": 1})
    assert spec.trial_timeout == 5.0 and spec.resources.cpu == 2.0
    # The paper's Fig. 2 writes cpu_per_pod and gpu_per_pod as text: accepted as it is.
    paper = load_spec({**BASE, "parallelism_fact": "3", "cpu_per_pod": "5", "gpu_per_pod": "0.5"})
    assert (paper.parallelism, paper.resources.cpu, paper.resources.gpu) == (3, 5.0, 0.5)


def _models(annotation: Any, seen: set[type]) -> None:
    """Every spec model reachable from ``annotation``, into ``seen``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation not in seen:
            seen.add(annotation)
            for field in annotation.model_fields.values():
                _models(field.annotation, seen)
        return
    for arg in typing.get_args(annotation):
        _models(arg, seen)


def _numeric(annotation: Any) -> bool:
    if annotation in (int, float):
        return True
    args = typing.get_args(annotation)
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return union and any(a in (int, float) for a in args)


def test_every_number_field_of_the_spec_is_strict() -> None:
    """A field added later is strict too, or this test names it."""
    models: set[type] = set()
    _models(JobSpec, models)
    loose = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()  # type: ignore[attr-defined]
        if _numeric(field.annotation)
        and not any(getattr(m, "strict", None) for m in field.metadata)
    ]
    assert not loose, loose


@pytest.mark.parametrize(
    ("changes", "field", "bound"),
    [
        ({"retries": 1_000_000_000}, "retries", MAX_RETRIES),
        ({"trial_timeout": 1.0e300}, "trial_timeout", MAX_TIMEOUT_S),
        ({"acquire_timeout": 1.0e12}, "acquire_timeout", MAX_TIMEOUT_S),
        ({"parallelism": 10**9}, "parallelism", 10_000),
        ({"seed": 2**70}, "seed", 2**63 - 1),
        ({"early_stopping": {"type": "asha", "max_resource": 4, "grace_period": 1e9}},
         "early_stopping.grace_period", 86400),
    ],
)  # fmt: skip
def test_counts_and_times_have_upper_bounds(
    changes: dict[str, Any], field: str, bound: int
) -> None:
    issue = _only_issue(**changes)
    assert issue.field == field and str(bound) in issue.rule, str(issue)


def test_the_bounds_themselves_pass() -> None:
    spec = load_spec({**BASE, "retries": MAX_RETRIES, "trial_timeout": MAX_TIMEOUT_S})
    assert spec.retries == 100 and spec.trial_timeout == 30 * 24 * 3600


@pytest.mark.parametrize("tenant", ["../../etc", "a b:c", "", ".hidden", "t\u202eab", "x" * 129])
def test_a_tenant_is_named_like_a_job_id(tenant: str) -> None:
    issue = _only_issue(tenant=tenant)
    assert issue.field == "tenant" and "a tenant name must be" in issue.rule, str(issue)


def test_a_plain_tenant_passes() -> None:
    assert load_spec({**BASE, "tenant": "team-a.ml_2"}).tenant == "team-a.ml_2"


def test_control_characters_are_escaped_where_they_are_echoed(tmp_path: Path) -> None:
    sneaky = "demo\u202eexe.\x1b[2J"
    assert printable(sneaky) == "demo\\u202eexe.\\x1b[2J"
    # An unknown key is printed as the field name: escaped too.
    issue = _only_issue(**{"colour\u202e": 1})
    assert "\u202e" not in str(issue) and "\\u202e" in str(issue)
    # The real command: its ok line shows the name escaped, an error's line as well.
    project = tmp_path / "proj"
    (project / "pkg").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'proj'\n")
    (project / "pkg" / "__init__.py").write_text("")
    (project / "pkg" / "train.py").write_text(
        "class Model:\n    def score(self, hyperparameters, checkpoint_path, resume):\n"
        "        return 0.0\n"
    )
    env = {**os.environ, "ULTRON_HOME": str(tmp_path / "home")}
    for spec, code in (({"name": sneaky}, 0), ({"name": sneaky, "tenant": sneaky}, 2)):
        path = tmp_path / "job.json"
        path.write_text(json.dumps({**BASE, "code": "proj", **spec}))
        out = subprocess.run(
            [str(ULTRON), "validate", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            stdin=subprocess.DEVNULL,
        )
        text = out.stdout + out.stderr
        assert out.returncode == code, text
        assert "\u202e" not in text and "\x1b[2J" not in text, text
        assert "\\u202e" in text, text
