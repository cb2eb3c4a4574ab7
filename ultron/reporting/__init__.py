"""Reports people look at: HTML pages and PNG plots of jobs, experiments and benchmark runs.

Pure: it takes trial tables and gives files (it writes them through fsspec when asked);
matplotlib (the ``report`` extra) is imported only when a plot is drawn.
"""

from __future__ import annotations

from ultron.reporting.benchmark_report import ProblemRuns, benchmark_html
from ultron.reporting.compare import Regression, find_regressions
from ultron.reporting.experiment_report import experiment_files, summary_rows
from ultron.reporting.files import JobFiles, read_job, read_json, write_files
from ultron.reporting.job_report import REPORT_FILE, job_report_html, write_job_report
from ultron.reporting.plots import ReportingUnavailable
from ultron.reporting.runs import (
    SeedRun,
    StrategySummary,
    best_so_far,
    run_from_trials,
    summarize,
)

__all__ = [
    "REPORT_FILE",
    "JobFiles",
    "ProblemRuns",
    "Regression",
    "ReportingUnavailable",
    "SeedRun",
    "StrategySummary",
    "benchmark_html",
    "best_so_far",
    "experiment_files",
    "find_regressions",
    "job_report_html",
    "read_job",
    "read_json",
    "run_from_trials",
    "summarize",
    "summary_rows",
    "write_files",
    "write_job_report",
]
