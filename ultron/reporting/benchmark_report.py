"""A benchmark run's report: one experiment per problem, and the regressions against the
previous run, in one self-contained HTML page (plus each problem's own files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ultron.algorithms.base import Direction
from ultron.reporting.compare import Regression
from ultron.reporting.experiment_report import summary_rows
from ultron.reporting.html import Page
from ultron.reporting.runs import SeedRun, summarize

__all__ = ["ProblemRuns", "benchmark_html"]


@dataclass(frozen=True)
class ProblemRuns:
    """The seeded jobs of one benchmark problem, and its experiment's files
    (:func:`~ultron.reporting.experiment_report.experiment_files`)."""

    runs: Sequence[SeedRun]
    direction: Direction
    metric: str
    files: Mapping[str, bytes | str]


def benchmark_html(
    title: str,
    problems: Mapping[str, ProblemRuns],
    *,
    regressions: Sequence[Regression],
    previous: str | None,
    skipped: Mapping[str, str],
) -> str:
    """The page: regressions first, then each problem's table and plots."""
    page = Page(title)
    if previous is None:
        page.paragraph("No previous report: nothing to compare with.")
    elif regressions:
        page.paragraph(f"{len(regressions)} regression(s) against {previous}:", css="bad")
        for regression in regressions:
            page.paragraph(str(regression), css="bad")
    else:
        page.paragraph(f"No regression against {previous}.")
    for name, problem in problems.items():
        page.heading(f"{name}: best {problem.metric} ({problem.direction}) per strategy")
        page.table(summary_rows(summarize(problem.runs, problem.direction)))
        for plot in ("best_vs_trials.png", "best_vs_time.png"):
            image = problem.files[plot]
            page.image(image if isinstance(image, bytes) else image.encode(), f"{name} {plot}")
    for name, why in skipped.items():
        page.heading(f"{name}: skipped")
        page.paragraph(why)
    return page.render()
