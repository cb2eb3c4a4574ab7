"""The peer in the same simulated cluster: Optuna's TPE sampler with its Hyperband pruner.

One Optuna study plays both roles of the simulation: ``ask`` gives new configurations,
``trial.report`` / ``trial.should_prune`` judge each epoch (Optuna's own pruner code), ``tell``
closes the trial (``PRUNED`` when the pruner stopped it, as ``study.optimize`` would record it).

Two things make the peer reproducible and affordable in the suite:

- the study is named after the seed: Optuna's Hyperband pruner puts a trial in a bracket by a
  checksum of the study's name and the trial's number, and an unnamed study gets a random name,
  so the same seed gave another run each time;
- Optuna 5's TPE computes ``log Phi`` (``optuna.samplers._tpe._truncnorm._log_ndtr``) one
  element at a time in Python, 60% of the suite's time at 256 workers;
  :func:`scipy.special.log_ndtr` (what Optuna called before it dropped SciPy) computes the same
  function vectorized, 20 times faster, and agrees with it to a relative 6e-8 (Optuna's own
  tail approximation above 6 standard deviations is the coarser of the two).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from scipy.special import log_ndtr

from ultron.algorithms.base import Direction
from ultron.algorithms.optuna_trials import to_optuna_distribution
from ultron.algorithms.space import Config, SearchSpace, canonical
from ultron.algorithms.stoppers.base import Decision, Stopper, TrialId


class OptunaPeer(Stopper):
    """Strategy and stopper at once, both Optuna's (``TPESampler`` + ``HyperbandPruner``)."""

    def __init__(
        self,
        search_space: SearchSpace,
        *,
        seed: int,
        direction: Direction | str,
        max_resource: int,
        min_resource: int = 1,
        reduction_factor: int = 3,
    ) -> None:
        super().__init__(direction=direction, min_resource=min_resource, max_resource=max_resource)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        _vectorize_log_ndtr()
        self._optuna = optuna
        self._distributions = {n: to_optuna_distribution(d) for n, d in search_space.items()}
        self.study = optuna.create_study(
            study_name=f"optuna-peer-seed-{seed}",
            direction=self.direction.value,
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=optuna.pruners.HyperbandPruner(
                min_resource=min_resource,
                max_resource=max_resource,
                reduction_factor=reduction_factor,
            ),
        )
        self._asked: list[Any] = []  # the simulation numbers trials in the order they are asked
        self._open: dict[str, list[int]] = {}
        self._pruned: set[int] = set()

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch = []
        for _ in range(n):
            trial = self.study.ask(self._distributions)
            config = dict(trial.params)
            self._open.setdefault(canonical(config), []).append(len(self._asked))
            self._asked.append(trial)
            batch.append(config)
        return batch

    def update_state(
        self, hyperparameter_candidates: Sequence[Config], validation_scores: Sequence[float]
    ) -> None:
        state = self._optuna.trial.TrialState
        for config, score in zip(hyperparameter_candidates, validation_scores, strict=True):
            index = self._open[canonical(config)].pop(0)
            trial = self._asked[index]
            if index in self._pruned:
                self.study.tell(trial, state=state.PRUNED)
            elif math.isnan(score):
                self.study.tell(trial, state=state.FAIL)
            else:
                self.study.tell(trial, score)

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        trial = self._asked[int(trial_id)]
        trial.report(value, step)
        if step >= self.max_resource:
            return Decision.STOP
        if trial.should_prune():
            self._pruned.add(int(trial_id))
            return Decision.STOP
        return Decision.CONTINUE


def _vectorize_log_ndtr() -> None:
    """Optuna's scalar ``log Phi`` replaced by SciPy's vectorized one (see the module docstring).

    Where the private function is gone (another Optuna), nothing is replaced: slower, not wrong.
    """
    from optuna.samplers._tpe import _truncnorm

    if hasattr(_truncnorm, "_log_ndtr"):
        _truncnorm._log_ndtr = log_ndtr
