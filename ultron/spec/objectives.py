"""Several objectives and constraints in a job spec: ``objectives`` and ``constraints``.

``objectives: [{metric: accuracy, mode: max}, {metric: latency_ms, mode: min}]`` asks for the
Pareto front of two or more metrics; ``constraints: [{metric: memory_mb, max: 2000}]`` bounds
metrics (with one ``objective`` or several). A trial's ``score`` then returns a dict holding every
metric named. The single ``objective`` stays as it is: with ``objectives`` it mirrors the first
one (the metric the job's progress, target and logs show), and giving it a different value is an
error.

Refused before any compute: fewer than two objectives, a metric named twice, a bound that is
not finite or an empty range, a strategy that cannot take several objectives or constraints,
and early stopping with several objectives (no multi-objective stopper yet).

Example:
    >>> entries = ObjectiveEntry.model_validate({"metric": "accuracy", "mode": "max"})
    >>> entries.mode
    <Direction.MAXIMIZE: 'maximize'>
    >>> Constraint(metric="memory_mb", max=2000).bound
    Bound(metric='memory_mb', low=None, high=2000.0)
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import Bound, Goal
from ultron.algorithms.optuna_sampler import CONSTRAINED_SAMPLERS, MULTI_OBJECTIVE_SAMPLERS
from ultron.algorithms.registry import (
    CONSTRAINED_STRATEGIES,
    MULTI_OBJECTIVE_STRATEGIES,
    is_builtin,
)
from ultron.spec.strict import Strict, not_a_bool, rule_error

__all__ = [
    "Constraint",
    "ObjectiveEntry",
    "asked_metrics",
    "check_constraints",
    "check_objectives",
    "job_bounds",
    "job_goals",
    "mirror_first_objective",
    "uses_metrics",
]

_METRIC = re.compile(r"^[A-Za-z_][\w.\-/]*$")
_METRIC_RULE = (
    "a metric name starts with a letter or '_' and holds letters, digits, '_', '.', '-' or '/'"
)
_MODES = {"max": "maximize", "min": "minimize"}


def _metric_name(value: str) -> str:
    if not _METRIC.match(value):
        raise rule_error(
            f"{_METRIC_RULE}, and {value!r} does not",
            "write the key that score() returns, e.g. accuracy or latency_ms",
        )
    return value


class ObjectiveEntry(Strict):
    """One of several objectives: a metric that ``score`` returns, and its direction."""

    metric: str = Field(description="Name of a metric that score() returns in its dict.")
    mode: Direction = Field(
        description="max (maximize, e.g. an accuracy) or min (minimize, e.g. a latency)."
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _short_modes(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in (*_MODES, *_MODES.values()):
            raise rule_error(
                f"mode must be max or min (or maximize, minimize), and it is {value!r}",
                "write mode: max for an accuracy, mode: min for a loss or a latency",
            )
        return _MODES.get(value, value) if isinstance(value, str) else value

    _name = field_validator("metric")(_metric_name)

    @property
    def goal(self) -> Goal:
        """The objective as :mod:`ultron.algorithms.objectives` takes it."""
        return Goal(self.metric, self.mode)


class Constraint(Strict):
    """A bound on a metric that ``score`` returns: a trial outside it is infeasible (kept in the
    table and marked, never the best)."""

    metric: str = Field(description="Name of a metric that score() returns in its dict.")
    min: float | None = Field(default=None, strict=True, description="Lowest feasible value.")
    max: float | None = Field(default=None, strict=True, description="Highest feasible value.")

    _name = field_validator("metric")(_metric_name)
    _numbers_not_bool = field_validator("min", "max", mode="before")(not_a_bool)

    @model_validator(mode="after")
    def _a_range(self) -> Constraint:
        if self.min is None and self.max is None:
            raise rule_error(
                f"a constraint on {self.metric} needs a bound (min, max or both)",
                f"write e.g. {{metric: {self.metric}, max: 2000}}",
            )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise rule_error(
                f"min ({self.min}) must not exceed max ({self.max}): no value would be feasible",
                "swap the bounds, or widen them",
            )
        return self

    @property
    def bound(self) -> Bound:
        """The constraint as :mod:`ultron.algorithms.objectives` takes it."""
        return Bound(self.metric, self.min, self.max)


def mirror_first_objective(data: Any) -> Any:
    """A raw spec with ``objectives`` and no ``objective``: ``objective`` becomes the first
    objective (before validation, so a dumped spec reads back the same)."""
    if not isinstance(data, dict) or "objective" in data:
        return data
    entries = data.get("objectives")
    if not isinstance(entries, list) or not entries or not isinstance(entries[0], dict):
        return data
    first = entries[0]
    if not isinstance(first.get("metric"), str) or not isinstance(first.get("mode"), str):
        return data
    mode = _MODES.get(first["mode"], first["mode"])
    return {**data, "objective": {"metric": first["metric"], "mode": mode}}


def _strategy_takes(data: dict[str, Any], names: frozenset[str], samplers: frozenset[str]) -> bool:
    strategy = data.get("strategy")
    if not isinstance(strategy, str) or not is_builtin(strategy):
        return True  # a user's strategy is told the metric dicts (the interface says so)
    if strategy == "optuna":
        sampler = (data.get("strategy_options") or {}).get("sampler", "tpe")
        return str(sampler).lower() in samplers
    return strategy in names


def check_objectives(
    value: list[ObjectiveEntry] | None, info: ValidationInfo
) -> list[ObjectiveEntry] | None:
    """The rules of ``objectives`` that involve the rest of the spec (a field validator)."""
    if value is None:
        return None
    data = info.data
    if len(value) < 2:
        raise rule_error(
            f"objectives lists {len(value)} objective; it needs at least 2 (a Pareto front)",
            "for one metric write objective: {metric: ..., mode: ...}, or add a second objective",
        )
    names = [entry.metric for entry in value]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise rule_error(
            f"each metric may be an objective once, and {', '.join(twice)} is listed twice",
            "remove the repeated entry",
        )
    objective = data.get("objective")
    first = value[0]
    if objective is not None and (objective.metric, objective.mode) != (first.metric, first.mode):
        raise rule_error(
            f"objective ({objective.metric}, {objective.mode}) and objectives are both given; "
            "a job has one objective or several",
            "remove objective (the first of objectives is the one shown in progress), or "
            "remove objectives",
        )
    if objective is not None and objective.target is not None:
        raise rule_error(
            "objective.target ends a job on one metric, and a job with several objectives has "
            "no single best value",
            "remove objective.target, or set budget.trials or budget.time",
        )
    if not _strategy_takes(data, MULTI_OBJECTIVE_STRATEGIES, MULTI_OBJECTIVE_SAMPLERS):
        raise rule_error(
            f"strategy {data.get('strategy')} optimizes one objective, and {len(value)} are given",
            "set strategy to nsga2, nsga3, motpe, tpe, random or grid",
        )
    stopping = data.get("early_stopping")
    if stopping is not None:
        kind = getattr(stopping, "type", None) or "early stopping"
        raise rule_error(
            f"early stopping ({kind}) judges one metric, and no stopper ranks trials by several "
            "objectives yet (population-based training, pbt, included: it exploits the trials "
            "of one best score)",
            "remove early_stopping, or optimize one objective with constraints on the others",
        )
    return value


def check_constraints(value: list[Constraint], info: ValidationInfo) -> list[Constraint]:
    """The rules of ``constraints`` that involve the strategy (a field validator)."""
    if value and not _strategy_takes(info.data, CONSTRAINED_STRATEGIES, CONSTRAINED_SAMPLERS):
        raise rule_error(
            f"strategy {info.data.get('strategy')} cannot take constraints",
            "set strategy to tpe, motpe, nsga2, nsga3, gp (which avoid infeasible regions), "
            "random or grid, or remove constraints",
        )
    return value


class _Objectives(Protocol):
    """What the helpers below read of a ``JobSpec`` (named so, since job.py imports this
    module)."""

    @property
    def objective(self) -> Any: ...
    @property
    def objectives(self) -> list[ObjectiveEntry] | None: ...
    @property
    def constraints(self) -> list[Constraint]: ...


def job_goals(spec: _Objectives) -> tuple[Goal, ...]:
    """The job's objectives: its ``objectives``, or its one ``objective``."""
    if spec.objectives:
        return tuple(entry.goal for entry in spec.objectives)
    return (Goal(spec.objective.metric, spec.objective.mode),)


def job_bounds(spec: _Objectives) -> tuple[Bound, ...]:
    """The job's constraints as bounds."""
    return tuple(constraint.bound for constraint in spec.constraints)


def asked_metrics(spec: _Objectives) -> tuple[str, ...]:
    """The metrics every trial must return, each a finite number: empty for a job with one
    objective and no constraints (its score may be a bare float)."""
    if not spec.objectives and not spec.constraints:
        return ()
    names = [goal.metric for goal in job_goals(spec)] + [b.metric for b in job_bounds(spec)]
    return tuple(dict.fromkeys(names))


def uses_metrics(spec: _Objectives) -> bool:
    """Whether the strategy is told each trial's metrics (several objectives or constraints)."""
    return bool(asked_metrics(spec))
