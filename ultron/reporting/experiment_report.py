"""An experiment's report: the best score per strategy over seeded jobs (mean, standard
deviation, every seed), and the best score so far against trials and against wall time.

:func:`experiment_files` builds every file of the report (``summary.json``, ``summary.csv``,
two PNG plots and a self-contained ``report.html``); the caller writes them where it likes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

from ultron import strict_json
from ultron.algorithms.base import Direction
from ultron.reporting import plots
from ultron.reporting.html import Page
from ultron.reporting.runs import SeedRun, StrategySummary, summarize

__all__ = ["experiment_files", "summary_rows"]


def summary_rows(summary: Sequence[StrategySummary]) -> list[dict[str, Any]]:
    """One row per strategy: seeds, mean, standard deviation and each seed's best score."""
    return [
        {
            "strategy": row.strategy,
            "seeds": len(row.best_by_seed),
            "mean": row.mean,
            "std": row.std,
            **{f"seed {seed}": best for seed, best in row.best_by_seed.items()},
        }
        for row in summary
    ]


def _csv(rows: Sequence[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def experiment_files(
    title: str,
    runs: Sequence[SeedRun],
    *,
    direction: Direction,
    metric: str,
    notes: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> dict[str, bytes | str]:
    """The report's files, name -> content.

    Args:
        title: the experiment's name.
        runs: one per seeded job.
        direction: whether higher or lower scores are better.
        metric: the objective's name.
        notes: lines shown at the top of the report (e.g. regressions).
        extra: more fields for ``summary.json``.

    Raises:
        ReportingUnavailable: matplotlib is not installed (the ``report`` extra).
    """
    summary = summarize(runs, direction)
    rows = summary_rows(summary)
    by_trials = plots.best_vs_trials(runs, direction, metric)
    by_time = plots.best_vs_time(runs, direction, metric)
    page = Page(title)
    for note in notes:
        page.paragraph(note, css="bad")
    page.paragraph(
        f"{len(runs)} jobs; objective: {direction} {metric}. The best score of each job, per "
        "strategy: mean and sample standard deviation over its seeds."
    )
    page.table(rows)
    page.heading("Best score so far against trials")
    page.image(by_trials, "best score so far against trials")
    page.heading("Best score so far against wall time")
    page.image(by_time, "best score so far against wall time")
    page.heading("Jobs")
    page.table(
        [
            {"strategy": r.strategy, "seed": r.seed, "job": r.job_id, "best": r.best(direction)}
            for r in runs
        ]
    )
    document = {
        "title": title,
        "metric": metric,
        "mode": str(direction),
        "summary": [row.to_dict() for row in summary],
        "runs": [run.to_dict() for run in runs],
        **(extra or {}),
    }
    return {
        "summary.json": strict_json.dumps(document, indent=2),
        "summary.csv": _csv(rows),
        "best_vs_trials.png": by_trials,
        "best_vs_time.png": by_time,
        "report.html": page.render(),
    }
