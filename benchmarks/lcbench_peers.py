"""Peers for the LCBench suite, each run in the same simulated cluster as our methods.

Like :class:`~benchmarks.optuna_peer.OptunaPeer`, each peer is strategy and stopper at once:
``sample_hyperparameter_candidates`` / ``update_state`` on the strategy side, ``on_report`` /
``poll`` on the stopper side, so the real master drives it on the simulated clock with the
same worker count as every other method. The master numbers trials in the order they are asked
(``0000``, ``0001``, ...), so ``int(trial_id)`` indexes the peer's list of asked jobs.

- :class:`DEHBPeer`: DEHB (Awad et al. 2021), the ``dehb`` package's own ask/tell optimizer.
- :class:`OneEpochTopK`: the one-epoch baseline of Egele et al. 2023 (arXiv 2307.15422).
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from ultron.algorithms.space import Config, IntRange, LogUniform, SearchSpace, Uniform, canonical
from ultron.algorithms.stoppers.base import Command, Decision, Stopper, TrialId

DEHB_VERSION = "0.1.2"


class PeerMissing(RuntimeError):
    """A peer's package is not installed; the message says how to install it."""


def to_configspace(space: SearchSpace, seed: int) -> Any:
    """The search space as a ``ConfigSpace.ConfigurationSpace`` (what DEHB searches)."""
    import ConfigSpace as CS

    cs = CS.ConfigurationSpace(seed=seed)
    for name, domain in space.items():
        if isinstance(domain, IntRange):
            cs.add(CS.UniformIntegerHyperparameter(name, domain.low, domain.high, log=domain.log))
        elif isinstance(domain, LogUniform | Uniform):
            log = isinstance(domain, LogUniform)
            cs.add(CS.UniformFloatHyperparameter(name, domain.low, domain.high, log=log))
        else:
            raise TypeError(f"{name}: {type(domain).__name__} has no ConfigSpace mapping here")
    return cs


class _Peer(Stopper):
    """What both peers share: the asked jobs in trial order, and trials matched by config."""

    def __init__(self, *, max_resource: int) -> None:
        super().__init__(direction="maximize", max_resource=max_resource)
        self.asked: list[dict[str, Any]] = []
        self._open: dict[str, list[int]] = {}

    def _ask(self, config: Config, job: dict[str, Any]) -> Config:
        self._open.setdefault(canonical(config), []).append(len(self.asked))
        self.asked.append(job)
        return config

    def _told(self, config: Config) -> dict[str, Any]:
        return self.asked[self._open[canonical(config)].pop(0)]


class DEHBPeer(_Peer):
    """DEHB's ask/tell in the simulated cluster: each ask is one trial, run from scratch to the
    fidelity DEHB chose (rounded up to whole epochs), then stopped; its score is told back
    (fitness = -accuracy, cost = simulated seconds). DEHB runs its own asynchronous brackets
    (``n_workers=1``: no Dask client of its own; our simulated workers run the jobs).

    Raises:
        PeerMissing: the ``dehb`` package is not installed.
    """

    def __init__(self, search_space: SearchSpace, *, seed: int, max_resource: int) -> None:
        super().__init__(max_resource=max_resource)
        try:
            from dehb import DEHB
        except ImportError as error:
            raise PeerMissing(
                f"DEHB skipped: the dehb package is not installed (pip install "
                f"--no-deps dehb=={DEHB_VERSION}: it declares numpy<2 and runs on ours)"
            ) from error
        self._folder = tempfile.mkdtemp(prefix="ultron-dehb-")  # DEHB insists on a log file
        cs = to_configspace(search_space, seed)
        self.dehb = DEHB(
            cs=cs,
            dimensions=len(list(cs.values())),
            min_fidelity=1,
            max_fidelity=max_resource,
            eta=3,
            n_workers=1,
            seed=seed,
            output_path=self._folder,
            save_freq="end",
            log_level="ERROR",
        )

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        batch = []
        for _ in range(n):
            job = self.dehb.ask()
            config = {
                k: v.item() if hasattr(v, "item") else v for k, v in dict(job["config"]).items()
            }
            epochs = min(self.max_resource, math.ceil(float(job["fidelity"]) - 1e-9))
            batch.append(self._ask(config, {"job": job, "epochs": epochs}))
        return batch

    def update_state(self, candidates: Sequence[Config], scores: Sequence[float]) -> None:
        for config, score in zip(candidates, scores, strict=True):
            entry = self._told(config)
            fitness = math.inf if math.isnan(score) else -float(score)
            self.dehb.tell(entry["job"], {"fitness": fitness, "cost": float(entry["epochs"])})

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        done = step >= self.asked[int(trial_id)]["epochs"]
        return Decision.STOP if done else Decision.CONTINUE

    def close(self) -> None:
        """Close DEHB's log file and remove its folder."""
        self.dehb.logger.remove()
        shutil.rmtree(self._folder, ignore_errors=True)


class OneEpochTopK(_Peer):
    """Egele et al. 2023: train ``n_configs`` random configurations one epoch each, then continue
    the best ``k`` to the full budget (suspended after epoch 1, resumed from that checkpoint);
    the others stop. When a round has handed out its configurations the next round begins, so
    the baseline keeps the cluster busy until the time budget ends, as random search does.
    The suite uses ``n_configs=100`` and ``k=3``: the pages of the paper reachable from here
    (its abstract and summaries) give the procedure but not its K and N, so these are our
    choice, not the paper's; the rounds are ours too (the paper runs one).

    Args:
        search_space: where configurations are drawn (uniformly at random).
        seed: the random seed.
        max_resource: the full budget in epochs.
        n_configs: configurations per round.
        k: how many of a round continue to the full budget.
    """

    def __init__(
        self, search_space: SearchSpace, *, seed: int, max_resource: int, n_configs: int, k: int
    ) -> None:
        super().__init__(max_resource=max_resource)
        self._space = search_space
        self._rng = np.random.default_rng(seed)
        self.n_configs, self.k = n_configs, k
        self._firsts: dict[int, dict[int, float]] = {}  # round -> trial index -> epoch-1 value
        self._resume: list[int] = []
        self._stop: list[int] = []

    def sample_hyperparameter_candidates(self, n: int) -> list[Config]:
        return [
            self._ask(self._space.sample(self._rng), {"round": len(self.asked) // self.n_configs})
            for _ in range(n)
        ]

    def update_state(self, candidates: Sequence[Config], scores: Sequence[float]) -> None:
        for config in candidates:
            self._told(config)

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        index = int(trial_id)
        if step > 1:
            return Decision.CONTINUE
        firsts = self._firsts.setdefault(self.asked[index]["round"], {})
        firsts[index] = -math.inf if math.isnan(value) else value
        if len(firsts) == self.n_configs:  # the round's epoch 1 is done: pick its top k
            ranked = sorted(firsts, key=lambda i: (-firsts[i], i))
            self._resume.extend(ranked[: self.k])
            self._stop.extend(ranked[self.k :])
        return Decision.SUSPEND

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        commands = [Command(f"{i:04d}", Decision.STOP) for i in self._stop]
        resumed, self._resume = self._resume[:free_slots], self._resume[free_slots:]
        self._stop = []
        return commands + [Command(f"{i:04d}", Decision.RESUME) for i in resumed]
