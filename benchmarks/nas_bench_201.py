"""NAS-Bench-201 CIFAR-10 in batches: regret after N configurations, strategies side by side.

Every strategy is driven through the paper's interface as a synchronous master drives it: ask
``sample_hyperparameter_candidates(batch)``, score the batch from the table (CIFAR-10 test
accuracy of all 15,625 cells, 200 epochs), hand it back with ``update_state``; repeat until
``trials`` configurations are scored (the last batch is cut to fit). Regret is the optimum's
accuracy minus the best accuracy found so far, in percentage points. All strategies run in the
same process on the same seeds, so one command gives the whole table.

Run: ``python -m benchmarks.nas_bench_201 [--seeds 20] [--trials 100] [--batch 8]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

from benchmarks.tabular import CHECKPOINTS, Table, _nas_bench_201
from ultron.algorithms.registry import resolve_strategy

# The strategies of the table and their options (defaults unless a row needs one).
STRATEGIES: dict[str, dict[str, Any]] = {
    "random": {},
    "tpe": {},
    "evolution": {"population_size": 20, "sample_size": 5},
    "reinforce": {},
}


def run(
    table: Table, name: str, options: dict[str, Any], seed: int, trials: int, batch: int
) -> list[float]:
    """Regret after each scored configuration, one seed, batches of ``batch``.

    ``name`` is a strategy name, optionally with a label after a slash (``reinforce/lr=0.3``).
    """
    algo = resolve_strategy(name.split("/")[0])(
        table.space, seed=seed, direction=table.direction, **options
    )
    best, trace = math.inf, []
    while len(trace) < trials:
        configs = algo.sample_hyperparameter_candidates(min(batch, trials - len(trace)))
        values = [table.lookup(c) for c in configs]
        algo.update_state(configs, values)
        for value in values:
            best = min(best, table.regret(value))
            trace.append(best)
    return trace


def main(
    seeds: int = 20,
    trials: int = 100,
    batch: int = 8,
    strategies: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Run every strategy on every seed and return the Markdown table (also printed)."""
    table = _nas_bench_201()
    checkpoints = [c for c in CHECKPOINTS if c <= trials]
    lines = [
        f"### NAS-Bench-201 C10, batches of {batch} (optimum {table.optimum:g}): mean regret "
        f"(and std) after N configurations, {seeds} seeds",
        "",
        "| method | " + " | ".join(f"N={c}" for c in checkpoints) + " | s/seed |",
        "|---" * (len(checkpoints) + 2) + "|",
    ]
    for name, options in (strategies or STRATEGIES).items():
        started = time.perf_counter()
        traces = np.array([run(table, name, options, seed, trials, batch) for seed in range(seeds)])
        cells = [
            f"{traces[:, c - 1].mean():.3f} ± {traces[:, c - 1].std():.2f}" for c in checkpoints
        ]
        elapsed = (time.perf_counter() - started) / seeds
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {elapsed:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    report = "\n".join(lines)
    print(report, flush=True)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--only", default=None, help='JSON {"name": {options}} to run instead of the default rows'
    )
    arguments = parser.parse_args()
    chosen = json.loads(arguments.only) if arguments.only else None
    main(arguments.seeds, arguments.trials, arguments.batch, chosen)
