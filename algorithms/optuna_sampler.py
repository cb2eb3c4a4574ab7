"""Any Optuna sampler (TPE, CMA-ES, GP, QMC, NSGA-II/III, random) behind the paper's interface.

Optuna's ask-and-tell API does the work; this module maps our domains to Optuna distributions
(:mod:`ultron.algorithms.optuna_trials`), keeps asked trials open until the master scores them
(so several candidates may be outstanding at once, as in an asynchronous loop) and turns the
study into JSON-compatible state.

Several objectives and constraints (``objectives`` and ``constraints``, see
:mod:`ultron.algorithms.objectives`): the study gets one direction per objective, and each score
told is then the trial's metrics (a dict; ``nan`` for a failed trial). Constraints reach the
samplers that handle Optuna's constraints (TPE, NSGA-II, NSGA-III, GP) as one number per side of
a bound, ``<= 0`` when it holds (Optuna's ``Trial.set_constraint``).

State: every trial of the study (told and still open) plus the sampler, pickled, base64-encoded.
A fresh instance that loads it rebuilds the study trial by trial and continues identically.

A conditional space is asked define-by-run, each parameter suggested once it is active, under
its flat name (``momentum``, ``layers.0.width``): Optuna's samplers see exactly the parameters a
trial holds.
"""

from __future__ import annotations

import base64
import inspect
import logging
import math
import pickle
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ultron.algorithms.base import Direction, SearchAlgorithm
from ultron.algorithms.objectives import Bound, Goal
from ultron.algorithms.optuna_trials import (
    import_optuna,
    require,
    suggest,
    to_optuna_distribution,
    trial_from_json,
    trial_state,
    trial_to_json,
)
from ultron.algorithms.space import (
    Config,
    SearchSpace,
    canonical,
)

__all__ = [
    "CONSTRAINED_SAMPLERS",
    "MULTI_OBJECTIVE_SAMPLERS",
    "SAMPLERS",
    "CmaEsSearch",
    "GPSearch",
    "MOTPESearch",
    "NSGA2Search",
    "NSGA3Search",
    "OptunaSearch",
    "QMCSearch",
    "TPESearch",
]

logger = logging.getLogger(__name__)

# Sampler names of the job spec -> class names in ``optuna.samplers``.
SAMPLERS: dict[str, str] = {
    "tpe": "TPESampler",
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "qmc": "QMCSampler",
    "random": "RandomSampler",
    "nsga2": "NSGAIISampler",
    "nsga3": "NSGAIIISampler",
}

# The samplers that handle several objectives, and those that handle constraints.
MULTI_OBJECTIVE_SAMPLERS = frozenset({"tpe", "nsga2", "nsga3", "random"})
CONSTRAINED_SAMPLERS = frozenset({"tpe", "nsga2", "nsga3", "gp"})

# The prefix of a constraint value in a trial's system attrs (Optuna's Trial.set_constraint).
_CONSTRAINT_PREFIX = "constraints:"
# A bound that cannot be judged (the metric missing) violates by this much: finite, for JSON.
_UNJUDGED = 1e300

_MAX_REDRAWS = 20


class OptunaSearch(SearchAlgorithm):
    """Proposes configurations with an Optuna sampler chosen by name.

    Args:
        search_space: the domains to draw from.
        seed: seeds the sampler.
        direction: minimize or maximize the score.
        sampler: ``"tpe"`` (the default), ``"cmaes"``, ``"gp"``, ``"qmc"``, ``"nsga2"``,
            ``"nsga3"`` or ``"random"``.
        objectives: the objectives when the scores told are metric dicts (one direction each;
            ``direction`` is then unused); empty: each score is one number.
        constraints: bounds on metrics; the samplers in ``CONSTRAINED_SAMPLERS`` prefer
            configurations that satisfy them.
        **sampler_options: keyword arguments of the Optuna sampler class, for instance
            ``n_startup_trials=10`` for TPE.

    Example:
        >>> from ultron.algorithms.space import SearchSpace, Uniform
        >>> algo = OptunaSearch(SearchSpace({"x": Uniform(0.0, 1.0)}), seed=0)
        >>> batch = algo.sample_hyperparameter_candidates(2)
        >>> algo.update_state(batch, [0.5, float("nan")])
        >>> len(algo.state_dict()["trials"])
        2
    """

    default_sampler = "tpe"

    def __init__(
        self,
        search_space: SearchSpace,
        *,
        seed: int | None = None,
        direction: Direction | str = Direction.MINIMIZE,
        sampler: str | None = None,
        objectives: Sequence[Goal] = (),
        constraints: Sequence[Bound] = (),
        **sampler_options: Any,
    ) -> None:
        super().__init__(
            search_space,
            seed=seed,
            direction=direction,
            objectives=objectives,
            constraints=constraints,
        )
        self.sampler_name = self._sampler_name(sampler)
        _check_goals(self.sampler_name, self.goals, self.bounds)
        self.sampler_options = dict(sampler_options)
        self._distributions = {name: to_optuna_distribution(d) for name, d in search_space.items()}
        self._study = self._new_study(self._new_sampler())
        # canonical config -> numbers of asked trials not yet told, oldest first
        self._open: dict[str, list[int]] = {}

    @classmethod
    def _sampler_name(cls, sampler: str | None) -> str:
        name = sampler or cls.default_sampler
        if name.lower() not in SAMPLERS:
            raise ValueError(
                f"sampler is {name!r}; it must be one of {sorted(SAMPLERS)}: "
                "pick one of those names or bring your own algorithm by dotted path"
            )
        return name.lower()

    @classmethod
    def check_options(cls, *, sampler: str | None = None, **sampler_options: Any) -> None:
        """Raise for options the sampler would reject (TypeError, ValueError); builds nothing."""
        name = cls._sampler_name(sampler)
        sampler_class = getattr(import_optuna().samplers, SAMPLERS[name])
        inspect.signature(sampler_class).bind(seed=None, **sampler_options)

    def _new_sampler(self) -> Any:
        optuna = import_optuna()
        cls = getattr(optuna.samplers, SAMPLERS[self.sampler_name])
        if self.sampler_name == "cmaes":
            require("cmaes", "CMA-ES")
        if self.sampler_name == "gp":
            require("torch", "the GP sampler")
        options = dict(self.sampler_options)
        if self.sampler_name in ("cmaes", "gp", "qmc"):
            # Falling back to independent sampling for categoricals is expected here, not news.
            options.setdefault("warn_independent_sampling", False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return cls(seed=self.seed, **options)

    def _new_study(self, sampler: Any) -> Any:
        if self.goals:
            directions = [goal.direction.value for goal in self.goals]
            return import_optuna().create_study(sampler=sampler, directions=directions)
        return import_optuna().create_study(sampler=sampler, direction=self.direction.value)

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch: list[Config] = []
        seen: set[str] = set()
        for _ in range(n):
            config = self._ask_distinct(seen)
            seen.add(canonical(config))
            batch.append(config)
        return batch

    def _ask_distinct(self, seen: set[str]) -> Config:
        """Ask until the sampler proposes a config not yet in this batch (or gives up)."""
        for attempt in range(_MAX_REDRAWS + 1):
            if attempt == _MAX_REDRAWS:
                # The sampler keeps repeating itself: let Optuna record a random draw of ours.
                draw = self.search_space.sample(self.rng)
                self._study.enqueue_trial(self.search_space.flatten(draw))
            if self.search_space.conditional:
                trial = self._study.ask()
                config = self._suggest_conditional(trial)
            else:
                trial = self._study.ask(self._distributions)
                config = {name: trial.params[name] for name in self.search_space}
            key = canonical(config)
            if key not in seen or attempt == _MAX_REDRAWS or len(seen) >= self.search_space.size:
                self._open.setdefault(key, []).append(trial.number)
                return config
            # A repeat within the batch: close it so the sampler moves on.
            self._study.tell(trial.number, state=trial_state("FAIL"))
        raise AssertionError("unreachable")  # pragma: no cover

    def _suggest_conditional(self, trial: Any) -> Config:
        """Define-by-run: suggest each parameter only once it is active, as an Optuna objective
        does with ``if optimizer == "sgd": trial.suggest_float("momentum", ...)``. TPE then
        models each parameter on the trials that hold it (Optuna's conditional handling)."""
        flat: Config = {}
        for name in self.search_space:
            if self.search_space.is_active(name, flat):
                flat[name] = suggest(trial, name, self.search_space[name])
        return self.search_space.nest(flat)

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None:
        for config, score in zip(hyperparameter_candidates, validation_scores, strict=True):
            values, excesses = self._values(score)
            self._tell(config, values, excesses)

    def _values(self, score: Any) -> tuple[list[float] | None, dict[str, float]]:
        """The objective values Optuna is told (``None``: failed) and the constraint values."""
        if not isinstance(score, Mapping):
            if self.goals:  # a failed trial is told as nan whatever the objectives
                return None, {}
            return (None if math.isnan(float(score)) else [float(score)]), {}
        values = [_finite(score.get(goal.metric)) for goal in self.goals]
        if not self.goals or any(v is None for v in values):
            return None, {}
        return [float(v) for v in values if v is not None], self._constraint_attrs(score)

    def _constraint_attrs(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        attrs: dict[str, float] = {}
        for i, bound in enumerate(self.bounds):
            sides = [
                name for name, v in (("low", bound.low), ("high", bound.high)) if v is not None
            ]
            for side, excess in zip(sides, bound.excesses(metrics), strict=True):
                attrs[f"{_CONSTRAINT_PREFIX}{i}:{bound.metric}:{side}"] = min(excess, _UNJUDGED)
        return attrs

    def _tell(self, config: Config, values: list[float] | None, excesses: dict[str, float]) -> None:
        numbers = self._open.get(canonical(config))
        if not numbers:
            # Scored without being asked (a restored master, a user's seed point): record it.
            params = self.search_space.flatten(self.search_space.project(config))
            trial = import_optuna().trial.create_trial(
                state=trial_state("FAIL" if values is None else "COMPLETE"),
                values=values,
                params=params,
                distributions={name: self._distributions[name] for name in params},
                system_attrs=excesses if values is not None else None,
            )
            self._study.add_trial(trial)
            return
        number = numbers.pop(0)
        if not numbers:
            del self._open[canonical(config)]
        if values is None:
            self._study.tell(number, state=trial_state("FAIL"))
            return
        storage = self._study._storage
        trial_id = storage.get_trial_id_from_study_id_trial_number(self._study._study_id, number)
        for key, value in excesses.items():
            storage.set_trial_system_attr(trial_id, key, value)
        self._study.tell(number, values)

    def state_dict(self) -> dict[str, Any]:
        study = self._study
        return {
            **super().state_dict(),
            "sampler": base64.b64encode(pickle.dumps(study.sampler)).decode("ascii"),
            "study_system_attrs": study._storage.get_study_system_attrs(study._study_id),
            "trials": [trial_to_json(t) for t in study.get_trials(deepcopy=False)],
            "open": {key: list(numbers) for key, numbers in self._open.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        sampler = pickle.loads(base64.b64decode(state["sampler"]))
        self._study = self._new_study(sampler)
        for key, value in state["study_system_attrs"].items():
            self._study._storage.set_study_system_attr(self._study._study_id, key, value)
        for trial in state["trials"]:
            self._study.add_trial(trial_from_json(trial))
        self._open = {key: list(numbers) for key, numbers in state["open"].items()}


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _check_goals(sampler: str, goals: tuple[Goal, ...], bounds: tuple[Bound, ...]) -> None:
    if len(goals) > 1 and sampler not in MULTI_OBJECTIVE_SAMPLERS:
        raise ValueError(
            f"the {sampler} sampler optimizes one objective, and {len(goals)} were given: "
            f"use one of {sorted(MULTI_OBJECTIVE_SAMPLERS)}"
        )
    if bounds and not goals:
        raise ValueError("constraints need the objectives (the scores are then metric dicts)")


# The registry's names: each fixes the sampler, so a job spec says ``strategy: cmaes``.
class TPESearch(OptunaSearch):
    """Optuna's TPE sampler (Bergstra et al. 2011); ``constant_liar`` is on for async loops."""

    default_sampler = "tpe"


class CmaEsSearch(OptunaSearch):
    """Optuna's CMA-ES sampler (needs the ``cmaes`` package); categoricals are drawn at random."""

    default_sampler = "cmaes"


class GPSearch(OptunaSearch):
    """Optuna's Gaussian-process sampler (needs ``torch``)."""

    default_sampler = "gp"


class QMCSearch(OptunaSearch):
    """Optuna's quasi-Monte Carlo sampler (a Sobol sequence by default)."""

    default_sampler = "qmc"


class NSGA2Search(OptunaSearch):
    """Optuna's NSGA-II (Deb et al. 2002): evolution by non-dominated sorting and crowding
    distance, with constraints (``population_size``: 50 unless set)."""

    default_sampler = "nsga2"


class NSGA3Search(OptunaSearch):
    """Optuna's NSGA-III (Deb and Jain 2014): NSGA-II with reference points, for three or more
    objectives."""

    default_sampler = "nsga3"


class MOTPESearch(OptunaSearch):
    """Optuna's TPE on several objectives (MOTPE, Ozaki et al. 2020), with constraints."""

    default_sampler = "tpe"
