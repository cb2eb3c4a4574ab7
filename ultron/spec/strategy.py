"""The spec's ``strategy`` and ``strategy_options``: a built-in strategy by name, or the
user's own class in the code base (paper Fig. 5), and the keyword arguments it is built with.

Example:
    >>> check_strategy_name("TPE"), check_strategy_name("mypkg.search:MySearch")
    ('tpe', 'mypkg.search:MySearch')
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from ultron.algorithms.registry import BUILTIN_STRATEGIES, is_builtin, looks_like_dotted_path
from ultron.spec.strict import non_finite, rule_error

__all__ = ["StrategyName", "UserStrategy", "check_strategy_name", "check_strategy_options"]

StrategyName = Annotated[
    Literal[
        "random",
        "grid",
        "tpe",
        "cmaes",
        "gp",
        "qmc",
        "optuna",
        "reinforce",
        "evolution",
        "nsga2",
        "nsga3",
        "motpe",
    ],
    Field(title="Built-in"),
]
"""The built-in strategies (``ultron.algorithms.registry``; a test keeps the two in step)."""

UserStrategy = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$"),
    Field(title="Your own strategy", description="package.module:Class in your code base."),
]
"""A bring-your-own strategy (paper Fig. 5) named by its class."""


def check_strategy_name(value: Any) -> Any:
    """A built-in name (any case: the paper writes TPE) in lower case, or a class path as it
    is (a field validator, before the type's own check)."""
    if not isinstance(value, str):
        return value
    if is_builtin(value):
        return value.lower()
    if looks_like_dotted_path(value):
        return value
    names = ", ".join(sorted(BUILTIN_STRATEGIES))
    raise rule_error(
        f"strategy must be a built-in ({names}) or package.module:Class",
        "pick a built-in name, or point at your own class",
    )


def check_strategy_options(value: dict[str, Any]) -> dict[str, Any]:
    """``strategy_options`` hold finite numbers only (a field validator)."""
    where = non_finite(value)
    if where is not None:
        raise rule_error(
            f"its numbers must be finite (no nan or inf), and strategy_options{where} is not",
            "write a finite number there, or leave the option out for its default",
        )
    return value
