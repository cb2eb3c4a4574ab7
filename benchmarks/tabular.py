"""Tabular benchmarks: regret against the known optimum versus trials, over 20 seeds.

The three Snoek et al. (2012) grids (structured SVM, online LDA, logistic regression on MNIST)
and NAS-Bench-201 (CIFAR-10 test accuracy of all 15,625 cells). Every configuration's objective
is in the table, so regret is exact and a trial costs a dictionary look-up. Grid axes are
searched as integer indices (an ordered domain), NAS-Bench-201 edges as categoricals.

Ours: each strategy through the paper's interface, one candidate at a time. The peer: Optuna's
own ``study.optimize`` with its ``TPESampler`` on the same table.

Run: ``python -m benchmarks.tabular [--seeds 20] [--trials 100]``.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.data import DataMissing, data_dir, read_csv
from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import Choice, IntRange, SearchSpace

STRATEGIES: dict[str, dict[str, Any]] = {
    "random": {},
    "tpe": {},
    "reinforce": {"learning_rate": 0.1},
    "evolution": {"population_size": 20, "sample_size": 5},
}
CHECKPOINTS = (10, 25, 50, 100)


@dataclass(frozen=True)
class Table:
    """A fully tabulated problem: axes of values, the objective of every combination."""

    name: str
    space: SearchSpace
    lookup: Callable[[dict[str, Any]], float]
    optimum: float
    direction: Direction

    def regret(self, value: float) -> float:
        return (
            value - self.optimum if self.direction is Direction.MINIMIZE else self.optimum - value
        )


def _grid(name: str, file: str, axes: list[str], objective: str) -> Table:
    rows = read_csv(data_dir("hpo_grids_snoek") / file)
    values = {axis: sorted({float(r[axis]) for r in rows}) for axis in axes}
    table = {}
    for row in rows:  # a duplicate key keeps the later row, as HPOlib does
        table[tuple(values[a].index(float(row[a])) for a in axes)] = float(row[objective])
    space = SearchSpace({a: IntRange(0, len(values[a]) - 1) for a in axes})
    worst = max(table.values())

    def lookup(config: dict[str, Any]) -> float:
        return table.get(tuple(int(config[a]) for a in axes), worst)

    return Table(name, space, lookup, min(table.values()), Direction.MINIMIZE)


def _nas_bench_201() -> Table:
    rows = read_csv(data_dir("nats_bench_tss_final") / "nats_bench.csv")
    table = {}
    for row in rows:
        ops = tuple(
            part.split("~")[0] for part in row["ArchitectureString"].split("|") if "~" in part
        )
        table[ops] = float(row["CIFAR10TestAccuracy200Epochs"])
    names = sorted({op for ops in table for op in ops})
    space = SearchSpace({f"edge{i}": Choice(tuple(names)) for i in range(6)})

    def lookup(config: dict[str, Any]) -> float:
        return table[tuple(config[f"edge{i}"] for i in range(6))]

    return Table("NAS-Bench-201 C10", space, lookup, max(table.values()), Direction.MAXIMIZE)


def load_tables() -> tuple[list[Table], list[str]]:
    """The tables whose data is present, and a message for each one that is not."""
    makers = [
        lambda: _grid("SVM grid", "svm_on_grid.csv", ["C", "alpha", "epsilon"], "error"),
        lambda: _grid(
            "LDA grid", "lda_on_grid.csv", ["kappa", "tau0", "batch_size_S"], "perplexity"
        ),
        lambda: _grid(
            "LogReg grid",
            "logreg_on_grid.csv",
            ["lrate_idx", "l2_reg", "batchsize", "n_epochs"],
            "valid_error",
        ),
        _nas_bench_201,
    ]
    tables, missing = [], []
    for make in makers:
        try:
            tables.append(make())
        except DataMissing as error:
            missing.append(str(error))
    return tables, missing


def run_ours(table: Table, name: str, seed: int, trials: int) -> list[float]:
    """Best value after each trial, our strategy driven one candidate at a time."""
    algo = resolve_strategy(name)(
        table.space, seed=seed, direction=table.direction, **STRATEGIES[name]
    )
    best, trace = math.inf, []
    for _ in range(trials):
        config = algo.sample_hyperparameter_candidates(1)[0]
        value = table.lookup(config)
        algo.update_state([config], [value])
        best = min(best, table.regret(value))
        trace.append(best)
    return trace


def run_optuna(table: Table, seed: int, trials: int) -> list[float]:
    """Best value after each trial, Optuna's own ``study.optimize`` with TPE (the peer)."""
    import optuna

    from ultron.algorithms.optuna_trials import to_optuna_distribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {n: to_optuna_distribution(d) for n, d in table.space.items()}

    def objective(trial: Any) -> float:
        config = {n: trial._suggest(n, d) for n, d in distributions.items()}
        return table.lookup(config)

    study = optuna.create_study(
        direction=table.direction.value, sampler=optuna.samplers.TPESampler(seed=seed)
    )
    study.optimize(objective, n_trials=trials)
    regrets = [table.regret(t.value) for t in study.trials]
    return list(np.minimum.accumulate(regrets))


def main(seeds: int = 20, trials: int = 100) -> str:
    tables, missing = load_tables()
    lines = [f"## Tabular: mean regret (and std) after N trials, {seeds} seeds", ""]
    lines += [f"- {m}" for m in missing]
    checkpoints = [c for c in CHECKPOINTS if c <= trials]
    for table in tables:
        started = time.perf_counter()
        header = "| method | " + " | ".join(f"N={c}" for c in checkpoints) + " |"
        lines += ["", f"### {table.name} (optimum {table.optimum:g})", "", header]
        lines.append("|---" * (len(checkpoints) + 1) + "|")
        runners: dict[str, Callable[[int], list[float]]] = {
            name: (lambda s, n=name, t=table: run_ours(t, n, s, trials)) for name in STRATEGIES
        }
        runners["optuna study.optimize TPE (peer)"] = lambda s, t=table: run_optuna(t, s, trials)
        for label, runner in runners.items():
            traces = np.array([runner(seed) for seed in range(seeds)])
            cells = [
                f"{traces[:, c - 1].mean():.4g} ± {traces[:, c - 1].std():.2g}" for c in checkpoints
            ]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append(f"\n({time.perf_counter() - started:.0f} s)")
    report = "\n".join(lines)
    print(report, flush=True)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=100)
    arguments = parser.parse_args()
    main(arguments.seeds, arguments.trials)
