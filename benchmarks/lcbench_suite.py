"""All 34 LCBench tasks side by side: our methods and the peers through the real master.

Every run is :func:`~ultron.simulation.jobs.simulate_job` (the asynchronous ``Master`` of a real
job over a simulated cluster, on a simulated clock) on one task of YAHPO Gym's LCBench
surrogate, with ``workers`` simulated workers. ``T52`` is the median time one random
configuration takes to train all 52 epochs on that task and ``B`` the budget in full trainings
(``--budget``). A run goes on until the later of two moments, and at most ``2 H``:

- the **time to target**: the first moment any trial reported (at the end of an epoch) a
  validation accuracy at or above the task's target, the same rule for every method (a method
  that stops a trial the moment it reports the target gains nothing from it); the target is
  the accuracy that 1 random configuration in 20 ends with after 52 epochs (quantile 0.95 of
  1,000 random configurations, seed 12345; ``--target-quantile`` sets another, e.g. 0.99 for
  1 in 100; ``benchmarks.lcbench`` takes its 1-in-200 target from the peak over epochs
  instead); ``inf`` when not reached by ``2 H``;
- the **fixed budget** ``H = T52 * B / workers`` (the cluster's ``B`` full trainings' worth),
  where the **normalized regret** is taken: ``(y_best - y) / (y_best - y_median)``, ``y`` the
  best accuracy any trial reported by ``H``, ``y_best`` and ``y_median`` the best and median
  final accuracy of those 1,000 configurations (0: as good as the best of 1,000; negative:
  better).

When the run is over, nothing new starts and running trials stop at their next epoch.

Methods: random search (full budget), ASHA, Hyperband, POP (ours, on random search),
HyperDrive's baselines Bandit and EarlyTerm (on random search, judged on POP's evaluation
boundaries: epochs 4, 9, 14, ...), Optuna's
TPE with its Hyperband pruner, DEHB (``dehb`` package) and the one-epoch top-K baseline
(:mod:`benchmarks.lcbench_peers`). ``--methods`` may also name "POP (dynamic target)" (POP with
HyperDrive's dynamic target, section 9). Runs are cached on disk (see
:mod:`benchmarks.suite_runs`), keyed by their parameters and the code they ran, so a rerun
recomputes only what changed. A process runs all the runs of one (task, seed) in turn: the
methods on seeded random search see the same configurations, and each curve is computed once.
One run is :func:`benchmarks.suite_job.run_one`; the tables (:mod:`benchmarks.suite_tables`)
aggregate over (task, seed) pairs.

    python -m benchmarks.lcbench_suite --seeds 3 --jobs 2 --write-results
    python -m benchmarks.lcbench_suite --seeds 3 --seeds-at 64=1,256=1 --jobs 2 --write-results
    python -m benchmarks.lcbench_suite --target-quantile 0.99 --workers 64,256 --seeds 1 --jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import suite_tables
from benchmarks.data import DataMissing, data_dir
from benchmarks.lcbench import SPACE, LCBench
from benchmarks.lcbench_peers import PeerMissing
from benchmarks.suite_job import bench as _bench
from benchmarks.suite_job import run_one
from benchmarks.suite_runs import Cell, RunCache, SuiteSettings

METHODS = (
    "Random",
    "ASHA",
    "Hyperband",
    "POP (ours)",
    "Bandit",
    "EarlyTerm",
    "Optuna TPE+Hyperband",
    "DEHB",
    "1-epoch top-K",
)
WORKERS = (8, 64, 256)
RESULTS = Path(__file__).with_name("RESULTS.md")


def tasks() -> list[str]:
    """The surrogate's 34 OpenML task ids (its configuration space's; ``encoding.json`` also
    codes a placeholder and a task outside the benchmark)."""
    folder = data_dir("yahpo_lcbench_surrogate")
    space = json.loads((folder / "config_space.json").read_text())
    task = next(h for h in space["hyperparameters"] if h["name"] == "OpenML_task_id")
    return list(task["choices"])


def task_stats(bench: LCBench, settings: SuiteSettings) -> dict[str, float]:
    """Target, best and median final accuracy and ``T52`` from random configurations.

    The final (epoch-52) accuracy, not the peak over epochs: a trial counts with the last value
    it reported, so a peak-based target would be out of reach of full training on tasks whose
    curves fall after their peak (random search then never reaches it).
    """
    rng = np.random.default_rng(12345)
    configs = [SPACE.sample(rng) for _ in range(settings.reference)]
    # In batches of 100 curves: one batch of 1,000 takes gigabytes in the surrogate.
    parts = [bench.curves(configs[i : i + 100]) for i in range(0, len(configs), 100)]
    values = np.concatenate([v for v, _ in parts])
    durations = np.concatenate([d for _, d in parts])
    finals = values[:, -1]
    return {
        "target": float(np.quantile(finals, settings.quantile)),
        "best": float(finals.max()),
        "median": float(np.median(finals)),
        "t52": float(np.median(durations.sum(axis=1))),
    }


def _stats(task: str, settings: SuiteSettings) -> dict[str, float]:
    return task_stats(_bench(task), settings)


def suite_stats(
    task_ids: Sequence[str], settings: SuiteSettings, cache: RunCache, *, jobs: int = 1
) -> dict[str, dict[str, float]]:
    """Each task's :func:`task_stats` for ``settings``, from ``cache`` where it holds them
    (computed in ``jobs`` processes and stored otherwise)."""
    with ProcessPoolExecutor(jobs) if jobs > 1 else contextlib.nullcontext() as pool:
        missing = [t for t in task_ids if cache.stats(t, settings) is None]
        computed = (pool.map if pool else map)(_stats, missing, [settings] * len(missing))
        for task, value in zip(missing, computed, strict=True):
            cache.put_stats(task, settings, value)
    return {t: found for t in task_ids if (found := cache.stats(t, settings)) is not None}


def _cell(args: tuple[str, str, int, int, SuiteSettings, dict[str, float]]) -> dict[str, Any]:
    try:
        return run_one(*args)
    except PeerMissing as error:
        return {"skipped": str(error)}


def _group(
    args: tuple[list[Cell], SuiteSettings, dict[str, float]],
) -> list[dict[str, Any]]:
    """The runs of one (task, seed) in one process, in order: the methods on seeded random
    search share their configurations, so each curve is computed once (then forgotten)."""
    cells, settings, stats = args
    try:
        return [_cell((*cell, settings, stats)) for cell in cells]
    finally:
        _bench(cells[0][0]).forget()


def run_suite(
    settings: SuiteSettings,
    *,
    task_ids: Sequence[str],
    methods: Sequence[str] = METHODS,
    workers: Sequence[int] = WORKERS,
    jobs: int = 1,
    cache: RunCache | None = None,
    from_cache: bool = False,
    seeds_at: dict[int, int] | None = None,
) -> dict[str, Any]:
    """Every (task, method, workers, seed) run, from the cache where it holds it.

    With ``from_cache``, nothing runs and only the tasks whose runs are all cached are kept.
    ``seeds_at``: fewer (or more) seeds than ``settings.seeds`` at some worker counts.
    """
    cache = cache or RunCache(None)
    seeds = {w: (seeds_at or {}).get(w, settings.seeds) for w in workers}
    left_out: list[str] = []
    if from_cache:
        complete = [
            t
            for t in task_ids
            if all(
                cache.get((t, m, w, s), settings)
                for m in methods
                for w in workers
                for s in range(seeds[w])
            )
        ]
        print(f"from the cache: {len(complete)} of {len(task_ids)} tasks complete", flush=True)
        left_out = [t for t in task_ids if t not in complete]
        task_ids = complete
    stats = suite_stats(task_ids, settings, cache, jobs=jobs)
    cells = [
        (t, m, w, s) for t in task_ids for m in methods for w in workers for s in range(seeds[w])
    ]
    todo = [c for c in cells if cache.get(c, settings) is None]
    print(f"{len(cells)} runs, {len(cells) - len(todo)} cached, {len(todo)} to run", flush=True)
    groups: dict[tuple[str, int], list[Cell]] = {}
    for cell in sorted(todo, key=lambda c: (c[3], c[0])):  # seed by seed, task by task
        groups.setdefault((cell[0], cell[3]), []).append(cell)
    args = [(group, settings, stats[task]) for (task, _), group in groups.items()]
    started = time.perf_counter()
    with ProcessPoolExecutor(jobs) if jobs > 1 else contextlib.nullcontext() as pool:
        outcomes = pool.map(_group, args, chunksize=1) if pool else map(_group, args)
        for group, runs in zip(groups.values(), outcomes, strict=True):
            for cell, outcome in zip(group, runs, strict=True):
                cache.put(cell, settings, outcome)  # as each group ends: a stopped suite keeps them
            print(f"{group[0][0]} seed {group[0][3]}: {len(runs)} runs", flush=True)
    print(f"ran {len(todo)} in {time.perf_counter() - started:.0f} s", flush=True)
    return {
        "settings": settings,
        "stats": stats,
        "runs": {c: cache.get(c, settings) for c in cells},
        "tasks": list(task_ids),
        "left_out": left_out,
        "methods": list(methods),
        "workers": list(workers),
        "seeds": seeds,
    }


def _seeds_at(text: str) -> dict[int, int]:
    """``--seeds-at``'s value, ``WORKERS=SEEDS`` pairs separated by commas (argparse reports a
    ValueError as an error on the flag, with its value and the usage)."""
    pairs = {}
    for item in filter(None, text.split(",")):
        workers, _, seeds = item.partition("=")
        if not (workers.strip().isdigit() and seeds.strip().isdigit() and int(seeds) > 0):
            raise argparse.ArgumentTypeError(
                f"{item!r} is not WORKERS=SEEDS with two positive whole numbers (e.g. 64=1,256=1)"
            )
        pairs[int(workers)] = int(seeds)
    return pairs


def target_quantile(text: str) -> float:
    """``--target-quantile``'s value: a number in (0, 1] (argparse reports a ValueError as an
    error on the flag, with its value and the usage)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a quantile: it must be a number above 0 and at most 1 (e.g. 0.99: "
            "the accuracy 1 random configuration in 100 ends with)"
        )
    return value


def refuse_other_target(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> None:
    """Exit 2 (argparse's usage error) when ``--write-results`` is asked at a target other
    than the default: the section it replaces holds the suite's headline tables, at 0.95."""
    if arguments.write_results and arguments.target_quantile != SuiteSettings.quantile:
        parser.error(
            f"--write-results with --target-quantile {arguments.target_quantile:g}: the section "
            f"it would replace holds the headline tables, at {SuiteSettings.quantile:g}; leave "
            "--write-results out and record these tables under their own heading"
        )


def main(argv: Sequence[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--seeds-at",
        type=_seeds_at,
        default={},
        help="other seed counts at some worker counts, e.g. 64=1,256=1 (the rest: --seeds)",
    )
    parser.add_argument("--budget", type=float, default=64.0, help="B: full trainings' worth")
    parser.add_argument(
        "--target-quantile",
        type=target_quantile,
        default=SuiteSettings.quantile,
        help="the target: this quantile of random configurations' final accuracy "
        "(default %(default)s, 1 in 20; 0.99: 1 in 100)",
    )
    parser.add_argument("--tasks", default="all", help="comma-separated task ids, or all")
    parser.add_argument("--workers", default="8,64,256")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--jobs", type=int, default=1, help="processes")
    parser.add_argument("--cache", type=Path, default=RunCache.default_folder())
    parser.add_argument(
        "--from-cache",
        action="store_true",
        help="run nothing: tables from the cached runs, over the tasks that have all of them",
    )
    parser.add_argument(
        "--subset",
        default="",
        help="with --from-cache: also tables for these methods alone, over the tasks they all have",
    )
    parser.add_argument("--write-results", action="store_true", help=f"update {RESULTS.name}")
    parser.add_argument("--results", type=Path, default=RESULTS)
    arguments = parser.parse_args(argv)
    refuse_other_target(parser, arguments)
    try:
        task_ids = tasks() if arguments.tasks == "all" else arguments.tasks.split(",")
    except DataMissing as error:
        print(str(error))
        return str(error)
    settings = SuiteSettings(
        seeds=arguments.seeds, budget=arguments.budget, quantile=arguments.target_quantile
    )
    seeds_at = arguments.seeds_at
    suite = run_suite(
        settings,
        task_ids=task_ids,
        methods=arguments.methods.split(","),
        workers=[int(w) for w in arguments.workers.split(",")],
        jobs=arguments.jobs,
        cache=RunCache(arguments.cache),
        from_cache=arguments.from_cache,
        seeds_at=seeds_at,
    )
    subset = None
    if arguments.from_cache and arguments.subset:
        subset = run_suite(
            settings,
            task_ids=task_ids,
            methods=arguments.subset.split(","),
            workers=[int(w) for w in arguments.workers.split(",")],
            cache=RunCache(arguments.cache),
            from_cache=True,
            seeds_at=seeds_at,
        )
    command = "python -m benchmarks.lcbench_suite " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    report = suite_tables.section(suite, command=command.strip(), subset=subset)
    print(report)
    if arguments.write_results:
        suite_tables.write_section(arguments.results, report)
    return report


if __name__ == "__main__":
    main()
