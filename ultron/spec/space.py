"""The search space's entries, and the rules every number in a spec keeps.

A search-space entry is ``{type, low, high}`` (uniform, loguniform, int) or a choice of
values (a bare list ``[a, b, c]`` is one). Every number in a spec must be finite: pydantic's
float fields refuse ``.inf``/``.nan`` (YAML) and ``Infinity``/``NaN`` (JSON) through
:class:`Strict`, and free-form values (a choice's values, options) are searched with
:func:`non_finite`. An error made by :func:`rule_error` carries its own fix, which
:mod:`ultron.spec.loader` prints under the field's name.

Example:
    >>> parse_entry({"type": "int", "low": 1, "high": 8}).to_domain()
    IntRange(low=1, high=8, log=False)
    >>> parse_entry(["adam", "sgd"]).type
    'choice'
    >>> non_finite({"momentum": [0.9, float("nan")]})
    '.momentum[1]'
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ultron.algorithms.space import Choice, Domain, IntRange, LogUniform, Uniform

__all__ = [
    "ENTRY_TYPES",
    "ChoiceSpec",
    "DomainSpec",
    "IntSpec",
    "LogUniformSpec",
    "Strict",
    "UniformSpec",
    "as_entry",
    "non_finite",
    "not_a_bool",
    "parse_entry",
    "rule_error",
]

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


def _without_legacy(data: Any) -> Any:
    """An entry as ultron before the typed entries dumped it (every key of every type, unused
    ones null or false), reduced to its type's keys: a stored spec still compares on resume."""
    if not isinstance(data, dict):
        return data
    unused = {k for k in ("low", "high", "values") if k in data and data[k] is None}
    if data.get("type") != "int" and data.get("log") is False:
        unused.add("log")
    return {k: v for k, v in data.items() if k not in unused}


class _Entry(Strict):
    """What every search-space entry has: its ``type``, the tag that tells them apart."""

    def to_domain(self) -> Domain:  # pragma: no cover - every entry overrides it
        raise NotImplementedError


class _Bounded(_Entry):
    """An entry drawn between two finite bounds."""

    type: str
    low: float = Field(strict=True, description="Lower bound.")
    high: float = Field(strict=True, description="Upper bound (above low).")

    _bounds_not_bool = field_validator("low", "high", mode="before")(not_a_bool)

    @model_validator(mode="before")
    @classmethod
    def _both_bounds(cls, data: Any) -> Any:
        data = _without_legacy(data)
        if isinstance(data, dict) and ("low" not in data or "high" not in data):
            kind = data.get("type", "bounded")
            raise rule_error(f"a {kind} entry needs both low and high", "add low: and high: bounds")
        return data

    @model_validator(mode="after")
    def _check_bounds(self) -> _Bounded:
        problem = _range_problem(self.type, float(self.low), float(self.high))
        if problem is not None:
            raise rule_error(*problem)
        return self


class UniformSpec(_Bounded):
    """A real number drawn uniformly between ``low`` and ``high``."""

    type: Literal["uniform"] = Field(description="uniform: a real number between low and high.")

    def to_domain(self) -> Domain:
        return Uniform(self.low, self.high)


class LogUniformSpec(_Bounded):
    """A positive real number drawn uniformly on a log scale (learning rates)."""

    type: Literal["loguniform"] = Field(
        description="loguniform: a positive real number, uniform on a log scale."
    )
    low: float = Field(strict=True, description="Lower bound (above 0).")

    def to_domain(self) -> Domain:
        return LogUniform(self.low, self.high)


_INTEGER: dict[str, Any] = {"type": "integer"}  # a form asks for a whole number


def _whole(value: Any) -> Any:
    """A ``mode="before"`` check of an int bound: 2.0 is fine, 2.5 is not."""
    not_a_bool(value)
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        raise rule_error("int bounds must be whole numbers", "use integers for low and high")
    if isinstance(value, float) and math.isfinite(value) and abs(value) <= _INT_LIMIT:
        return int(value)
    return value


class IntSpec(_Bounded):
    """A whole number between ``low`` and ``high``, both included."""

    type: Literal["int"] = Field(description="int: a whole number, low and high included.")
    low: float = Field(
        strict=True, description="Lower bound, a whole number.", json_schema_extra=_INTEGER
    )
    high: float = Field(
        strict=True, description="Upper bound, a whole number.", json_schema_extra=_INTEGER
    )
    log: bool = Field(default=False, description="Draw on a log scale.")

    _whole_bounds = field_validator("low", "high", mode="before")(_whole)

    def to_domain(self) -> Domain:
        return IntRange(int(self.low), int(self.high), log=self.log)


class ChoiceSpec(_Entry):
    """One of a list of values (a bare list ``[a, b, c]`` in a spec file means this)."""

    type: Literal["choice"] = Field(description="choice: one of the values.")
    values: list[Any] = Field(description="The options, e.g. [adam, sgd] or [1, 2, 4].")

    @model_validator(mode="before")
    @classmethod
    def _values_not_bounds(cls, data: Any) -> Any:
        data = _without_legacy(data)
        if isinstance(data, dict) and ("low" in data or "high" in data):
            raise rule_error(
                "a choice takes values, not low/high", "remove low and high from this entry"
            )
        return data

    @field_validator("values")
    @classmethod
    def _finite_values(cls, value: list[Any]) -> list[Any]:
        if not value:
            raise rule_error(
                "a choice needs at least one value", "list the values, e.g. [0.1, 0.01]"
            )
        where = non_finite(value)
        if where is not None:
            raise rule_error(
                f"its numbers must be finite (no nan or inf), and values{where} is not",
                "remove .nan/.inf (NaN/Infinity) from the values, or write a finite number",
            )
        return value

    def to_domain(self) -> Domain:
        return Choice(tuple(self.values))


ENTRY_TYPES: dict[str, type[_Entry]] = {
    "uniform": UniformSpec,
    "loguniform": LogUniformSpec,
    "int": IntSpec,
    "choice": ChoiceSpec,
}
"""The entry model of each ``type`` (the discriminator)."""

DomainSpec = Annotated[
    UniformSpec | LogUniformSpec | IntSpec | ChoiceSpec, Field(discriminator="type")
]
"""One search-space entry: a union of typed entries told apart by ``type`` (so a form shows
the fields of the type picked)."""


def as_entry(value: Any) -> Any:
    """A bare list (or tuple) means a choice; anything else is left for validation."""
    if isinstance(value, list | tuple):
        return {"type": "choice", "values": list(value)}
    return value


_ADAPTER: TypeAdapter[Any] = TypeAdapter(DomainSpec)


def parse_entry(value: Any) -> _Entry:
    """One search-space entry from what a spec holds (a mapping, or a list for a choice)."""
    entry: _Entry = _ADAPTER.validate_python(as_entry(value))
    return entry
