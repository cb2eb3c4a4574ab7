"""A fully cached job: the quickstart run a second time, every trial from the score cache.

Issue 30's figure: ``ultron run examples/quickstart/job.yaml`` run again completes in at most
3 s of wall time on 2 cores, with no Dask worker or trial process started. A copy of
``examples/quickstart`` in a temporary folder runs once (it trains, unless this ``ULTRON_HOME``'s
score cache knows its configurations already), then ``--runs`` more times, each timed from the
command's start to its exit: wall time, the CPU time of the command and its children (the
machine may be shared: CPU time moves less with the load than wall time), the load average
as it started, and whether the job started workers (``start_workers`` in ``best.json``'s
``timings``: it must not).

    python -m benchmarks.cached_job              # 1 training run, then 5 cached ones
    python -m benchmarks.cached_job --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.first_trial import timed_ultron_run

HERE = Path(__file__).parent
QUICKSTART = HERE.parent / "examples" / "quickstart"
TARGET_S = 3.0  # issue 30: the quickstart's second run, on 2 cores


def command_run(folder: Path) -> dict[str, Any]:
    """Run ``ultron run job.yaml`` in ``folder``; its wall and CPU seconds, the load as it
    started, how many trials the cache answered and whether its workers started."""
    load = os.getloadavg()[0]
    _, wall, cpu = timed_ultron_run(["job.yaml"], cwd=folder)
    latest = max((folder / "ultron-runs").iterdir(), key=lambda p: p.stat().st_mtime)
    best = json.loads((latest / "best.json").read_text())
    trials = json.loads((latest / "trials.json").read_text())
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "load": load,
        "trials": len(trials),
        "cached": sum(1 for t in trials if t.get("status") == "cached"),
        "workers": "start_workers" in best.get("timings", {}),
    }


def summary(runs: list[dict[str, Any]]) -> str:
    """Best and median wall and CPU time of the cached runs, and the verdict on the target."""
    if not runs:
        raise ValueError("no runs to summarize: --runs must be at least 1")
    wall = sorted(r["wall_s"] for r in runs)
    cpu = sorted(r["cpu_s"] for r in runs)
    loads = [r["load"] for r in runs]
    median = wall[len(wall) // 2]
    verdict = "met" if median <= TARGET_S else "not met"
    started = sum(r["workers"] for r in runs)
    return "\n".join(
        [
            f"over {len(runs)} cached run(s) ({os.cpu_count()} CPU cores), load average "
            f"{min(loads):.1f}-{max(loads):.1f}: best / median",
            f"whole command  wall {wall[0]:.2f} / {median:.2f} s   cpu {cpu[0]:.2f} / "
            f"{cpu[len(cpu) // 2]:.2f} s",
            f"runs that started workers: {started}",
            f"issue 30's target, at most {TARGET_S:g} s (median, 2 cores): {verdict}",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="cached runs after the first")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ultron-cached-job-")) / "quickstart"
    shutil.copytree(QUICKSTART, folder, ignore=shutil.ignore_patterns("ultron-runs"))
    first = command_run(folder)
    print(
        f"first run: {first['wall_s']:.2f} s ({first['cached']} of {first['trials']} trials "
        "from the cache)"
    )
    runs = []
    for index in range(1, args.runs + 1):
        runs.append(command_run(folder))
        run = runs[-1]
        print(
            f"run {index}: wall {run['wall_s']:.2f} s  cpu {run['cpu_s']:.2f} s  load "
            f"{run['load']:.1f}  {run['cached']} cached  workers started: {run['workers']}"
        )
    print()
    print(summary(runs))


if __name__ == "__main__":
    main()
