"""Several objectives and constraints in a spec: accepted as written, read back the same, and
refused before any compute with the field, the value, the rule and the fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import Bound, Goal
from ultron.errors import ConfigIssue
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec
from ultron.spec.objectives import asked_metrics, job_bounds, job_goals

OnlyIssue = Callable[..., ConfigIssue]

TWO = [{"metric": "accuracy", "mode": "max"}, {"metric": "latency_ms", "mode": "min"}]
MEMORY = [{"metric": "memory_mb", "max": 2000}]


def raw(**fields: Any) -> dict[str, Any]:
    base = {"name": "mo", "code": ".", "model": "pkg.train:Model", "search_space": {"x": [1, 2]}}
    return {**base, **fields}


def test_objectives_and_constraints_load_and_read_back_the_same() -> None:
    spec = load_spec(raw(objectives=TWO, constraints=MEMORY, strategy="nsga2"), check_code=False)
    assert job_goals(spec) == (
        Goal("accuracy", Direction.MAXIMIZE),
        Goal("latency_ms", Direction.MINIMIZE),
    )
    assert job_bounds(spec) == (Bound("memory_mb", high=2000.0),)
    assert asked_metrics(spec) == ("accuracy", "latency_ms", "memory_mb")
    # The single objective mirrors the first (progress and logs show it), and a dumped spec
    # (which holds both) validates to the same spec.
    assert (spec.objective.metric, spec.objective.mode) == ("accuracy", Direction.MAXIMIZE)
    again = JobSpec.model_validate_json(spec.to_json(), context={"check_paths": False})
    assert again == spec


def test_one_objective_with_a_constraint_keeps_its_score() -> None:
    spec = load_spec(raw(constraints=MEMORY, strategy="tpe"), check_code=False)
    assert job_goals(spec) == (Goal("score", Direction.MINIMIZE),)
    assert asked_metrics(spec) == ("score", "memory_mb")
    assert asked_metrics(load_spec(raw(), check_code=False)) == ()


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"objectives": TWO[:1]}, "objectives", ["at least 2", "objective: {metric"]),
        ({"objectives": [TWO[0], {**TWO[1], "metric": "accuracy"}]}, "objectives", ["twice"]),
        (
            {"objectives": TWO, "objective": {"metric": "loss"}},
            "objectives",
            ["both given", "remove objective"],
        ),
        ({"objectives": [TWO[0], {**TWO[1], "mode": "up"}]}, "objectives.1.mode", ["max or min"]),
        (
            {"objectives": [TWO[0], {**TWO[1], "metric": "lat ms"}]},
            "objectives.1.metric",
            ["'lat ms' does not"],
        ),
        ({"objectives": TWO, "strategy": "evolution"}, "objectives", ["one objective", "nsga2"]),
        (
            {"objectives": TWO, "strategy": "optuna", "strategy_options": {"sampler": "cmaes"}},
            "objectives",
            ["one objective"],
        ),
        (
            {"objectives": TWO, "early_stopping": {"type": "asha", "max_resource": 9}},
            "objectives",
            ["early stopping", "remove early_stopping"],
        ),
        (  # population-based training too, before compute (PBT's own rules otherwise hold)
            {
                "objectives": TWO,
                "strategy": "motpe",
                "early_stopping": {"type": "pbt", "max_resource": 4},
                "num_iterations": 4,
                "parallelism": 4,
            },
            "objectives",
            ["early stopping (pbt)", "remove early_stopping"],
        ),
        (
            {"objectives": TWO, "objective": {**TWO[0], "mode": "maximize", "target": 0.9}},
            "objectives",
            ["objective.target"],
        ),
        ({"constraints": [{"metric": "memory_mb"}]}, "constraints.0", ["needs a bound"]),
        (
            {"constraints": [{"metric": "m", "min": 3, "max": 1}]},
            "constraints.0",
            ["must not exceed"],
        ),
        ({"constraints": MEMORY, "strategy": "cmaes"}, "constraints", ["cannot take constraints"]),
    ],
)
def test_bad_objectives_and_constraints_name_field_rule_and_fix(
    only_issue: OnlyIssue, fields: dict[str, Any], field: str, words: list[str]
) -> None:
    issue = only_issue(raw(**fields), check_code=False)
    assert issue.field == field
    text = f"{issue.rule} {issue.fix}"
    assert all(word in text for word in words), text


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_constraint_bounds_must_be_finite(only_issue: OnlyIssue, bad: float) -> None:
    issue = only_issue(raw(constraints=[{"metric": "m", "max": bad}]), check_code=False)
    assert issue.field == "constraints.0.max"
