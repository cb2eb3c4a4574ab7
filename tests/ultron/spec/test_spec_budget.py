"""The job's budget and target in the spec: durations with units, one trial count, and each
bad value one error naming the field, the value, the rule and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from ultron.errors import ConfigIssue, SpecError
from ultron.spec.budget import parse_duration
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

BASE = {"code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}


def _load(**fields: Any) -> JobSpec:
    return load_spec({**BASE, **fields}, check_code=False)


def _issue(**fields: Any) -> ConfigIssue:
    with pytest.raises(SpecError) as info:
        _load(**fields)
    assert len(info.value.issues) == 1, str(info.value)
    return info.value.issues[0]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("20 s", 20.0),
        ("2h", 7200.0),
        ("1h30m", 5400.0),
        ("1h 30m 15s", 5415.0),
        ("1.5h", 5400.0),
        ("45 minutes", 2700.0),
        ("2d", 172800.0),
        (20, 20.0),
        (0.5, 0.5),
        ("300", 300.0),
    ],
)
def test_durations_read_as_people_write_them(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert _load(budget={"time": text}).budget.time == seconds


@pytest.mark.parametrize("text", ["abc", "1x", "-3s", "1 2", "", "h", "1h30", True, [1]])
def test_a_bad_duration_is_one_error_with_the_fix(text: object) -> None:
    issue = _issue(budget={"time": text})
    assert issue.field == "budget.time"
    assert issue.value == text
    assert "duration" in issue.rule or "number" in issue.rule
    assert issue.fix


@pytest.mark.parametrize("text", [0, "0s", "0 h"])
def test_a_budget_of_no_time_is_refused(text: object) -> None:
    issue = _issue(budget={"time": text})
    assert (issue.field, issue.value) == ("budget.time", text)
    assert "longer than 0 s" in issue.rule
    assert "leave it out" in issue.fix


def test_budget_trials_is_num_iterations() -> None:
    spec = _load(budget={"trials": 7, "time": "1m"})
    assert (spec.num_iterations, spec.budget.trials, spec.budget.time) == (7, None, 60.0)
    assert _load(budget={"trials": 7}, num_iterations=7).num_iterations == 7
    # A dumped spec stays valid with num_iterations overridden (what experiments do).
    again = JobSpec.model_validate(
        {**spec.model_dump(mode="json"), "num_iterations": 3}, context={"check_paths": False}
    )
    assert again.num_iterations == 3
    assert _load(num_iterations=4).budget.time is None  # old specs: no time budget


def test_two_trial_counts_that_differ_are_refused() -> None:
    issue = _issue(budget={"trials": 5}, num_iterations=6)
    assert issue.field == "budget"
    assert "trials to 5" in issue.rule and "num_iterations is 6" in issue.rule
    assert "set one of" in issue.fix


def test_a_target_is_a_number() -> None:
    assert _load(objective={"mode": "maximize", "target": 0.9}).objective.target == 0.9
    issue = _issue(objective={"target": True})
    assert issue.field == "objective.target"
    assert _issue(objective={"target": "high"}).field == "objective.target"


def test_a_time_budget_past_a_year_is_a_typo() -> None:
    assert _load(budget={"time": "365d"}).budget.time == 365 * 24 * 3600
    issue = _issue(budget={"time": "400d"})
    assert issue.field == "budget.time" and issue.fix
