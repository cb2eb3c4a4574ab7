"""Resolves a strategy name from the job spec to an algorithm class.

Built-in names are case-insensitive (the paper writes ``"RANDOM"``). Anything else must be a
dotted path to a class in the user's code base: ``mypkg.search:MyAlgorithm`` or
``mypkg.search.MyAlgorithm``.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = [
    "BUILTIN_STRATEGIES",
    "CONSTRAINED_STRATEGIES",
    "MULTI_OBJECTIVE_STRATEGIES",
    "is_builtin",
    "looks_like_dotted_path",
    "resolve_strategy",
]

# Lazy "module:Class" targets, so naming a strategy never imports the others.
BUILTIN_STRATEGIES: dict[str, str] = {
    "random": "ultron.algorithms.random_search:RandomSearch",
    "grid": "ultron.algorithms.grid_search:GridSearch",
    "tpe": "ultron.algorithms.optuna_sampler:TPESearch",
    "cmaes": "ultron.algorithms.optuna_sampler:CmaEsSearch",
    "gp": "ultron.algorithms.optuna_sampler:GPSearch",
    "qmc": "ultron.algorithms.optuna_sampler:QMCSearch",
    "optuna": "ultron.algorithms.optuna_sampler:OptunaSearch",
    "reinforce": "ultron.algorithms.reinforce:ReinforceSearch",
    "evolution": "ultron.algorithms.evolution:RegularizedEvolution",
    "nsga2": "ultron.algorithms.optuna_sampler:NSGA2Search",
    "nsga3": "ultron.algorithms.optuna_sampler:NSGA3Search",
    "motpe": "ultron.algorithms.optuna_sampler:MOTPESearch",
}

# The built-ins that take several objectives (told metric dicts), and those that take
# constraints: random and grid ignore scores, so both suit them; "optuna" depends on its sampler
# (``ultron.algorithms.optuna_sampler``).
MULTI_OBJECTIVE_STRATEGIES = frozenset(
    {"random", "grid", "tpe", "motpe", "nsga2", "nsga3", "optuna"}
)
CONSTRAINED_STRATEGIES = frozenset(
    {"random", "grid", "tpe", "motpe", "nsga2", "nsga3", "gp", "optuna"}
)

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*([:.][A-Za-z_]\w*)$")


def is_builtin(name: str) -> bool:
    """Whether ``name`` is a built-in strategy (case-insensitive)."""
    return name.lower() in BUILTIN_STRATEGIES


def looks_like_dotted_path(name: str) -> bool:
    """Whether ``name`` has the shape ``package.module:Class`` or ``package.module.Class``."""
    return ("." in name or ":" in name) and bool(_DOTTED.match(name))


def load_object(path: str) -> Any:
    """Import ``module:attr`` or ``module.attr`` and return the attribute."""
    module_name, _, attr = path.partition(":") if ":" in path else path.rpartition(".")
    return getattr(importlib.import_module(module_name), attr)


def resolve_strategy(name: str) -> Any:
    """The class for a built-in name or a dotted path.

    The caller imports a user's class inside ``ultron.containerize.user_code``.
    """
    target = BUILTIN_STRATEGIES.get(name.lower(), name)
    return load_object(target)
