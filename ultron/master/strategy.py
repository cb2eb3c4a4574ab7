"""Builds the job's search strategy: a built-in by name, or the user's own class (paper IV-B).

A user's class is found by its dotted path in the user's code base and constructed with those
of ``search_space``, ``seed`` and ``direction`` that its ``__init__`` names, and with every one
of the spec's ``strategy_options`` (an option it does not take is an error); it needs only
``sample_hyperparameter_candidates`` and ``update_state``.
The caller imports it inside :func:`ultron.containerize.user_code`, so the code base's own
modules win over anything of the same name.

A job builds its strategy and its stopper once, in the flow, before it takes resources;
:func:`check_options` checks a built-in's options before the flow starts without building
anything. A user's stopper (``early_stopping.type: package.module:Class``) is built by
:mod:`ultron.master.user_stopper`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ultron.algorithms.base import HPOAlgorithm
from ultron.algorithms.registry import is_builtin, load_object, resolve_strategy
from ultron.algorithms.stoppers.base import Stopper
from ultron.errors import ConfigIssue, SpecError
from ultron.master.user_classes import accepted_names
from ultron.master.user_stopper import build_user_stopper
from ultron.spec.job import EarlyStopping, JobSpec
from ultron.spec.objectives import job_bounds, job_goals, uses_metrics

__all__ = ["build_stopper", "build_strategy", "check_options"]

_STOPPERS = {
    "asha": "ultron.algorithms.stoppers.asha:ASHA",
    "hyperband": "ultron.algorithms.stoppers.hyperband:Hyperband",
    "median": "ultron.algorithms.stoppers.median:MedianStopping",
    "pop": "ultron.algorithms.stoppers.pop:POP",
    "pbt": "ultron.algorithms.stoppers.pbt:PBT",
    "bandit": "ultron.algorithms.stoppers.bandit:Bandit",
    "earlyterm": "ultron.algorithms.stoppers.earlyterm:EarlyTerm",
}


def build_strategy(spec: JobSpec) -> HPOAlgorithm:
    """The strategy object for ``spec``.

    A user's class is imported from what the process imports now: build it inside
    ``user_code(import_paths(env.source))``.

    Raises:
        SpecError: the class cannot be found, lacks the interface, or rejects the options.
    """
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
    kwargs = _strategy_kwargs(spec) if is_builtin(spec.strategy) else _users_kwargs(cls, spec)
    try:
        strategy = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise _rejected(spec, exc) from None
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
    if spec.early_stopping is None:
        return None
    if spec.early_stopping.type not in _STOPPERS:
        return build_user_stopper(spec, spec.early_stopping)
    try:
        stopper: Stopper = load_object(_STOPPERS[spec.early_stopping.type])(
            **_stopper_kwargs(spec, spec.early_stopping)
        )
    except (TypeError, ValueError) as exc:
        raise _rejected(spec, exc, stopper=True) from None
    return stopper


def check_options(spec: JobSpec) -> None:
    """Check a built-in strategy's and the stopper's options by their signatures; builds nothing.

    Raises:
        SpecError: an option the class does not take, or a required one missing.
    """
    if is_builtin(spec.strategy):
        cls = resolve_strategy(spec.strategy)
        _bind(cls, _strategy_kwargs(spec), spec.strategy_options, spec, stopper=False)
    if spec.early_stopping is not None and spec.early_stopping.type in _STOPPERS:
        stopping = spec.early_stopping  # a user's stopper is checked when the flow builds it
        cls = load_object(_STOPPERS[stopping.type])
        _bind(cls, _stopper_kwargs(spec, stopping), stopping.options, spec, stopper=True)
        if stopping.type == "pbt":  # pure and instant to build: its values are checked too
            build_stopper(spec)


def _bind(
    cls: Callable[..., Any],
    kwargs: dict[str, Any],
    options: dict[str, Any],
    spec: JobSpec,
    *,
    stopper: bool,
) -> None:
    """Bind ``kwargs`` to the class's signature, and ask its ``check_options`` hook, if any,
    about the ``options`` it passes on (an Optuna sampler's)."""
    try:
        inspect.signature(cls).bind(**kwargs)
        hook = getattr(cls, "check_options", None)
        if hook is not None:
            hook(**options)
    except (TypeError, ValueError) as exc:
        raise _rejected(spec, exc, stopper=stopper) from None


def _strategy_kwargs(spec: JobSpec) -> dict[str, Any]:
    # Several objectives or constraints: the strategy is told metric dicts, and what they mean.
    told = {"objectives": job_goals(spec), "constraints": job_bounds(spec)}
    return {
        "search_space": spec.space,
        "seed": spec.seed,
        "direction": spec.objective.mode,
        **(told if uses_metrics(spec) else {}),
        **spec.strategy_options,
    }


_INJECTED = ("search_space", "seed", "direction", "objectives", "constraints")


def _users_kwargs(cls: Callable[..., Any], spec: JobSpec) -> dict[str, Any]:
    """The arguments for a user's class: the injections its ``__init__`` names, and every
    option, each of which it must take.

    Raises:
        SpecError: an option the class does not take (a typo would otherwise be lost).
    """
    accepted = accepted_names(
        cls,
        spec.strategy_options,
        injected=_INJECTED,
        field="strategy_options",
        label=str(spec.strategy),
    )
    if accepted is None:  # no signature to read: pass what the spec says
        return _strategy_kwargs(spec)
    named, takes_any = accepted
    injected = {k: v for k, v in _strategy_kwargs(spec).items() if k in _INJECTED}
    return {
        **{k: v for k, v in injected.items() if takes_any or k in named},
        **spec.strategy_options,
    }


def _stopper_kwargs(spec: JobSpec, stopping: EarlyStopping) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "direction": spec.objective.mode,
        "min_resource": stopping.min_resource,
        "max_resource": stopping.max_resource,
    }
    if stopping.type in ("asha", "hyperband"):
        kwargs["reduction_factor"] = stopping.reduction_factor
    if stopping.type == "pop":
        kwargs.update(slots=spec.parallelism, seed=spec.seed)
    if stopping.type == "earlyterm":
        kwargs["seed"] = spec.seed
    if stopping.type == "pbt":
        kwargs.update(population=spec.parallelism, search_space=spec.space, seed=spec.seed)
    return {**kwargs, **stopping.options}


def _rejected(spec: JobSpec, exc: Exception, *, stopper: bool = False) -> SpecError:
    if stopper and spec.early_stopping is not None:
        field, value, name = "early_stopping.options", spec.early_stopping.options, "stopper"
        who: str = spec.early_stopping.type
    else:
        field, value, name, who = (
            "strategy_options",
            spec.strategy_options,
            "strategy",
            spec.strategy,
        )
    return SpecError(
        [
            ConfigIssue(
                field,
                value,
                f"{who} rejected them ({exc})",
                f"pass only the options the {name} documents",
            )
        ]
    )
