"""LCBench time-to-target through the real master loop (``ultron.simulation.jobs.simulate_job``).

The same asynchronous ``Master`` a real job runs (strategy, score cache, stopper driver) over
a simulated cluster, on the LCBench surrogate: simulated hours until the best finished trial's
validation accuracy reaches the target (the job ends there; at most ``budget`` trials), for
random search with and without ASHA, Hyperband and POP, and TPE, side by side with the
speed-up against random search without early stopping.

    python -m benchmarks.master_lcbench --seeds 3 --budget 2000
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from benchmarks.data import DataMissing
from benchmarks.lcbench import SPACE, LCBench, _asha, _hyperband, _none, _pop
from ultron.algorithms.optuna_sampler import TPESearch
from ultron.algorithms.random_search import RandomSearch
from ultron.simulation.benchmark import SimulatedClock
from ultron.simulation.jobs import simulate_job

METHODS = {
    "Random": (RandomSearch, _none),
    "Random+ASHA": (RandomSearch, _asha),
    "Random+Hyperband": (RandomSearch, _hyperband),
    "Random+POP": (RandomSearch, _pop),
    "TPE": (TPESearch, _none),
}


def hours_to_target(
    bench: LCBench, method: str, *, workers: int, seed: int, budget: int, target: float
) -> tuple[float, int]:
    strategy_class, make_stopper = METHODS[method]
    clock = SimulatedClock()
    job = simulate_job(
        bench,
        strategy_class(SPACE, seed=seed, direction="maximize"),
        budget=budget,
        workers=workers,
        stopper=make_stopper(workers, clock, target),
        clock=clock,
        target=target,
    )
    return job.time_to_target(target) / 3600, job.steps_trained


def main(seeds: int = 3, budget: int = 2000, workers: tuple[int, ...] = (8, 64)) -> str:
    try:
        bench = LCBench("189906")
    except DataMissing as error:
        print(str(error))
        return str(error)
    target = bench.target()
    lines = [
        f"## LCBench 189906 through the real master: hours to {target:.2f}% (budget {budget})",
        "",
        "| method | " + " | ".join(f"{w} workers" for w in workers) + " |",
        "|---" * (len(workers) + 1) + "|",
    ]
    baseline: dict[int, float] = {}
    for method in METHODS:
        started = time.perf_counter()
        cells = []
        for w in workers:
            runs = [
                hours_to_target(bench, method, workers=w, seed=s, budget=budget, target=target)
                for s in range(seeds)
            ]
            hours = statistics.median(h for h, _ in runs)
            epochs = statistics.median(e for _, e in runs)
            baseline.setdefault(w, hours)
            ratio = baseline[w] / hours if 0 < hours < math.inf else 0.0
            shown = "not reached" if math.isinf(hours) else f"{hours:.2f} h (x{ratio:.2f})"
            cells.append(f"{shown}, {epochs:.0f} epochs")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
        print(lines[-1], f"[{time.perf_counter() - started:.0f} s]", flush=True)
    report = "\n".join(lines)
    print(report)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=2000)
    arguments = parser.parse_args()
    main(arguments.seeds, arguments.budget)
