"""The HTML report of one job: its leaderboard, best configuration, best score so far, learning
curves (from ``ultron.report``) and the score against each hyper-parameter; with several
objectives, the Pareto front (a plot of the first two, and a table); with constraints, which
trials are feasible; with population-based training, each trial's lineage.

Written by ``finalize`` beside the job's result files (``report.html``), and by
``ultron report JOB`` for a job that ended before. A job whose every trial came from the score
cache gets its tables from ``finalize`` and a line in place of the plots: drawing them
(matplotlib) cost more than the rest of such a job together, and ``ultron report JOB`` draws
them from the same result files when they are wanted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import Bound, Goal
from ultron.algorithms.space import canonical
from ultron.master.pareto import is_feasible, pareto_trials
from ultron.master.results import best_trial, leaderboard
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
    goals: Sequence[Goal] = (),
    bounds: Sequence[Bound] = (),
    plots_note: str | None = None,
) -> str:
    """The report's page; ``goals`` (several objectives) and ``bounds`` (constraints) add the
    Pareto front and feasibility. With ``plots_note`` no figure is drawn: the note stands in
    their place (the tables are the same).

    Raises:
        ReportingUnavailable: matplotlib is not installed (the ``report`` extra), and plots
            were asked for.
    """
    ordered = sorted(trials, key=lambda t: t.trial_id)
    board = leaderboard(ordered, direction, goals=goals, bounds=bounds)
    best = best_trial(ordered, direction, goals=goals, bounds=bounds)
    page = Page(f"HPO job {title}")
    page.paragraph(
        f"{status + ': ' if status else ''}{len(ordered)} trials, {len(board)} scored; "
        f"objective: {direction} {metric}."
    )
    named = [g.metric for g in goals] + [b.metric for b in bounds]
    page.heading("Best configuration" + (" (feasible)" if bounds else ""))
    if best is not None:
        extra = {m: best.metrics.get(m) for m in named}
        page.table([{"trial": best.trial_id, metric: best.score, **extra, **best.hyperparameters}])
    else:
        page.paragraph("No trial produced a score" + (" within the constraints." if board else "."))
    if len(goals) > 1:
        _pareto_section(page, ordered, goals, bounds, plot=plots_note is None)
    page.heading(f"Leaderboard (top {_TOP})")
    page.table(
        [
            {"rank": rank, "trial": t.trial_id, metric: t.score}
            | {m: t.metrics.get(m) for m in named}
            | ({"feasible": is_feasible(t, bounds)} if bounds else {})
            | {"status": str(t.status)}
            | t.hyperparameters
            for rank, t in enumerate(board[:_TOP], 1)
        ]
    )
    if plots_note is not None:
        _lineage(page, ordered)
        page.heading("Plots")
        page.paragraph(plots_note)
        return page.render()
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


def _pareto_section(
    page: Page,
    trials: Sequence[TrialResult],
    goals: Sequence[Goal],
    bounds: Sequence[Bound],
    *,
    plot: bool = True,
) -> None:
    """The Pareto front: a plot of the first two objectives (with ``plot``), and the front's
    table."""
    front = pareto_trials(trials, goals, bounds)
    page.heading(f"Pareto front ({len(front)} trials)")
    first, second = goals[0], goals[1]
    scored = [
        t
        for t in trials
        if t.status.ok and all(isinstance(t.metrics.get(g.metric), int | float) for g in goals)
    ]
    if len(goals) > 2 and plot:
        page.paragraph(f"The plot shows {first.metric} and {second.metric}, the first two.")
    ids = {t.trial_id for t in front}
    if scored and plot:
        page.image(
            plots.pareto_front(
                [(t.metrics[first.metric], t.metrics[second.metric]) for t in scored],
                front=[t.trial_id in ids for t in scored],
                feasible=[is_feasible(t, bounds) for t in scored],
                names=(first.metric, second.metric),
                directions=(first.direction, second.direction),
            ),
            "Pareto front",
        )
    page.table(
        [
            {"trial": t.trial_id}
            | {g.metric: t.metrics[g.metric] for g in goals}
            | t.hyperparameters
            for t in sorted(front, key=lambda t: first.loss(t.metrics[first.metric]))
        ]
    )


def _curve_metric(curves: Mapping[str, Sequence[Mapping[str, Any]]], metric: str) -> str:
    """The objective when the reports hold it, else the first metric they report."""
    keys = [k for reports in curves.values() for r in reports for k in r]
    if metric in keys:
        return metric
    others = [k for k in keys if k not in ("step", "time", "trial_id")]
    return others[0] if others else metric


def write_job_report(
    job: JobFiles, *, title: str | None = None, plots_note: str | None = None
) -> str:
    """Write ``report.html`` beside the job's result files; returns its path or URL. With
    ``plots_note``, the page has the note in place of the plots (no matplotlib)."""
    text = job_report_html(
        title or str(job.best.get("job_id", job.url)),
        job.trials,
        job.curves,
        direction=job.direction,
        metric=job.metric,
        status=str(job.best.get("status", "")),
        goals=job.goals,
        bounds=job.bounds,
        plots_note=plots_note,
    )
    return write_files(job.url, {REPORT_FILE: text})[REPORT_FILE]
