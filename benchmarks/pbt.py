"""Population-based training against random search, on a toy whose best learning rate moves.

The toy (:class:`MovingOptimum`) "trains" by accumulating a gain per epoch: epoch ``t`` gains
``exp(-(log10 lr - c(t))^2 / (2 w^2))``, where the best ``log10 lr``, ``c(t)``, falls linearly
from -1 to -3 over the ``T`` epochs (a decaying learning rate). No constant learning rate gains
much for more than a stretch of the run, so a schedule beats every constant one: the best
constant's score is printed beside the others.

Both methods run through the real master loop on the simulator (:func:`ultron.simulation.jobs.
simulate_job`), at the same compute: ``population`` trials of ``T`` epochs each (the epochs
trained are counted and printed). Random search draws ``population`` constant configurations;
PBT starts from the same number (drawn the same way) and exploits and explores every
``interval`` epochs.

    python -m benchmarks.pbt --seeds 5
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from ultron.algorithms.base import Direction
from ultron.algorithms.random_search import RandomSearch
from ultron.algorithms.space import Config, LogUniform, SearchSpace
from ultron.algorithms.stoppers.pbt import PBT
from ultron.simulation.benchmark import LearningCurve
from ultron.simulation.jobs import SimulatedJob, simulate_job

SPACE = SearchSpace({"lr": LogUniform(1e-4, 1.0)})


class MovingOptimum:
    """A toy whose best learning rate falls from 0.1 to 0.001 as training goes on.

    Example:
        >>> toy = MovingOptimum(epochs=4)
        >>> curve = toy.learning_curve({"lr": 0.1})
        >>> curve.values[0] == 1.0, len(curve.values)
        (True, 4)
        >>> toy.continue_curve(LearningCurve(curve.values[:2], (1.0, 1.0)), {"lr": 1e-3}).values[1]
        == curve.values[1]
        True
    """

    search_space = SPACE
    direction = Direction.MAXIMIZE

    def __init__(self, *, epochs: int = 40, width: float = 0.3) -> None:
        self.max_resource = epochs
        self.width = width

    def best_log_lr(self, epoch: int) -> float:
        """``c(t)``: the best ``log10 lr`` at epoch ``t`` (1-based)."""
        return -1.0 - 2.0 * (epoch - 1) / max(self.max_resource - 1, 1)

    def gain(self, lr: float, epoch: int) -> float:
        """What one epoch at ``lr`` adds to the score."""
        return math.exp(-((math.log10(lr) - self.best_log_lr(epoch)) ** 2) / (2 * self.width**2))

    def learning_curve(self, config: Config) -> LearningCurve:
        return self.continue_curve(LearningCurve((), ()), config)

    def continue_curve(self, prefix: LearningCurve, config: Config) -> LearningCurve:
        """The curve of a trial with ``prefix``'s state going on at ``config``'s rate."""
        values, score = list(prefix.values), prefix.values[-1] if prefix.values else 0.0
        for epoch in range(len(values) + 1, self.max_resource + 1):
            score += self.gain(float(config["lr"]), epoch)
            values.append(score)
        return LearningCurve(tuple(values), (1.0,) * self.max_resource)

    def best_constant(self) -> float:
        """The best score of any constant learning rate (a fine grid over the space)."""
        return max(self.learning_curve({"lr": lr}).values[-1] for lr in np.geomspace(1e-4, 1, 2001))


def run(
    method: str, toy: MovingOptimum, *, population: int, interval: int, seed: int
) -> SimulatedJob:
    """One job: ``random`` (constant configurations) or ``pbt``."""
    stopper = None
    if method == "pbt":
        stopper = PBT(
            max_resource=toy.max_resource,
            population=population,
            search_space=SPACE,
            interval=interval,
            direction=Direction.MAXIMIZE,
            seed=seed,
        )
    return simulate_job(
        toy,
        RandomSearch(SPACE, seed=seed, direction="maximize"),
        budget=population,
        workers=population,
        stopper=stopper,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--population", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--interval", type=int, default=4)
    args = parser.parse_args(argv)
    toy = MovingOptimum(epochs=args.epochs)
    started = time.perf_counter()
    print(f"best constant learning rate (grid of 2001): {toy.best_constant():.2f}")
    print(f"best schedule (lr = 10^c(t) every epoch): {float(args.epochs):.2f}")
    print("| seed | random best | PBT best | epochs random | epochs PBT | exploits |")
    print("| --- | --- | --- | --- | --- | --- |")
    wins, scores = 0, {"random": [], "pbt": []}
    for seed in range(args.seeds):
        jobs = {
            m: run(m, toy, population=args.population, interval=args.interval, seed=seed)
            for m in ("random", "pbt")
        }
        best = {m: float(job.best_score or 0.0) for m, job in jobs.items()}
        for m in scores:
            scores[m].append(best[m])
        wins += best["pbt"] > best["random"]
        exploits = sum(len(t.lineage) for t in jobs["pbt"].trials)
        print(
            f"| {seed} | {best['random']:.2f} | {best['pbt']:.2f} | "
            f"{jobs['random'].steps_trained} | {jobs['pbt'].steps_trained} | {exploits} |"
        )
    print(
        f"mean best: random {statistics.mean(scores['random']):.2f}, PBT "
        f"{statistics.mean(scores['pbt']):.2f}; PBT better on {wins} of {args.seeds} seeds "
        f"({time.perf_counter() - started:.1f} s)"
    )


if __name__ == "__main__":
    main()
