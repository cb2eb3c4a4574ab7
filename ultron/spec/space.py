"""The search space's entries: what a spec may write for each hyper-parameter.

A search-space entry is ``{type, low, high}`` (uniform, loguniform, int), a choice of
values (a bare list ``[a, b, c]`` is one) or a list of sub-spaces (``{count: [1, 4], each:
{...}}``, :class:`ListSpec`); any of them may exist only under a condition (``when:
{optimizer: sgd}``, checked across entries by :mod:`ultron.spec.conditions`).

Every entry is a :class:`~ultron.spec.strict.Strict` model, and keeps the rules every value in
a spec keeps (:mod:`ultron.spec.strict`).

Example:
    >>> parse_entry({"type": "int", "low": 1, "high": 8}).to_domain()
    IntRange(low=1, high=8, log=False)
    >>> parse_entry(["adam", "sgd"]).type
    'choice'
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter, field_validator, model_validator

from ultron.algorithms.conditional import Conditional, Repeated
from ultron.algorithms.domains import Choice, Domain, IntRange, LogUniform, Uniform
from ultron.spec.strict import Strict, non_finite, not_a_bool, rule_error

__all__ = [
    "ENTRY_TYPES",
    "ChoiceSpec",
    "DomainSpec",
    "IntSpec",
    "ListSpec",
    "LogUniformSpec",
    "UniformSpec",
    "as_entry",
    "parse_entry",
]

_INT_LIMIT = 2**53
MAX_LIST_LENGTH = 64
"""The most elements a list entry's count may allow (each is a parameter of the flat space)."""


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


def _without_legacy(data: Any) -> Any:
    """An entry as ultron before the typed entries dumped it (every key of every type, unused
    ones null or false), reduced to its type's keys: a stored spec still compares on resume."""
    if not isinstance(data, dict):
        return data
    unused = {k for k in ("low", "high", "values") if k in data and data[k] is None}
    if data.get("type") != "int" and data.get("log") is False:
        unused.add("log")
    return {k: v for k, v in data.items() if k not in unused}


def _check_when(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    if not value:
        raise rule_error(
            "when needs at least one parameter: value pair",
            "write e.g. when: {optimizer: sgd}, or remove when",
        )
    for name, wanted in value.items():
        options = wanted if isinstance(wanted, list) else [wanted]
        if not options or any(isinstance(v, list | dict) or v is None for v in options):
            raise rule_error(
                f"when.{name} must be one value or a list of values of {name}",
                f"write when: {{{name}: value}} or when: {{{name}: [value1, value2]}}",
            )
    return value


class _Entry(Strict):
    """What every search-space entry has: its ``type``, the tag that tells them apart, and an
    optional condition."""

    when: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Exists only when these parameters take these values, e.g. {optimizer: "
        "sgd} or {optimizer: [sgd, rmsprop]} (each a choice of the space); absent otherwise.",
    )

    _valid_when = field_validator("when")(_check_when)

    def to_domain(self) -> Domain:  # pragma: no cover - every entry overrides it
        raise NotImplementedError

    def _bare(self) -> Domain | Repeated:
        return self.to_domain()

    def space_entry(self) -> Domain | Repeated | Conditional:
        """What :class:`ultron.algorithms.space.SearchSpace` takes for this entry."""
        bare = self._bare()
        return Conditional(bare, when=self.when) if self.when else bare


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


PlainSpec = Annotated[
    UniformSpec | LogUniformSpec | IntSpec | ChoiceSpec, Field(discriminator="type")
]
"""One entry of a list's ``each``: a uniform, loguniform, int or choice entry."""


def as_entry(value: Any) -> Any:
    """A bare list (or tuple) means a choice, a mapping with ``each`` but no ``type`` a list;
    anything else is left for validation."""
    if isinstance(value, list | tuple):
        return {"type": "choice", "values": list(value)}
    if isinstance(value, dict) and "type" not in value and "each" in value:
        return {"type": "list", **value}
    return value


class ListSpec(_Entry):
    """A list of ``count`` sub-configurations, each drawn from the entries of ``each`` (a
    network of 1 to 4 layers, each with its own width). The model gets a list of dicts."""

    type: Literal["list"] = Field(description="list: a variable-length list of sub-spaces.")
    count: list[int] = Field(
        min_length=2,
        max_length=2,
        description=f"[fewest, most] elements, e.g. [1, 4] (a single n: exactly n); at most "
        f"{MAX_LIST_LENGTH}.",
    )
    each: dict[str, PlainSpec] = Field(
        description="Name -> entry of every element: uniform, loguniform, int or choice (a bare "
        "list is a choice)."
    )

    @field_validator("count", mode="before")
    @classmethod
    def _count_bounds(cls, value: Any) -> Any:
        value = [value, value] if isinstance(value, int) and not isinstance(value, bool) else value
        fix = "write count: [fewest, most], e.g. [1, 4], with whole numbers"
        if not isinstance(value, list) or len(value) != 2:
            raise rule_error("count must be [fewest, most] or a whole number", fix)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise rule_error("count's bounds must be whole numbers", fix)
        low, high = value
        if not 0 <= low <= high:
            raise rule_error(f"count must have 0 <= fewest ({low}) <= most ({high})", fix)
        if high > MAX_LIST_LENGTH:
            raise rule_error(
                f"count's most ({high}) must be at most {MAX_LIST_LENGTH}",
                f"lower the most to {MAX_LIST_LENGTH} or less",
            )
        return value

    @field_validator("each", mode="before")
    @classmethod
    def _each_entries(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        if not value:
            raise rule_error(
                "each needs at least one entry", "add one, e.g. each: {width: [32, 64]}"
            )
        for name, entry in value.items():
            if isinstance(entry, dict) and "when" in entry:
                raise rule_error(
                    "an element's entries cannot be conditional",
                    "remove when there (a condition may sit on the list itself)",
                    where=f"{name}.when",
                    value=entry["when"],
                )
            if isinstance(entry, dict) and ("each" in entry or entry.get("type") == "list"):
                raise rule_error(
                    "lists cannot nest: an element's entry must be uniform, loguniform, int or "
                    "choice",
                    "flatten it into the list's own entries",
                    where=name,
                    value=entry,
                )
        return {name: as_entry(entry) for name, entry in value.items()}

    def to_domain(self) -> Domain:
        """The domain of the count (the list's length)."""
        return IntRange(self.count[0], self.count[1])

    def _bare(self) -> Domain | Repeated:
        each = {name: entry.to_domain() for name, entry in self.each.items()}
        return Repeated(self.count[0], self.count[1], each)


ENTRY_TYPES: dict[str, type[_Entry]] = {
    "uniform": UniformSpec,
    "loguniform": LogUniformSpec,
    "int": IntSpec,
    "choice": ChoiceSpec,
    "list": ListSpec,
}
"""The entry model of each ``type`` (the discriminator)."""

DomainSpec = Annotated[
    UniformSpec | LogUniformSpec | IntSpec | ChoiceSpec | ListSpec, Field(discriminator="type")
]
"""One search-space entry: a union of typed entries told apart by ``type`` (so a form shows
the fields of the type picked)."""


_ADAPTER: TypeAdapter[Any] = TypeAdapter(DomainSpec)


def parse_entry(value: Any) -> _Entry:
    """One search-space entry from what a spec holds (a mapping, or a list for a choice)."""
    entry: _Entry = _ADAPTER.validate_python(as_entry(value))
    return entry
