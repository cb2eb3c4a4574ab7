"""The HTML report of one job: its leaderboard, best configuration, best score so far, learning
curves (from ``ultron.report``), the score against each hyper-parameter and, with
population-based training, each trial's lineage.

Written by ``finalize`` beside the job's result files (``report.html``), and by
``ultron report JOB`` for a job that ended before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.space import canonical
from ultron.master.results import leaderboard
from ultron.reporting import plots
from ultron.reporting.files import JobFiles, write_files
from ultron.reporting.html import Page
from ultron.trial_records import TrialResult

__all__ = ["REPORT_FILE", "job_report_html", "write_job_report"]

REPORT_FILE = "report.html"
_TOP = 20


def job_report_html(
    title: str,
    trials: Sequence[TrialResult],
    curves: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    direction: Direction,
    metric: str,
    status: str = "",
) -> str:
    """The report's page.

    Raises:
        ReportingUnavailable: matplotlib is not installed (the ``report`` extra).
    """
    ordered = sorted(trials, key=lambda t: t.trial_id)
    board = leaderboard(ordered, direction)
    page = Page(f"HPO job {title}")
    page.paragraph(
        f"{status + ': ' if status else ''}{len(ordered)} trials, {len(board)} scored; "
        f"objective: {direction} {metric}."
    )
    page.heading("Best configuration")
    if board:
        best = board[0]
        page.table([{"trial": best.trial_id, metric: best.score, **best.hyperparameters}])
    else:
        page.paragraph("No trial produced a score.")
    page.heading(f"Leaderboard (top {_TOP})")
    page.table(
        [
            {"rank": rank, "trial": t.trial_id, metric: t.score, "status": str(t.status)}
            | t.hyperparameters
            for rank, t in enumerate(board[:_TOP], 1)
        ]
    )
    scores = [t.score if t.status.ok else None for t in ordered]
    page.heading("Best score so far")
    page.image(plots.job_best_so_far(scores, direction, metric), "best score so far")
    if any(curves.values()):
        page.heading("Learning curves")
        page.image(plots.learning_curves(curves, _curve_metric(curves, metric)), "curves")
    _lineage(page, ordered)
    if board:
        page.heading("Score against each hyper-parameter")
        configs = [t.hyperparameters for t in board]
        values = [float(t.score or 0.0) for t in board]
        page.image(plots.score_vs_hyperparameters(configs, values, metric), "score vs hp")
    return page.render()


def _lineage(page: Page, trials: Sequence[TrialResult]) -> None:
    """Population-based training: every exploit step, one row each (none: no section)."""
    rows = [
        {
            "trial": t.trial_id,
            "at step": step["step"],
            "copied trial": step["from"],
            "its value": step.get("value"),
            "copied's value": step.get("from_value"),
            "config before": canonical(step["config_before"]),
            "config after": canonical(step["config_after"]),
        }
        for t in trials
        for step in t.lineage
    ]
    if rows:
        page.heading("Lineage (population-based training)")
        page.paragraph(
            "Each row is an exploit: the trial took the copied trial's checkpoint and a "
            "perturbed copy of its configuration, and went on from there."
        )
        page.table(rows)


def _curve_metric(curves: Mapping[str, Sequence[Mapping[str, Any]]], metric: str) -> str:
    """The objective when the reports hold it, else the first metric they report."""
    keys = [k for reports in curves.values() for r in reports for k in r]
    if metric in keys:
        return metric
    others = [k for k in keys if k not in ("step", "time", "trial_id")]
    return others[0] if others else metric


def write_job_report(job: JobFiles, *, title: str | None = None) -> str:
    """Write ``report.html`` beside the job's result files; returns its path or URL."""
    text = job_report_html(
        title or str(job.best.get("job_id", job.url)),
        job.trials,
        job.curves,
        direction=job.direction,
        metric=job.metric,
        status=str(job.best.get("status", "")),
    )
    return write_files(job.url, {REPORT_FILE: text})[REPORT_FILE]
