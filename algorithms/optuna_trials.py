"""Optuna's side of :mod:`ultron.algorithms.optuna_sampler`: our domains as Optuna's
distributions and define-by-run suggestions, and Optuna's frozen trials as JSON and back (the
strategy's state survives a restart of the master, trial by trial).

Optuna is imported when first needed, at its warning level.
"""

from __future__ import annotations

from typing import Any

from ultron.algorithms.domains import Choice, Domain, IntRange, LogUniform

__all__ = [
    "import_optuna",
    "require",
    "suggest",
    "to_optuna_distribution",
    "trial_from_json",
    "trial_state",
    "trial_to_json",
]


def import_optuna() -> Any:
    """The optuna module, its logging at warnings only."""
    try:
        import optuna
    except ImportError as error:  # pragma: no cover - optuna is a core dependency
        raise ImportError("OptunaSearch needs optuna: pip install ultron-automl") from error
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def to_optuna_distribution(domain: Domain) -> Any:
    """The Optuna distribution equivalent to one of our domains.

    Example:
        >>> to_optuna_distribution(IntRange(1, 8, log=True))
        IntDistribution(high=8, log=True, low=1, step=1)
    """
    distributions = import_optuna().distributions
    if isinstance(domain, Choice):
        return distributions.CategoricalDistribution(list(domain.values))
    if isinstance(domain, IntRange):
        return distributions.IntDistribution(domain.low, domain.high, log=domain.log)
    log = isinstance(domain, LogUniform)
    return distributions.FloatDistribution(domain.low, domain.high, log=log)


def suggest(trial: Any, name: str, domain: Domain) -> Any:
    """``trial.suggest_*`` for one of our domains (the public define-by-run calls)."""
    if isinstance(domain, Choice):
        return trial.suggest_categorical(name, list(domain.values))
    if isinstance(domain, IntRange):
        return trial.suggest_int(name, domain.low, domain.high, log=domain.log)
    return trial.suggest_float(name, domain.low, domain.high, log=isinstance(domain, LogUniform))


def require(module: str, what: str) -> None:
    """Raise ImportError, naming the package to install, when ``module`` is missing."""
    try:
        __import__(module)
    except ImportError as error:
        raise ImportError(
            f"{what} needs the {module!r} package: pip install {module} "
            "(or the ultron-automl extra that provides it)"
        ) from error


def trial_state(name: str) -> Any:
    """Optuna's ``TrialState`` of that name."""
    return getattr(import_optuna().trial.TrialState, name)


def trial_to_json(trial: Any) -> dict[str, Any]:
    """An Optuna frozen trial as JSON data (:func:`trial_from_json` reads it back)."""
    to_json = import_optuna().distributions.distribution_to_json
    return {
        "state": trial.state.name,
        "values": trial.values,
        "params": dict(trial.params),
        "distributions": {name: to_json(d) for name, d in trial.distributions.items()},
        "system_attrs": dict(trial.system_attrs),
        "user_attrs": dict(trial.user_attrs),
        "intermediate_values": {str(k): v for k, v in trial.intermediate_values.items()},
    }


def trial_from_json(data: dict[str, Any]) -> Any:
    """The frozen trial of :func:`trial_to_json`'s ``data``, open ones (RUNNING) included."""
    optuna = import_optuna()
    from_json = optuna.distributions.json_to_distribution
    state = trial_state(data["state"])
    kwargs = {
        "params": data["params"],
        "distributions": {name: from_json(d) for name, d in data["distributions"].items()},
        "system_attrs": data["system_attrs"],
        "user_attrs": data["user_attrs"],
        "intermediate_values": {int(k): v for k, v in data["intermediate_values"].items()},
    }
    if state.name == "RUNNING":
        # create_trial refuses open trials; build the frozen trial with the same fields.
        trial = optuna.trial.create_trial(state=trial_state("COMPLETE"), value=0.0, **kwargs)
        trial.state, trial.values, trial.datetime_complete = state, None, None
        return trial
    values = data["values"] if "values" in data else _one(data.get("value"))
    return optuna.trial.create_trial(state=state, values=values, **kwargs)


def _one(value: float | None) -> list[float] | None:
    """A state stored before several objectives (one ``value``) as Optuna's ``values``."""
    return None if value is None else [value]
