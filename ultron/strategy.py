"""Builds the job's search strategy: a built-in by name, or the user's own class (paper IV-B).

A user's class is found by its dotted path in the user's code base and constructed with the
arguments its ``__init__`` accepts among ``search_space``, ``seed``, ``direction`` and the spec's
``strategy_options``; it needs only ``sample_hyperparameter_candidates`` and ``update_state``.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from algorithms.base import HPOAlgorithm
from algorithms.registry import is_builtin, load_object, resolve_strategy
from algorithms.stoppers.base import Stopper
from ultron.environment import TrialEnvironment
from ultron.errors import ConfigIssue, SpecError
from ultron.spec import JobSpec

__all__ = ["build_stopper", "build_strategy"]

_STOPPERS = {
    "asha": "algorithms.stoppers.asha:ASHA",
    "hyperband": "algorithms.stoppers.hyperband:Hyperband",
    "median": "algorithms.stoppers.median:MedianStopping",
    "pop": "algorithms.stoppers.pop:POP",
}


def _user_paths(env: TrialEnvironment | None) -> list[str]:
    if env is None:
        return []
    return [str(p) for p in (env.source / "src", env.source) if p.is_dir()]


def build_strategy(spec: JobSpec, env: TrialEnvironment | None = None) -> HPOAlgorithm:
    """The strategy object for ``spec``; user classes are imported from ``env``'s source.

    Raises:
        SpecError: the class cannot be found, lacks the interface, or rejects the options.
    """
    for path in _user_paths(env):
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        cls = resolve_strategy(spec.strategy)
    except (ImportError, AttributeError) as exc:
        raise SpecError(
            [
                ConfigIssue(
                    "strategy",
                    spec.strategy,
                    f"the class must be importable from the code base ({exc})",
                    "check the module path and the class name",
                )
            ]
        ) from None
    kwargs: dict[str, Any] = {
        "search_space": spec.space,
        "seed": spec.seed,
        "direction": spec.objective.mode,
        **spec.strategy_options,
    }
    if not is_builtin(spec.strategy):
        params = inspect.signature(cls).parameters
        takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
        kwargs = {k: v for k, v in kwargs.items() if takes_any or k in params}
    try:
        strategy = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(
            [
                ConfigIssue(
                    "strategy_options",
                    spec.strategy_options,
                    f"{spec.strategy} rejected them ({exc})",
                    "pass only the options the strategy documents",
                )
            ]
        ) from None
    if not isinstance(strategy, HPOAlgorithm):
        raise SpecError(
            [
                ConfigIssue(
                    "strategy",
                    spec.strategy,
                    "the class must have sample_hyperparameter_candidates(n) and update_state(...)",
                    "implement the paper's HPOAlgorithmInterface",
                )
            ]
        )
    return strategy


def build_stopper(spec: JobSpec) -> Stopper | None:
    """The job's stopper, or ``None`` without early stopping.

    Raises:
        SpecError: the stopper rejects the options.
    """
    stopping = spec.early_stopping
    if stopping is None:
        return None
    kwargs: dict[str, Any] = {
        "direction": spec.objective.mode,
        "min_resource": stopping.min_resource,
        "max_resource": stopping.max_resource,
    }
    if stopping.type in ("asha", "hyperband"):
        kwargs["reduction_factor"] = stopping.reduction_factor
    if stopping.type == "pop":
        kwargs.update(slots=spec.parallelism, seed=spec.seed)
    try:
        stopper: Stopper = load_object(_STOPPERS[stopping.type])(**kwargs, **stopping.options)
    except (TypeError, ValueError) as exc:
        raise SpecError(
            [
                ConfigIssue(
                    "early_stopping.options",
                    stopping.options,
                    f"{stopping.type} rejected them ({exc})",
                    "pass only the options the stopper documents",
                )
            ]
        ) from None
    return stopper
