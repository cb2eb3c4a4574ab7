"""POP (or Bandit, EarlyTerm) with other options on LCBench tasks, against the suite's runs.

Each run is the suite's own run (:func:`benchmarks.suite_job.run_one`: the real master on
the simulated clock, the same target, budget and seed) with the suite's factory of the method
swapped for one with ``--options`` on top of its settings (``benchmarks.lcbench``); the
methods it is compared with (``--against``) come from the suite's run cache (run once if
missing). It prints each (task, seed)'s hours to target and the geometric means used in
``benchmarks/RESULTS.md`` ("POP at ASHA's speed"): the variant over random search, the others'
time over the variant's on the pairs both reach, pairs reached.

    python -m benchmarks.pop_variants --options '{"min_resource": 4, "interval": 5}' --workers 8
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import benchmarks.lcbench as lcbench
import benchmarks.lcbench_suite as suite
import benchmarks.suite_job as suite_job
from benchmarks.suite_runs import RunCache, SuiteSettings
from ultron.algorithms.stoppers import POP, Bandit, EarlyTerm, Stopper
from ultron.simulation.benchmark import SimulatedClock

# The curve model's 10 tasks (benchmarks/RESULTS.md, "POP with the calibrated curve model").
TASKS = "3945,126029,167184,189354,146212,167201,167104,168908,189862,34539"
_OPTIONS: dict[str, Any] = {}
# The method's name in the suite, its factory's name there and its stopper class.
_FACTORIES = {"POP (ours)": "_pop", "Bandit": "_bandit", "EarlyTerm": "_earlyterm"}
_CLASSES: dict[str, type[Stopper]] = {"POP (ours)": POP, "Bandit": Bandit, "EarlyTerm": EarlyTerm}


def _variant(method: str) -> Any:
    """The suite's factory of ``method`` with ``_OPTIONS`` on top of its keyword arguments."""
    original = getattr(lcbench, _FACTORIES[method])
    cls = _CLASSES[method]

    def make(workers: int, clock: SimulatedClock, target: float) -> Stopper:
        if not _OPTIONS:  # the suite's own run
            return original(workers, clock, target)
        return cls(**{**_factory_arguments(method, workers, clock, target), **_OPTIONS})

    return make


def _factory_arguments(
    method: str, workers: int, clock: SimulatedClock, target: float
) -> dict[str, Any]:
    """The suite factory's keyword arguments for ``method`` (``benchmarks/lcbench.py``)."""
    grid = {"min_resource": lcbench.MIN_RESOURCE, "interval": lcbench.INTERVAL}
    common = {"direction": "maximize", "max_resource": lcbench.EPOCHS, **grid}
    if method == "Bandit":
        return common
    curves = {"bounds": (0.0, 100.0), "bootstrap": 6, "seed": 0}
    if method == "EarlyTerm":
        return {**common, **curves}
    return {
        **common,
        **curves,
        "target": target,
        "slots": workers,
        "clock": clock,
    }


def _cell(args: tuple[str, dict[str, Any], str, int, int, dict[str, float]]) -> dict[str, Any]:
    method, options, task, workers, seed, stats = args
    _OPTIONS.clear()
    _OPTIONS.update(options)
    # the suite looks its factories up by name at each run
    setattr(suite_job, _FACTORIES[method], _variant(method))
    return suite_job.run_one(task, method, workers, seed, SuiteSettings(seeds=1), stats)


def _gmean(ratios: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else math.nan


def main(argv: Sequence[str] | None = None) -> str:
    """Run the variant on ``--tasks`` x ``--seeds`` at ``--workers``; return the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="POP (ours)", choices=sorted(_FACTORIES))
    parser.add_argument("--options", default="{}", help="keyword arguments, as JSON")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--tasks", default=TASKS, help="comma-separated task ids, or all")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--against", default="Random,ASHA,EarlyTerm,Bandit")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    tasks = suite.tasks() if args.tasks == "all" else args.tasks.split(",")
    against = args.against.split(",")
    cache = RunCache(RunCache.default_folder())
    base = suite.run_suite(
        SuiteSettings(seeds=args.seeds),
        task_ids=tasks,
        methods=against,
        workers=[args.workers],
        cache=cache,
        jobs=args.jobs,
    )
    started = time.perf_counter()
    pairs = [(t, s) for s in range(args.seeds) for t in tasks]
    cells = [(args.method, options, t, args.workers, s, base["stats"][t]) for t, s in pairs]
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(_cell, cells, chunksize=1))
    ratios: dict[str, list[float]] = {m: [] for m in against}
    reached: dict[str, int] = {m: 0 for m in against}
    reached_variant = 0
    for (task, seed), run in zip(pairs, runs, strict=True):
        ours = float(run["hours"])
        others = {m: float(base["runs"][(task, m, args.workers, seed)]["hours"]) for m in against}
        cells_text = "  ".join(f"{m} {h:.3f}" for m, h in others.items())
        print(f"{task:>7} s{seed}  {cells_text}  variant {ours:.3f} h", flush=True)
        reached_variant += math.isfinite(ours)
        for m, h in others.items():
            reached[m] += math.isfinite(h)
            if math.isfinite(ours) and math.isfinite(h):
                ratios[m].append(h / ours)
    times = [float(r["hours"]) for r in runs if math.isfinite(float(r["hours"]))]
    line = (
        f"{args.method} {args.options} at {args.workers} workers, {len(tasks)} tasks x "
        f"{args.seeds} seeds: reached {reached_variant}/{len(pairs)}, geometric-mean "
        f"{_gmean(times):.4f} h; "
        + "; ".join(
            f"{m}/variant x{_gmean(ratios[m]):.2f} ({len(ratios[m])} pairs, {m} reached "
            f"{reached[m]})"
            for m in against
        )
        + f"; {time.perf_counter() - started:.0f} s"
    )
    print(line)
    return line


if __name__ == "__main__":
    main()
