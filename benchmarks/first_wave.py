"""Whether the first wave of seeded random search already holds a winner, per LCBench task.

With ``W`` workers, every method of :mod:`benchmarks.lcbench_suite` that runs on seeded random
search (random search itself, ASHA, Hyperband, POP, Bandit, EarlyTerm) starts the same first
``W`` configurations at ``t = 0``. When one of them reaches the target, random search's time to
target is that configuration's own time to it (plus the simulator's milliseconds of dispatch and
reports), and a stopper can only beat it with a configuration it starts later, in a slot it
freed by stopping one of the first ``W``, that still gets there first: the speed-up over
random search has little room on such a (task, seed) pair. Without early stopping, the chance
that ``W`` draws hold one of the top ``1 - q`` is ``1 - q ** W`` (96% for ``q`` 0.95 and 64
workers), a little more here because a trial counts with any epoch's report.

This reads the surrogate only (no master runs), exactly: the first ``W`` configurations are
drawn by the suite's own random search (:func:`benchmarks.suite_job.method`), one at a time as
the master asks for them; each curve is the simulator's (:meth:`LCBench.learning_curve`); the
targets are the suite's (:func:`benchmarks.lcbench_suite.suite_stats`, kept in its run cache).
Per worker count and target quantile it prints how many (task, seed) pairs have a winner in the
first wave (at any of its 52 epochs, and by the suite's cap ``2 H``) and the geometric mean of
random search's time to target on that wave. With ``--split``, it also reads the suite's cached
runs of those methods (and random search) at each quantile and gives their speed-up over random
search apart on the pairs whose first wave holds a winner by ``2 H`` and on the others.

    python -m benchmarks.first_wave --workers 8 64 256 --seeds 3 --quantiles 0.95 0.99 0.995
    python -m benchmarks.first_wave --quantiles 0.99 --split "ASHA,POP (ours)" --cache DIR
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.data import DataMissing
from benchmarks.lcbench_suite import run_suite, suite_stats, target_quantile, tasks
from benchmarks.suite_job import bench, method
from benchmarks.suite_runs import RunCache, SuiteSettings
from benchmarks.suite_tables import geomean, seeds_at
from ultron.algorithms.space import Config
from ultron.simulation.benchmark import SimulatedClock

__all__ = ["ceiling", "first_wave", "split", "task_waves", "time_to_target"]


def first_wave(workers: int, seed: int) -> list[Config]:
    """The first ``workers`` configurations the suite's seeded random search hands out."""
    strategy, _ = method("Random", workers, seed, SimulatedClock(), 0.0)
    return [strategy.sample_hyperparameter_candidates(1)[0] for _ in range(workers)]


def time_to_target(values: np.ndarray, durations: np.ndarray, target: float) -> np.ndarray:
    """Per curve (row), the seconds to the end of its first epoch at or above ``target``
    (``inf`` if none): the suite's rule, a trial counts with any epoch's report."""
    reached = values >= target
    cumulative = np.cumsum(durations, axis=1)
    first = reached.argmax(axis=1)
    at = cumulative[np.arange(len(values)), first]
    return np.where(reached.any(axis=1), at, math.inf)


def task_waves(
    task: str,
    workers: Sequence[int],
    seeds: int,
    stats: dict[float, dict[str, float]],
    budget: float,
) -> list[dict[str, Any]]:
    """One row per (seed, worker count, quantile) of ``task``: random search's time to target
    on the first wave (s, ``inf`` if no configuration in it reaches the target) and the
    suite's cap ``2 H`` (s). ``stats``: the task's target statistics per quantile."""
    surrogate = bench(task)
    rows = []
    try:
        for seed in range(seeds):
            configs = first_wave(max(workers), seed)
            curves = [surrogate.learning_curve(c) for c in configs]
            values = np.array([c.values for c in curves])
            durations = np.array([c.durations for c in curves])
            for quantile, found in stats.items():
                times = time_to_target(values, durations, found["target"])
                for w in workers:
                    rows.append(
                        {
                            "task": task,
                            "seed": seed,
                            "workers": w,
                            "quantile": quantile,
                            "seconds": float(times[:w].min()),
                            "cap": 2 * found["t52"] * budget / w,
                        }
                    )
    finally:
        surrogate.forget()
    return rows


def ceiling(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (worker count, quantile): (task, seed) pairs, how many have a first-wave winner at
    any epoch and by the cap, ``1 - q ** W``, and the geometric mean of the first-wave time to
    target in hours over the pairs that have a winner."""
    out = []
    for w, q in sorted({(r["workers"], r["quantile"]) for r in rows}):
        mine = [r for r in rows if r["workers"] == w and r["quantile"] == q]
        times = [r["seconds"] / 3600 for r in mine if math.isfinite(r["seconds"])]
        out.append(
            {
                "workers": w,
                "quantile": q,
                "pairs": len(mine),
                "winner": len(times),
                "by_cap": sum(r["seconds"] <= r["cap"] for r in mine),
                "chance": 1 - q**w,
                "hours": geomean(times),
            }
        )
    return out


def table(summary: Sequence[dict[str, Any]]) -> str:
    """:func:`ceiling`'s rows as a Markdown table."""
    lines = [
        "| workers | target quantile | first wave holds a winner | by the cap 2 H | "
        "1 - q^W | random search's time to target on it (geometric mean) |",
        "|---|---|---|---|---|---|",
    ]
    for s in summary:
        share = s["winner"] / s["pairs"]
        lines.append(
            f"| {s['workers']} | {s['quantile']:g} | {s['winner']}/{s['pairs']} ({share:.0%}) | "
            f"{s['by_cap']}/{s['pairs']} | {s['chance']:.0%} | {s['hours']:.3f} h |"
        )
    return "\n".join(lines)


def split(rows: Sequence[dict[str, Any]], suite: dict[str, Any]) -> list[dict[str, Any]]:
    """The suite's speed-ups over random search on the (task, seed) pairs whose first wave
    holds a winner by the cap, on the others, and on all with a miss counted at the cap.

    ``suite``: the suite's runs at one target quantile (:func:`run_suite`), with random
    search among its methods; ``rows``: :func:`task_waves`' rows for its tasks and seeds. Per
    worker count and side (``holds``: ``True``, ``False``, or ``None`` for all pairs): the
    pairs, how many random search reached, and per method how many it reached and the
    geometric mean of random search's time over the method's, over the pairs both reached
    (with ``None``: over the pairs either reached, a run that missed counted at the cap
    ``2 H``, which random search's real time to target is beyond).
    """
    runs, quantile = suite["runs"], suite["settings"].quantile
    waves = {(r["task"], r["seed"], r["workers"]): r for r in rows if r["quantile"] == quantile}
    out = []
    for w in suite["workers"]:
        for side in (True, False, None):
            pairs = [
                (t, s)
                for t in suite["tasks"]
                for s in range(seeds_at(suite, w))
                if side is None or (waves[t, s, w]["seconds"] <= waves[t, s, w]["cap"]) is side
            ]
            caps = [waves[t, s, w]["cap"] / 3600 for t, s in pairs]
            base = [runs[t, "Random", w, s]["hours"] for t, s in pairs]
            methods = {}
            for m in (m for m in suite["methods"] if m != "Random"):
                own = [runs[t, m, w, s]["hours"] for t, s in pairs]
                if side is None:
                    ratios = [
                        min(a, cap) / min(b, cap)
                        for a, b, cap in zip(base, own, caps, strict=True)
                        if math.isfinite(a) or math.isfinite(b)
                    ]
                else:
                    ratios = [
                        a / b
                        for a, b in zip(base, own, strict=True)
                        if math.isfinite(a) and math.isfinite(b) and b > 0
                    ]
                reached = sum(map(math.isfinite, own))
                methods[m] = {"speedup": geomean(ratios), "both": len(ratios), "reached": reached}
            out.append(
                {
                    "workers": w,
                    "quantile": quantile,
                    "holds": side,
                    "pairs": len(pairs),
                    "random": sum(map(math.isfinite, base)),
                    "methods": methods,
                }
            )
    return out


def _ratio(value: float) -> str:
    return f"x{value:.2f}" if math.isfinite(value) else "-"


def split_table(parts: Sequence[dict[str, Any]]) -> str:
    """:func:`split`'s rows as a Markdown table."""
    methods = list(parts[0]["methods"]) if parts else []
    lines = [
        "| workers | target quantile | first wave holds a winner by 2 H | pairs | random search "
        "reached | " + " | ".join(methods) + " |",
        "|---|---|---|---|---|" + "---|" * len(methods),
    ]
    for p in parts:
        cells = [
            f"{_ratio(c['speedup'])} ({c['both']} pairs); reached {c['reached']}"
            for c in p["methods"].values()
        ]
        side = {True: "yes", False: "no", None: "all pairs, a miss at 2 H"}[p["holds"]]
        lines.append(
            f"| {p['workers']} | {p['quantile']:g} | {side} | {p['pairs']} | {p['random']} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def _task(args: tuple[str, list[int], int, dict[float, dict[str, float]], float]) -> list[Any]:
    return task_waves(*args)


def main(argv: Sequence[str] | None = None) -> str:
    """Print the first-wave table over the tasks, seeds, worker counts and quantiles asked."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--quantiles", type=target_quantile, nargs="+", default=[0.95, 0.99, 0.995])
    parser.add_argument("--budget", type=float, default=64.0, help="B, for the cap 2 H")
    parser.add_argument("--tasks", default="all", help="comma-separated task ids, or all")
    parser.add_argument("--jobs", type=int, default=1, help="processes")
    parser.add_argument("--cache", type=Path, default=RunCache.default_folder())
    parser.add_argument(
        "--split",
        default="",
        help="also the suite's cached runs of these methods (comma-separated) against random "
        "search, split by whether the first wave holds a winner",
    )
    arguments = parser.parse_args(argv)
    if arguments.seeds < 1 or min(arguments.workers) < 1:
        parser.error(
            f"--seeds {arguments.seeds} and --workers {arguments.workers}: each must be at least 1"
        )
    try:
        task_ids = tasks() if arguments.tasks == "all" else arguments.tasks.split(",")
    except DataMissing as error:
        print(str(error))
        return str(error)
    cache = RunCache(arguments.cache)
    per_quantile = {
        q: suite_stats(
            task_ids,
            SuiteSettings(budget=arguments.budget, quantile=q),
            cache,
            jobs=arguments.jobs,
        )
        for q in arguments.quantiles
    }
    work = [
        (
            t,
            arguments.workers,
            arguments.seeds,
            {q: s[t] for q, s in per_quantile.items()},
            arguments.budget,
        )
        for t in task_ids
    ]
    jobs = arguments.jobs
    with ProcessPoolExecutor(jobs) if jobs > 1 else contextlib.nullcontext() as pool:
        rows = [r for part in (pool.map if pool else map)(_task, work) for r in part]
    report = table(ceiling(rows))
    if arguments.split:
        parts = []
        for q in arguments.quantiles:
            for w in arguments.workers:  # each its own suite: tasks complete at one count
                suite = run_suite(
                    SuiteSettings(seeds=arguments.seeds, budget=arguments.budget, quantile=q),
                    task_ids=task_ids,
                    methods=["Random", *arguments.split.split(",")],
                    workers=[w],
                    cache=cache,
                    from_cache=True,
                )
                if suite["tasks"]:
                    parts += split(rows, suite)
        report += "\n\n" + (split_table(parts) if parts else "no cached runs to split")
    print(report)
    return report


if __name__ == "__main__":
    main()
