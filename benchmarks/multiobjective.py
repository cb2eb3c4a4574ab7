"""Several objectives and constraints: hypervolume after 64 trials, and infeasible proposals.

The toy of ``examples/multiobjective`` (accuracy against latency; its Pareto front is known, and
so is the front's hypervolume): each strategy runs through the paper's interface, one candidate
at a time, told each trial's metrics as the master tells them (a dict), as
``benchmarks/tabular.py`` drives strategies without a cluster.

1. Hypervolume: NSGA-II, MOTPE and random, 64 trials, the share of the true front's
   hypervolume reached (mean and standard deviation over the seeds).
2. A constraint that excludes the most accurate region (``memory_mb <= 2000``, width <= 0.6):
   how many of the 64 proposals are infeasible, constrained sampler against random, with one
   objective (TPE: maximize accuracy) and with two (MOTPE, NSGA-II); and whether the best
   feasible trial is found.

Run: ``python -m benchmarks.multiobjective [--seeds 5] [--trials 64] [--plot DIR]``.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import (
    Bound,
    Goal,
    feasible,
    hypervolume,
    losses,
    pareto_indices,
)
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import SearchSpace, Uniform
from ultron.usercode import user_code

TOY_CODE = Path(__file__).resolve().parents[1] / "examples" / "multiobjective" / "code"
SPACE = SearchSpace({"width": Uniform(0.0, 1.0), "dropout": Uniform(0.0, 1.0)})
GOALS = (Goal("accuracy", Direction.MAXIMIZE), Goal("latency_ms", Direction.MINIMIZE))
MEMORY = (Bound("memory_mb", high=2000.0),)
STRATEGIES: dict[str, dict[str, Any]] = {"nsga2": {}, "motpe": {}, "random": {}}


@functools.cache
def _toy() -> Any:
    """The example's toy module (imported once; the module object outlives the block)."""
    with user_code([TOY_CODE]):
        from accuracy_latency import toy
    return toy


def run(
    strategy: str,
    seed: int,
    trials: int,
    *,
    goals: Sequence[Goal] = GOALS,
    bounds: Sequence[Bound] = (),
) -> list[dict[str, Any]]:
    """One search of ``trials`` proposals; returns each trial's configuration and metrics."""
    toy = _toy()
    cls = resolve_strategy(strategy)
    algo = cls(
        SPACE, seed=seed, objectives=goals, constraints=bounds, **STRATEGIES.get(strategy, {})
    )
    rows: list[dict[str, Any]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's experimental warnings, once per sampler
        for _ in range(trials):
            (config,) = algo.sample_hyperparameter_candidates(1)
            metrics = toy.evaluate(config["width"], config["dropout"])
            algo.update_state([config], [metrics])
            rows.append({**config, **metrics})
    return rows


def hypervolume_share(rows: Sequence[dict[str, Any]], bounds: Sequence[Bound] = ()) -> float:
    """The hypervolume of the feasible trials' front, as a share of the true front's."""
    toy = _toy()
    points = [losses(r, GOALS) for r in rows if feasible(r, bounds)]
    reference = tuple(g.loss(v) for g, v in zip(GOALS, toy.REFERENCE, strict=True))
    return hypervolume(points, reference) / toy.TRUE_HYPERVOLUME


def _mean_std(values: Sequence[float]) -> str:
    std = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return f"{float(np.mean(values)):.3f} ± {std:.3f}"


def hypervolume_table(seeds: int, trials: int) -> str:
    """Part 1: the share of the true hypervolume per strategy, over ``seeds`` seeds."""
    lines = [
        f"| strategy | hypervolume / true, after {trials} trials (mean ± sd, {seeds} seeds) "
        "| per seed |",
        "|---|---|---|",
    ]
    for name in STRATEGIES:
        shares = [hypervolume_share(run(name, seed, trials)) for seed in range(seeds)]
        per_seed = ", ".join(f"{s:.3f}" for s in shares)
        lines.append(f"| {name} | {_mean_std(shares)} | {per_seed} |")
    return "\n".join(lines)


def constraint_table(seeds: int, trials: int) -> str:
    """Part 2: infeasible proposals (of ``trials``) and the best feasible accuracy."""
    best_feasible = math.sqrt(0.6)  # width 0.6, dropout 0.3: the constraint's edge
    cases = [
        ("tpe", "1: max accuracy", (GOALS[0],)),
        ("random", "1: max accuracy", (GOALS[0],)),
        ("motpe", "2", GOALS),
        ("nsga2", "2", GOALS),
        ("random", "2", GOALS),
    ]
    lines = [
        f"| strategy | objectives | infeasible of {trials} proposals (mean ± sd) | per seed "
        f"| best feasible accuracy / {best_feasible:.3f} (mean) | feasible hypervolume / true |",
        "|---|---|---|---|---|---|",
    ]
    for name, label, goals in cases:
        counts, bests, shares = [], [], []
        for seed in range(seeds):
            rows = run(name, seed, trials, goals=goals, bounds=MEMORY)
            ok = [r for r in rows if feasible(r, MEMORY)]
            counts.append(float(len(rows) - len(ok)))
            bests.append(max((r["accuracy"] for r in ok), default=0.0) / best_feasible)
            shares.append(hypervolume_share(rows, MEMORY))
        per_seed = ", ".join(str(int(c)) for c in counts)
        lines.append(
            f"| {name} | {label} | {_mean_std(counts)} | {per_seed} | "
            f"{float(np.mean(bests)):.3f} | {float(np.mean(shares)):.3f} |"
        )
    return "\n".join(lines)


def plot(directory: Path, strategy: str = "motpe", seed: int = 0, trials: int = 64) -> Path:
    """The job report's Pareto plot of one constrained run, with the true front drawn in."""
    from ultron.reporting.plots import pareto_front

    toy = _toy()
    rows = run(strategy, seed, trials, bounds=MEMORY)
    ok = [feasible(r, MEMORY) for r in rows]
    feasible_rows = [i for i, good in enumerate(ok) if good]
    front = set(pareto_indices([losses(rows[i], GOALS) for i in feasible_rows]))
    on_front = [False] * len(rows)
    for j in front:
        on_front[feasible_rows[j]] = True
    png = pareto_front(
        [(r["accuracy"], r["latency_ms"]) for r in rows],
        front=on_front,
        feasible=ok,
        names=("accuracy", "latency_ms"),
        directions=(Direction.MAXIMIZE, Direction.MINIMIZE),
        true_front=toy.true_front(),
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"pareto-{strategy}-seed{seed}.png"
    path.write_bytes(png)
    return path


def main(seeds: int = 5, trials: int = 64, plot_dir: Path | None = None) -> str:
    """Both tables as markdown (and the plot, when ``plot_dir`` is given)."""
    started = time.perf_counter()
    parts = [
        "Hypervolume (reference point: accuracy 0, latency 100 ms; true front: 60):",
        hypervolume_table(seeds, trials),
        "Constraint memory_mb <= 2000 (excludes width > 0.6, the most accurate region):",
        constraint_table(seeds, trials),
    ]
    if plot_dir is not None:
        parts.append(f"Pareto plot: {plot(plot_dir, trials=trials)}")
    parts.append(f"({time.perf_counter() - started:.0f} s on {os.cpu_count()} cores)")
    return "\n\n".join(parts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--plot", type=Path, default=None, help="write the Pareto plot here")
    args = parser.parse_args()
    print(main(args.seeds, args.trials, args.plot))
