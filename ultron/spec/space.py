"""The search space's entries, and the rules every number in a spec keeps.

A search-space entry is ``{type, low, high}`` (uniform, loguniform, int) or a choice of
values (a bare list ``[a, b, c]`` is one). Every number in a spec must be finite: pydantic's
float fields refuse ``.inf``/``.nan`` (YAML) and ``Infinity``/``NaN`` (JSON) through
:class:`Strict`, and free-form values (a choice's values, options) are searched with
:func:`non_finite`. An error made by :func:`rule_error` carries its own fix, which
:mod:`ultron.spec.loader` prints under the field's name.

Example:
    >>> DomainSpec.model_validate({"type": "int", "low": 1, "high": 8}).to_domain()
    IntRange(low=1, high=8, log=False)
    >>> DomainSpec.model_validate(["adam", "sgd"]).type
    'choice'
    >>> non_finite({"momentum": [0.9, float("nan")]})
    '.momentum[1]'
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ultron.algorithms.space import Choice, Domain, IntRange, LogUniform, Uniform

__all__ = ["DomainSpec", "Strict", "non_finite", "not_a_bool", "rule_error"]

_INT_LIMIT = 2**53


def rule_error(rule: str, fix: str) -> PydanticCustomError:
    """A validation error that carries its own fix, read back by ``ultron.spec.loader``."""
    return PydanticCustomError("ultron_rule", "{rule}", {"rule": rule, "fix": fix})


def non_finite(value: Any, path: str = "") -> str | None:
    """Where a float ``nan`` or ``inf`` hides in ``value`` (lists and mappings searched too):
    ``""`` for ``value`` itself, ``"[2]"`` or ``".key"`` below it; ``None`` when there is none."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    children: Any = ()
    if isinstance(value, list | tuple):
        children = ((f"{path}[{i}]", item) for i, item in enumerate(value))
    elif isinstance(value, dict):
        children = ((f"{path}.{key}", item) for key, item in value.items())
    for where, item in children:
        found = non_finite(item, where)
        if found is not None:
            return found
    return None


def _range_problem(kind: str, low: float, high: float) -> tuple[str, str] | None:
    """The rule and fix that finite bounds ``low``, ``high`` of a ``kind`` entry break, if any."""
    if low >= high and not (kind == "int" and low == high):
        return f"low ({low}) must be below high ({high})", "swap or widen the bounds"
    if not math.isfinite(high - low):
        return (
            f"high - low ({high} - {low}) must be a finite number, and it overflows",
            "narrow the bounds (a loguniform entry covers wide positive ranges)",
        )
    if kind == "loguniform" and low <= 0:
        return (
            f"loguniform bounds must be positive, low is {low}",
            "use a positive low, or type: uniform",
        )
    if kind == "int" and (low != int(low) or high != int(high)):
        return "int bounds must be whole numbers", "use integers for low and high"
    if kind == "int" and max(abs(low), abs(high)) > _INT_LIMIT:
        return (
            f"int bounds must lie within -2**53 and 2**53 ({_INT_LIMIT}), beyond which "
            "floats skip whole numbers",
            "narrow the bounds, or use type: loguniform for a wide positive range",
        )
    return None


def not_a_bool(value: Any) -> Any:
    """A ``mode="before"`` check for number fields: pydantic would read ``true`` as 1."""
    if isinstance(value, bool):
        raise rule_error("it must be a number, not true/false", "write a number")
    return value


class Strict(BaseModel):
    """The base of every spec model: unknown keys are errors, values are frozen, floats finite."""

    # allow_inf_nan=False: a float field refuses .inf and .nan (YAML) and Infinity/NaN (JSON).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class DomainSpec(Strict):
    """One search-space entry. A bare list ``[a, b, c]`` means ``{"type": "choice", ...}``."""

    type: Literal["uniform", "loguniform", "int", "choice"] = Field(
        description="uniform, loguniform (positive bounds), int (inclusive bounds) or choice."
    )
    low: float | None = Field(default=None, description="Lower bound (not for choice).")
    high: float | None = Field(default=None, description="Upper bound (not for choice).")
    values: list[Any] | None = Field(default=None, description="The options of a choice.")
    log: bool = Field(default=False, description="int only: draw on a log scale.")

    @model_validator(mode="before")
    @classmethod
    def _list_means_choice(cls, data: Any) -> Any:
        if isinstance(data, list | tuple):
            return {"type": "choice", "values": list(data)}
        return data

    _bounds_not_bool = field_validator("low", "high", mode="before")(not_a_bool)

    @field_validator("values")
    @classmethod
    def _finite_values(cls, value: list[Any] | None) -> list[Any] | None:
        where = non_finite(value)
        if where is not None:
            raise rule_error(
                f"its numbers must be finite (no nan or inf), and values{where} is not",
                "remove .nan/.inf (NaN/Infinity) from the values, or write a finite number",
            )
        return value

    @model_validator(mode="after")
    def _check_bounds(self) -> DomainSpec:
        if self.type == "choice":
            if not self.values:
                raise rule_error(
                    "a choice needs at least one value", "list the values, e.g. [0.1, 0.01]"
                )
            if self.low is not None or self.high is not None:
                raise rule_error(
                    "a choice takes values, not low/high", "remove low and high from this entry"
                )
            return self
        if self.low is None or self.high is None:
            raise rule_error(
                f"a {self.type} entry needs both low and high", "add low: and high: bounds"
            )
        problem = _range_problem(self.type, self.low, self.high)
        if problem is not None:
            raise rule_error(*problem)
        return self

    def to_domain(self) -> Domain:
        """The :mod:`ultron.algorithms.space` domain this entry describes."""
        if self.type == "choice":
            return Choice(tuple(self.values or ()))
        assert self.low is not None and self.high is not None  # checked by _check_bounds
        if self.type == "uniform":
            return Uniform(self.low, self.high)
        if self.type == "loguniform":
            return LogUniform(self.low, self.high)
        return IntRange(int(self.low), int(self.high), log=self.log)
