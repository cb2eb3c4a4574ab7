"""finalize writes the job's HTML report (a fully cached job's without its plots: `ultron report`
draws them), and a missing matplotlib never fails a job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prefect import flow
from typer.testing import CliRunner

from ultron.algorithms.base import Direction
from ultron.cli.main import app
from ultron.master.job_state import JobState, JobStatus
from ultron.master.results import write_results
from ultron.spec.job import JobSpec
from ultron.tasks.finalize import _report
from ultron.trial_records import TrialResult, TrialStatus

pytestmark = pytest.mark.usefixtures("prefect")


def _state(status: TrialStatus = TrialStatus.COMPLETED) -> JobState:
    trials = [TrialResult(f"{i:04d}", {"lr": 0.1 * i}, status, score=i / 10) for i in range(1, 4)]
    return JobState("job-r", status=JobStatus.COMPLETED, trials=trials)


@flow
def _write(folder: str, status: TrialStatus = TrialStatus.COMPLETED) -> dict[str, str]:
    spec = JobSpec.model_validate(
        {"code": ".", "model": "pkg.m:Model", "search_space": {"lr": [0.1]}},
        context={"check_paths": False},
    )
    return _report(spec, "job-r", folder, _state(status))


def test_report_written_and_missing_matplotlib_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _write(str(tmp_path / "a"))
    # The best score so far and the score against lr (no reports: no learning curves).
    assert Path(files["report.html"]).read_text().count("data:image/png;base64,") == 2
    # As if matplotlib were not installed (a None entry makes its import fail).
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert _write(str(tmp_path / "b")) == {}
    assert not (tmp_path / "b" / "report.html").exists()


def test_a_job_whose_every_trial_came_from_the_cache_gets_its_plots_on_demand(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "job-r"
    page = Path(_write(str(folder), TrialStatus.CACHED)["report.html"])
    assert "<img" not in page.read_text()
    assert "`ultron report job-r` draws them" in page.read_text()
    # `ultron report` draws them from the job's result files (finalize writes them first).
    write_results(
        str(folder),
        trials=_state(TrialStatus.CACHED).trials,
        curves={},
        direction=Direction.MAXIMIZE,
        metric="score",
        extra={"job_id": "job-r", "status": "completed"},
    )
    done = CliRunner().invoke(app, ["report", "job-r", "--storage", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert page.read_text().count("data:image/png;base64,") == 2
