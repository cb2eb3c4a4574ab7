"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks"): a fixed population trains together and, every ``interval`` steps, the worst trials
take a better trial's weights (exploit) and a perturbed copy of its configuration (explore).

This is the synchronous variant of the paper's §3 ("truncation selection"): at each boundary
``interval, 2 interval, ...`` below ``max_resource`` every trial of the population saves its
checkpoint and is suspended (:attr:`Decision.SUSPEND`). Once no member is still running towards
the boundary, the members are ranked by the value they reported there; the bottom
``quantile`` (at most half) each pick a trial of the top ``quantile`` at random and are resumed
with a :class:`Command` that names it as ``source`` (the master copies that trial's checkpoint
into theirs) and carries the explored configuration as ``config``; everyone else is resumed as
it was. The exploits come first among the commands, so that each copy is made as the round
resumes, before the donor, restarted beside it, writes a newer checkpoint (a donor is not held
back for it: that would leave its slot idle). Ranking at the same step keeps a trial that
happens to run late from looking worse than it is.

Explore (the paper's "perturb"): a continuous or integer hyper-parameter is multiplied by 0.8
or 1.2 (``perturbation_factors``) and kept within its bounds; with probability
``resample_probability`` any hyper-parameter, a choice among values always so, is drawn anew
from its domain instead.

Example:
    >>> from ultron.algorithms.space import LogUniform, SearchSpace
    >>> pbt = PBT(max_resource=4, interval=2, population=2, direction="maximize",
    ...           search_space=SearchSpace({"lr": LogUniform(1e-3, 1.0)}), seed=0)
    >>> for t, lr in (("a", 0.1), ("b", 0.01)):
    ...     _ = pbt.on_trial_start(t)
    ...     pbt.on_trial_config(t, {"lr": lr})
    >>> [pbt.on_report(t, s, v) for t, s, v in (("a", 1, 1.0), ("b", 1, 0.5))]
    [<Decision.CONTINUE: 'continue'>, <Decision.CONTINUE: 'continue'>]
    >>> [pbt.on_report(t, 2, v) for t, v in (("a", 2.0), ("b", 0.8))]
    [<Decision.SUSPEND: 'suspend'>, <Decision.SUSPEND: 'suspend'>]
    >>> [(c.trial_id, c.source) for c in pbt.poll(free_slots=2, can_start_new=False)]
    [('b', 'a'), ('a', None)]
    >>> pbt.lineage("b")[0]["from"], pbt.lineage("b")[0]["config_after"]["lr"] in (0.08, 0.12)
    ('a', True)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ultron.algorithms.base import Direction
from ultron.algorithms.space import Choice, Config, IntRange, LogUniform, SearchSpace, Uniform
from ultron.algorithms.stoppers.base import (
    Command,
    Decision,
    Stopper,
    TrialId,
    decode_loss,
    encode_loss,
)

__all__ = ["PBT", "explore"]


@dataclass
class _Member:
    config: Config = field(default_factory=dict)
    status: str = "running"  # running | suspended | done
    step: int = 0  # the last step reported
    loss: float = math.inf  # at ``step``
    lineage: list[dict[str, Any]] = field(default_factory=list)


class PBT(Stopper):
    """Population-based training as a scheduler: exploit and explore at every boundary.

    Args:
        max_resource: the most steps a trial runs (``T``, e.g. epochs).
        population: the trials that train together (the job's parallelism).
        search_space: the domains that explore perturbs within.
        interval: steps between two exploit-and-explore rounds ("ready" in the paper).
        quantile: the share of the population replaced at each round (and the share donors
            come from); at most half of it is ever replaced.
        resample_probability: the chance that explore draws a hyper-parameter anew instead of
            perturbing it.
        perturbation_factors: what explore multiplies a number by, one of them at random.
        direction: minimize or maximize the reported value.
        min_resource: ignored beyond the base class's check: the first round is at
            ``interval``.
        seed: seed of the generator that picks donors and perturbations.
    """

    def __init__(
        self,
        *,
        max_resource: int,
        population: int,
        search_space: SearchSpace,
        interval: int | None = None,
        quantile: float = 0.25,
        resample_probability: float = 0.25,
        perturbation_factors: tuple[float, float] = (0.8, 1.2),
        direction: Direction | str = Direction.MINIMIZE,
        min_resource: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(direction=direction, min_resource=1, max_resource=max_resource)
        self.interval = interval if interval is not None else max(1, max_resource // 4)
        if not 1 <= self.interval < max_resource:
            raise ValueError(
                f"interval is {self.interval}; it must be at least 1 and below max_resource "
                f"({max_resource}), or no round of exploit and explore ever happens"
            )
        if population < 2:
            raise ValueError(
                f"population is {population}; PBT needs at least 2 trials training together "
                "(the job's parallelism)"
            )
        if not 0 < quantile <= 0.5:
            raise ValueError(f"quantile is {quantile}; it must be in (0, 0.5]")
        if not 0 <= resample_probability <= 1:
            raise ValueError(f"resample_probability is {resample_probability}; it is in [0, 1]")
        self.population = population
        self.space = search_space
        self.quantile = quantile
        self.resample_probability = resample_probability
        self.factors = tuple(float(f) for f in perturbation_factors)
        self.rng = np.random.default_rng(seed)
        self._members: dict[TrialId, _Member] = {}
        self._ready: list[Command] = []  # decided resumes waiting for a free slot

    def on_trial_start(self, trial_id: TrialId) -> Any:
        self._members.setdefault(trial_id, _Member())
        return super().on_trial_start(trial_id)

    def on_trial_config(self, trial_id: TrialId, config: Config) -> None:
        self._members.setdefault(trial_id, _Member()).config = dict(config)

    def on_report(self, trial_id: TrialId, step: int, value: float) -> Decision:
        member = self._members.setdefault(trial_id, _Member())
        member.step, member.loss = step, self.loss(value)
        if step >= self.max_resource:
            member.status = "done"
            return Decision.STOP
        if step % self.interval:
            return Decision.CONTINUE
        member.status = "suspended"
        return Decision.SUSPEND

    def on_trial_complete(self, trial_id: TrialId) -> None:
        if trial_id in self._members:
            self._members[trial_id].status = "done"
        self._ready = [c for c in self._ready if c.trial_id != trial_id]

    def poll(self, *, free_slots: int, can_start_new: bool = True) -> list[Command]:
        busy = any(m.status == "running" for m in self._members.values())
        if not self._ready and not busy:
            self._ready = self._round()
        chosen, self._ready = self._ready[: max(free_slots, 0)], self._ready[max(free_slots, 0) :]
        for command in chosen:
            self._members[command.trial_id].status = "running"
        return chosen

    def _round(self) -> list[Command]:
        """Rank the suspended members and decide each one's resume."""
        waiting = [t for t, m in self._members.items() if m.status == "suspended"]
        if not waiting:
            return []
        ranked = sorted(waiting, key=lambda t: (self._members[t].loss, str(t)))
        count = min(math.ceil(len(ranked) * self.quantile), len(ranked) // 2)
        top, bottom = ranked[:count], set(ranked[len(ranked) - count :]) if count else set()
        commands = []
        for t in sorted(bottom, key=str):
            donor = top[int(self.rng.integers(len(top)))]
            member, source = self._members[t], self._members[donor]
            config = explore(
                source.config,
                self.space,
                self.rng,
                resample_probability=self.resample_probability,
                factors=self.factors,
            )
            member.lineage.append(
                {
                    "step": member.step,
                    "from": donor,
                    "value": self._value(member.loss),
                    "from_value": self._value(source.loss),
                    "config_before": dict(member.config),
                    "config_after": dict(config),
                }
            )
            member.config = dict(config)
            commands.append(Command(t, Decision.RESUME, config=config, source=donor))
        commands += [
            Command(t, Decision.RESUME) for t in sorted(waiting, key=str) if t not in bottom
        ]
        return commands

    def _value(self, loss: float) -> float | None:
        """A loss back as the reported value (``None`` for a failed report)."""
        if math.isinf(loss):
            return None
        return -loss if self.direction is Direction.MAXIMIZE else loss

    def lineage(self, trial_id: TrialId) -> list[dict[str, Any]]:
        member = self._members.get(trial_id)
        return [dict(step) for step in member.lineage] if member is not None else []

    def state_dict(self) -> dict[str, Any]:
        members = [
            [t, {**asdict(m), "loss": encode_loss(m.loss)}] for t, m in self._members.items()
        ]
        ready = [[c.trial_id, c.config, c.source] for c in self._ready]
        return {"members": members, "ready": ready, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._members = {
            t: _Member(**{**data, "loss": decode_loss(data["loss"])})
            for t, data in state["members"]
        }
        self._ready = [
            Command(t, Decision.RESUME, config=config, source=source)
            for t, config, source in state["ready"]
        ]
        self.rng.bit_generator.state = state["rng"]


def explore(
    config: Config,
    space: SearchSpace,
    rng: np.random.Generator,
    *,
    resample_probability: float = 0.25,
    factors: tuple[float, ...] = (0.8, 1.2),
) -> Config:
    """PBT's explore: a perturbed copy of ``config`` that stays in ``space``.

    Each hyper-parameter of the space is drawn anew with probability ``resample_probability``
    (a choice among values: always so, when not kept); otherwise a number is multiplied by one
    of ``factors`` and clipped to its domain's bounds (an integer rounded). Keys outside the
    space are kept as they are.

    Example:
        >>> space = SearchSpace({"lr": Uniform(0.0, 1.0), "act": Choice(("relu", "tanh"))})
        >>> out = explore({"lr": 0.9, "act": "relu"}, space, np.random.default_rng(1),
        ...               resample_probability=0.0)
        >>> out["lr"] in (0.72, 1.0), out["act"]
        (True, 'relu')
    """
    out = dict(config)
    for name, domain in space.items():
        if name not in config:
            continue
        resample = float(rng.uniform()) < resample_probability
        if resample:
            out[name] = domain.sample(rng)
        elif isinstance(domain, Uniform | LogUniform | IntRange):
            factor = factors[int(rng.integers(len(factors)))]
            value = min(max(float(config[name]) * factor, domain.low), domain.high)
            out[name] = round(value) if isinstance(domain, IntRange) else round(value, 12)
        elif not isinstance(domain, Choice):
            out[name] = domain.sample(rng)
    return out
