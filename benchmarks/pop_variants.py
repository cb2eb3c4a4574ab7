"""POP (or Bandit, EarlyTerm) with other options on LCBench tasks, against the suite's runs.

Each run is the suite's own run (:func:`benchmarks.suite_job.run_one`: the real master on
the simulated clock, the same target, budget and seed) with ``--options`` on top of the
method's stopper settings (its factory in ``benchmarks.lcbench`` takes them); the methods it is
compared with (``--against``) come from the suite's run cache (run once if
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

import benchmarks.lcbench_suite as suite
import benchmarks.suite_job as suite_job
from benchmarks.suite_runs import RunCache, SuiteSettings

# The curve model's 10 tasks (benchmarks/RESULTS.md, "POP with the calibrated curve model").
TASKS = "3945,126029,167184,189354,146212,167201,167104,168908,189862,34539"
# The methods whose stoppers take options (benchmarks.lcbench's factories).
METHODS = ("POP (ours)", "Bandit", "EarlyTerm")


def _cell(args: tuple[str, dict[str, Any], str, int, int, dict[str, float]]) -> dict[str, Any]:
    method, options, task, workers, seed, stats = args
    try:
        settings = SuiteSettings(seeds=1)
        return suite_job.run_one(task, method, workers, seed, settings, stats, options)
    finally:
        suite_job.bench(task).forget()  # its curves, as the suite forgets them per (task, seed)


def _gmean(ratios: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else math.nan


def main(argv: Sequence[str] | None = None) -> str:
    """Run the variant on ``--tasks`` x ``--seeds`` at ``--workers``; return the summary line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--method", default="POP (ours)", choices=METHODS)
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
