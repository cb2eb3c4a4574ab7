"""Builds a stopper the user brings: ``early_stopping.type: package.module:Class``.

The class is found in the user's code base like a user strategy (the caller imports it inside
:func:`ultron.containerize.user_code`, so the code base's own modules, a top-level ``stoppers``
package included, win over anything of the same name; ultron's own stoppers live under
``ultron.algorithms.stoppers`` and never take a top-level name). :mod:`ultron.spec.codebase`
checks it statically first (the file, the class, its ``on_report``); here it is checked by its
signature and built: it is constructed with those of ``direction``, ``min_resource``,
``max_resource``, ``seed`` and ``slots`` that its ``__init__`` names, and every one of
``early_stopping.options`` (an option it does not take is an error, naming the file).

A subclass of :class:`~ultron.algorithms.stoppers.Stopper` is used as it is; a class that only
duck types it (an ``on_report(trial_id, step, value)`` returning a decision, and any of the
other hooks) is wrapped in :class:`DuckStopper`, which gives the hooks it lacks their defaults.
"""

from __future__ import annotations

import inspect
from typing import Any

from ultron.algorithms.registry import load_object
from ultron.algorithms.stoppers.base import Decision, Stopper, TrialId
from ultron.errors import ConfigIssue, SpecError
from ultron.master.user_classes import accepted_names
from ultron.spec.job import EarlyStopping, JobSpec

__all__ = ["DuckStopper", "build_user_stopper"]

_FIELD = "early_stopping.type"
_HOOKS = (
    "on_trial_start",
    "on_trial_config",
    "on_late_report",
    "on_trial_complete",
    "poll",
    "set_slots",
    "lineage",
    "state_dict",
    "load_state_dict",
)


class DuckStopper(Stopper):
    """A user's object with the stopper's methods but not its base class, as a :class:`Stopper`.

    Args:
        inner: the user's object; its ``on_report`` is required, the other hooks are optional.
        max_resource: the spec's ``early_stopping.max_resource`` (a trial stops there).

    Example:
        >>> class Patient:
        ...     def on_report(self, trial_id, step, value):
        ...         return "stop" if value > 1 else "continue"
        >>> stopper = DuckStopper(Patient(), max_resource=5)
        >>> stopper.on_report("a", 1, 2.0), stopper.on_trial_start("a").max_resource
        (<Decision.STOP: 'stop'>, 5)
    """

    def __init__(self, inner: Any, *, max_resource: int) -> None:
        super().__init__(max_resource=max_resource)
        self.inner = inner
        for hook in _HOOKS:
            method = getattr(inner, hook, None)
            if callable(method):
                setattr(self, hook, method)

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        return Decision(self.inner.on_report(trial_id, step, value))


def build_user_stopper(spec: JobSpec, stopping: EarlyStopping) -> Stopper:
    """The user's stopper for ``spec``, imported from what the process imports now.

    Raises:
        SpecError: the class cannot be imported, lacks ``on_report``, or rejects the options;
            naming the file, the class and the fix.
    """
    path = stopping.type
    try:
        cls = load_object(path)
    except (ImportError, AttributeError) as exc:
        raise _issue(
            path,
            f"the class must be importable from the code base ({exc})",
            "check the module path and the class name (package.module:Class)",
        ) from None
    where = _where(cls)
    if not inspect.isclass(cls) or not callable(getattr(cls, "on_report", None)):
        raise _issue(
            path,
            f"{path} ({where}) must be a class with on_report(trial_id, step, value)",
            "subclass ultron.algorithms.stoppers.Stopper and define on_report",
        )
    kwargs = _kwargs(cls, spec, stopping, where)
    try:
        made = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SpecError(
            [
                ConfigIssue(
                    "early_stopping.options",
                    stopping.options,
                    f"{path} ({where}) rejected them ({exc})",
                    "pass only the options its __init__ takes, with values it accepts",
                )
            ]
        ) from None
    if isinstance(made, Stopper):
        return made
    return DuckStopper(made, max_resource=stopping.max_resource)


def _kwargs(cls: type, spec: JobSpec, stopping: EarlyStopping, where: str) -> dict[str, Any]:
    """The injections the ``__init__`` names, and every option, each of which it must take."""
    injected: dict[str, Any] = {
        "direction": spec.objective.mode,
        "min_resource": stopping.min_resource,
        "max_resource": stopping.max_resource,
        "seed": spec.seed,
        "slots": spec.parallelism,
    }
    accepted = accepted_names(
        cls,
        stopping.options,
        injected=injected,
        field="early_stopping.options",
        label=f"{stopping.type} ({where})",
    )
    if accepted is None:  # no signature to read: pass the options only
        return dict(stopping.options)
    named, _ = accepted
    kwargs = {k: v for k, v in injected.items() if k in named and k not in stopping.options}
    kwargs.update(stopping.options)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as exc:
        raise SpecError(
            [
                ConfigIssue(
                    _FIELD,
                    stopping.type,
                    f"ultron constructs {cls.__name__} ({where}) with keyword arguments "
                    f"{sorted(kwargs) or 'none'}, and it cannot take them ({exc})",
                    "give its other __init__ arguments defaults, or pass them in "
                    "early_stopping.options",
                )
            ]
        ) from None
    return kwargs


def _where(obj: Any) -> str:
    """The file that defines ``obj``, for messages."""
    try:
        return inspect.getsourcefile(obj) or "?"
    except TypeError:
        return "a compiled module"


def _issue(path: str, rule: str, fix: str) -> SpecError:
    return SpecError([ConfigIssue(_FIELD, path, rule, fix)])
