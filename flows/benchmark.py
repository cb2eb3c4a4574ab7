"""Recurring benchmarks: a named suite of experiments on problems that need no GPU, a dated
report in the storage, and the regressions against the previous report.

    benchmark(suite="nightly")
      for each problem: an experiment (seeded jobs per strategy)
        job problems (the quickstart): the experiment flow, real jobs
        simulated problems (the Snoek grids, LCBench's surrogate): the real master loop on a
          simulated cluster (ultron.simulation), in seconds
      <storage>/benchmarks/<suite>/<YYYY-MM-DD>/: report.html, summary.json, one folder per
        problem; regressions against the latest earlier report flagged there and as artifacts

A regression is a strategy whose mean best score got worse than in the previous report by
more than its spread over seeds (:func:`ultron.reporting.find_regressions`). The
``nightly-benchmark`` deployment (``prefect.yaml``) runs the ``nightly`` suite on a cron schedule.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import fsspec
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from ultron import strict_json
from ultron.algorithms.base import Direction
from ultron.algorithms.registry import resolve_strategy
from ultron.errors import UltronError
from ultron.flows.experiment import experiment
from ultron.paths import artifact_key, job_results_url
from ultron.reporting import (
    ProblemRuns,
    SeedRun,
    benchmark_html,
    experiment_files,
    find_regressions,
    read_json,
    run_from_trials,
    summarize,
    write_files,
)
from ultron.reporting.plots import require_matplotlib
from ultron.secrets import conceal
from ultron.simulation import Benchmark, simulate_job
from ultron.simulation.tabular import load_grid

__all__ = ["SUITES", "benchmark"]

_REPO = Path(__file__).resolve().parents[1]
_STRATEGIES = {"random": {"strategy": "random"}, "tpe": {"strategy": "tpe"}}

SUITES: dict[str, dict[str, Any]] = {
    "nightly": {
        "seeds": 5,
        "strategies": _STRATEGIES,
        "problems": {
            "quickstart": {"kind": "job", "spec": "examples/quickstart/job.yaml"},
            "svm-grid": {"kind": "grid", "budget": 40, "workers": 4},
            "lda-grid": {"kind": "grid", "budget": 40, "workers": 4},
            "logreg-grid": {"kind": "grid", "budget": 40, "workers": 4},
            "lcbench-189906": {"kind": "lcbench", "budget": 100, "workers": 8},
        },
    },
}
"""Named suites: seeds, strategies (label -> strategy and options) and problems. A problem is
a job spec (``kind: job``, run for real), a Snoek grid (``kind: grid``) or an LCBench task
(``kind: lcbench``, needs the repository's ``benchmarks`` package and onnxruntime)."""


@flow(name="benchmark", validate_parameters=False)
def benchmark(
    suite: str | dict[str, Any] = "nightly",
    storage: str = "ultron-runs",
    data_dir: str | None = None,
    date: str | None = None,
) -> dict[str, Any]:
    """Run a benchmark suite, write its dated report and flag regressions.

    Args:
        suite: a name in :data:`SUITES`, or a suite itself (``name``, ``seeds``,
            ``strategies``, ``problems``).
        storage: where reports go (a folder or a URL); under ``benchmarks/<suite>/<date>``.
        data_dir: the benchmark data (default ``ULTRON_BENCHMARK_DATA``, else
            ``../shared/data`` beside the repository).
        date: the report's date, ``YYYY-MM-DD`` (default: today, UTC).

    Returns:
        The report's folder, each problem's summary, the regressions and the previous report.
    """
    require_matplotlib()
    name, plan = _suite(suite)
    day = dt.date.fromisoformat(date) if date else dt.datetime.now(dt.UTC).date()
    root = job_results_url(job_results_url(storage, "benchmarks"), name)
    problems: dict[str, ProblemRuns] = {}
    skipped: dict[str, str] = {}
    for problem, entry in plan["problems"].items():
        try:
            runs, direction, metric = _run_problem(name, day, problem, entry, plan, data_dir)
        except _Skipped as why:
            get_run_logger().warning("%s skipped: %s", problem, why)
            skipped[problem] = str(why)
            continue
        files = experiment_files(problem, runs, direction=direction, metric=metric)
        write_files(f"{root}/{day}/{problem}", files)
        problems[problem] = ProblemRuns(runs, direction, metric, files)
    return _report(root, day, name, problems, skipped)


def _suite(suite: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(suite, str):
        if suite not in SUITES:
            raise UltronError(
                f"suite is {suite!r}; it must be one of {', '.join(SUITES)}, or a suite itself"
            )
        return suite, SUITES[suite]
    return str(suite.get("name", "custom")), suite


class _Skipped(Exception):
    """A problem whose data or dependencies are missing here."""


def _run_problem(
    suite: str,
    day: dt.date,
    problem: str,
    entry: Mapping[str, Any],
    plan: Mapping[str, Any],
    data_dir: str | None,
) -> tuple[list[SeedRun], Direction, str]:
    seeds, strategies = int(plan["seeds"]), plan["strategies"]
    if entry["kind"] == "job":
        return _job_problem(suite, day, problem, entry, seeds, strategies)
    bench = _simulated(entry["kind"], problem, data_dir)
    runs = [
        simulate_seed(bench, label, seed, strategies[label], entry)
        for label in strategies
        for seed in range(seeds)
    ]
    return runs, Direction(bench.direction), str(getattr(bench, "metric", "value"))


def _job_problem(
    suite: str,
    day: dt.date,
    problem: str,
    entry: Mapping[str, Any],
    seeds: int,
    strategies: Mapping[str, Mapping[str, Any]],
) -> tuple[list[SeedRun], Direction, str]:
    """A job spec as an experiment of real jobs (the experiment flow as a subflow)."""
    from ultron.spec.loader import load_spec

    path = Path(entry["spec"])
    if not path.is_absolute():  # the deployment runs in the repository; else ours
        path = path if path.exists() else _REPO / path
    spec = load_spec(path, check_code=True)
    runs: list[SeedRun] = []
    for label, options in strategies.items():
        fields = spec.model_dump(mode="json") | dict(entry.get("overrides", {}))
        fields |= {"strategy": options["strategy"], **_options(options)}
        out = experiment(
            conceal(fields), seeds=seeds, experiment_id=f"bench-{suite}-{day}-{problem}-{label}"
        )
        document = read_json(f"{out['folder']}/summary.json")
        runs += [SeedRun.from_dict({**run, "strategy": label}) for run in document["runs"]]
    return runs, spec.objective.mode, spec.objective.metric


def _options(options: Mapping[str, Any]) -> dict[str, Any]:
    return {"strategy_options": dict(options.get("options", {}))}


def _simulated(kind: str, problem: str, data_dir: str | None) -> Benchmark:
    folder = (
        data_dir or os.environ.get("ULTRON_BENCHMARK_DATA") or str(_REPO.parent / "shared" / "data")
    )
    if kind == "grid":
        try:
            return load_grid(problem, folder)
        except UltronError as exc:
            raise _Skipped(str(exc)) from exc
    if kind == "lcbench":
        try:  # the repository's benchmarks package (not installed with ultron)
            from benchmarks.data import DataMissing
            from benchmarks.lcbench import LCBench
        except ImportError as exc:
            raise _Skipped(
                f"needs the repository's benchmarks package on the path ({exc})"
            ) from exc
        os.environ.setdefault("ULTRON_BENCHMARK_DATA", folder)
        try:
            return LCBench(problem.removeprefix("lcbench-"))
        except DataMissing as exc:
            raise _Skipped(str(exc)) from exc
    raise UltronError(f"problem {problem} has kind {kind!r}; it must be job, grid or lcbench")


@task(name="simulate-seed", task_run_name="simulate-{label}-{seed}", cache_policy=NONE)
def simulate_seed(
    bench: Benchmark, label: str, seed: int, options: Mapping[str, Any], entry: Mapping[str, Any]
) -> SeedRun:
    """One seeded job of a simulated problem: the real master loop on a simulated cluster."""
    strategy = resolve_strategy(options["strategy"])(
        bench.search_space, seed=seed, direction=bench.direction, **options.get("options", {})
    )
    job = simulate_job(
        bench, strategy, budget=int(entry["budget"]), workers=int(entry.get("workers", 1))
    )
    return run_from_trials(label, seed, f"simulated-{label}-{seed}", job.trials, job.curves)


def _previous(root: str, day: dt.date) -> tuple[str | None, dict[str, Any] | None]:
    """The latest report before ``day`` under ``root``, and its summary."""
    fs, path = fsspec.core.url_to_fs(root)
    days = []
    if fs.exists(path):
        for entry in fs.ls(path, detail=False):
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            try:
                days.append(dt.date.fromisoformat(name))
            except ValueError:
                continue
    earlier = sorted(d for d in days if d < day)
    if not earlier:
        return None, None
    folder = f"{root}/{earlier[-1]}"
    return folder, read_json(f"{folder}/summary.json")


def _report(
    root: str,
    day: dt.date,
    name: str,
    problems: Mapping[str, ProblemRuns],
    skipped: Mapping[str, str],
) -> dict[str, Any]:
    summaries = {
        problem: [row.to_dict() for row in summarize(runs.runs, runs.direction)]
        for problem, runs in problems.items()
    }
    previous, before = _previous(root, day)
    directions = {problem: runs.direction for problem, runs in problems.items()}
    regressions = find_regressions(summaries, (before or {}).get("problems", {}), directions)
    html = benchmark_html(
        f"Benchmark {name}, {day}",
        problems,
        regressions=regressions,
        previous=previous,
        skipped=skipped,
    )
    document = {
        "suite": name,
        "date": str(day),
        "problems": summaries,
        "directions": {k: str(v) for k, v in directions.items()},
        "skipped": dict(skipped),
        "previous": previous,
        "regressions": [str(r) for r in regressions],
    }
    folder = f"{root}/{day}"
    files = write_files(
        folder, {"report.html": html, "summary.json": strict_json.dumps(document, indent=2)}
    )
    text = "\n".join(
        [f"# Benchmark {name}, {day}", "", f"Report: {files['report.html']}", ""]
        + ([f"**Regression**: {r}" for r in regressions] or ["No regression."])
    )
    try:
        create_markdown_artifact(text, key=artifact_key(f"bench-{name}", "report"))
    except Exception:  # artifacts are for the UI; their failure never fails a benchmark
        get_run_logger().warning("could not write Prefect artifacts")
    for regression in regressions:
        get_run_logger().warning("regression: %s", regression)
    return {**document, "folder": folder, "files": files}
