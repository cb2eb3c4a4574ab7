"""The simulated problem: every configuration's learning curve is known, and time is simulated.

As in HyperDrive's trace-driven simulator (section 7) and Syne Tune's simulator backend, a
:class:`Benchmark` knows, for any configuration, the value reported after each step and how long
each step takes (from a table or a surrogate model). :func:`~ultron.simulation.jobs.simulate_job`
replays these curves under the real master loop, on a :class:`SimulatedClock`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ultron.algorithms.base import Direction
from ultron.algorithms.space import Config, SearchSpace

__all__ = ["Benchmark", "LearningCurve", "SimulatedClock"]


@dataclass(frozen=True)
class LearningCurve:
    """What a configuration reports after each step, and how long each step takes (seconds)."""

    values: tuple[float, ...]
    durations: tuple[float, ...]


class Benchmark(Protocol):
    """A problem whose every configuration's learning curve is known (table or surrogate).

    The simulator asks for a trial's curve once, when the trial first starts; a suspended trial
    resumes on the same curve. A benchmark that population-based training runs on also has
    ``continue_curve(prefix, config) -> LearningCurve``: the whole curve of a trial that has
    another trial's state after ``len(prefix.values)`` steps (``prefix`` is that trial's curve
    so far) and goes on with ``config``; its first values are ``prefix``'s.
    """

    search_space: SearchSpace
    direction: Direction
    max_resource: int

    def learning_curve(self, config: Config) -> LearningCurve: ...


class SimulatedClock:
    """The simulation's time in seconds; pass it to stoppers that read a clock (POP)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now
