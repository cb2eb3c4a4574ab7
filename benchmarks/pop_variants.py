"""POP with other options on LCBench tasks, against the suite's random search and ASHA.

Each POP run is the suite's own run (:func:`benchmarks.lcbench_suite.run_one`: the real master
on the simulated clock, the same target, budget and seed) with the suite's POP factory swapped
for one with ``--options`` on top of its settings; random search and ASHA come from the suite's
run cache (run once if missing). It prints each task's hours to target and the geometric means
used in ``benchmarks/RESULTS.md`` ("POP at ASHA's speed"): POP over random, ASHA / POP on the
tasks both reach, tasks reached.

    python -m benchmarks.pop_variants --options '{"min_resource": 1, "interval": 3}' --workers 8
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import benchmarks.lcbench_suite as suite
from benchmarks.lcbench import EPOCHS
from benchmarks.suite_runs import RunCache, SuiteSettings
from ultron.algorithms.stoppers import POP, Stopper
from ultron.simulation.benchmark import SimulatedClock

# The curve model's 10 tasks (benchmarks/RESULTS.md, "POP with the calibrated curve model").
TASKS = "3945,126029,167184,189354,146212,167201,167104,168908,189862,34539"
_OPTIONS: dict[str, Any] = {}


def _pop(workers: int, clock: SimulatedClock, target: float) -> Stopper:
    """The suite's POP settings (``benchmarks.lcbench._pop``) with ``_OPTIONS`` on top."""
    base: dict[str, Any] = {
        "direction": "maximize",
        "max_resource": EPOCHS,
        "target": target,
        "slots": workers,
        "interval": 5,
        "min_resource": 4,
        "bounds": (0.0, 100.0),
        "bootstrap": 6,
        "seed": 0,
        "clock": clock,
    }
    return POP(**{**base, **_OPTIONS})


def _cell(args: tuple[dict[str, Any], str, int, dict[str, float]]) -> dict[str, Any]:
    options, task, workers, stats = args
    _OPTIONS.clear()
    _OPTIONS.update(options)
    suite._pop = _pop  # the suite looks its POP factory up by name at each run
    return suite.run_one(task, "POP (ours)", workers, 0, SuiteSettings(seeds=1), stats)


def _gmean(ratios: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else math.nan


def main(argv: Sequence[str] | None = None) -> str:
    """Run POP with ``--options`` on ``--tasks`` at ``--workers``; return the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--options", default="{}", help="POP keyword arguments, as JSON")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--tasks", default=TASKS)
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    tasks = args.tasks.split(",")
    cache = RunCache(RunCache.default_folder())
    base = suite.run_suite(
        SuiteSettings(seeds=1),
        task_ids=tasks,
        methods=["Random", "ASHA"],
        workers=[args.workers],
        cache=cache,
    )
    started = time.perf_counter()
    cells = [(options, t, args.workers, base["stats"][t]) for t in tasks]
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(_cell, cells))
    over_random, asha_over_pop, reached = [], [], 0
    for task, run in zip(tasks, runs, strict=True):
        random = float(base["runs"][(task, "Random", args.workers, 0)]["hours"])
        asha = float(base["runs"][(task, "ASHA", args.workers, 0)]["hours"])
        pop = float(run["hours"])
        print(f"{task:>7}  random {random:.3f} h  ASHA {asha:.3f} h  POP {pop:.3f} h", flush=True)
        reached += math.isfinite(pop)
        if math.isfinite(pop) and math.isfinite(random):
            over_random.append(random / pop)
        if math.isfinite(pop) and math.isfinite(asha):
            asha_over_pop.append(asha / pop)
    line = (
        f"{args.options} at {args.workers} workers: POP x{_gmean(over_random):.2f} over random "
        f"({len(over_random)} tasks), ASHA/POP x{_gmean(asha_over_pop):.2f} "
        f"({len(asha_over_pop)} tasks), reached {reached}/{len(tasks)}; "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(line)
    return line


if __name__ == "__main__":
    main()
