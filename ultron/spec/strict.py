"""The base of every spec model, and the rules every value in a spec keeps.

Unknown keys are errors and values are frozen (:class:`Strict`); every number is finite:
pydantic's float fields refuse ``.inf``/``.nan`` (YAML) and ``Infinity``/``NaN`` (JSON), and
free-form values (a choice's values, options) are searched with :func:`non_finite`; a number
field never takes ``true``/``false`` (:func:`not_a_bool`). An error made by :func:`rule_error`
carries its own fix, which :mod:`ultron.spec.loader` prints under the field's name.

Example:
    >>> non_finite({"momentum": [0.9, float("nan")]})
    '.momentum[1]'
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_core import PydanticCustomError

__all__ = ["Strict", "non_finite", "not_a_bool", "rule_error"]


def rule_error(
    rule: str, fix: str, *, where: str | None = None, value: Any = None
) -> PydanticCustomError:
    """A validation error that carries its own fix, read back by ``ultron.spec.loader``.

    ``where``: a dotted path below the field being validated (``momentum.when.optimizer``
    under ``search_space``), with the ``value`` found there, for a rule that spans entries.
    """
    context: dict[str, Any] = {"rule": rule, "fix": fix}
    if where is not None:
        context.update(where=where, value=value)
    return PydanticCustomError("ultron_rule", "{rule}", context)


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


def not_a_bool(value: Any) -> Any:
    """A ``mode="before"`` check for number fields: pydantic would read ``true`` as 1."""
    if isinstance(value, bool):
        raise rule_error("it must be a number, not true/false", "write a number")
    return value


class Strict(BaseModel):
    """The base of every spec model: unknown keys are errors, values are frozen, floats finite."""

    # allow_inf_nan=False: a float field refuses .inf and .nan (YAML) and Infinity/NaN (JSON).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
