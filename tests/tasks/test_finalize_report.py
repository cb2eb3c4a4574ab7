"""finalize writes the job's HTML report, and a missing matplotlib never fails a job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from prefect import flow

from ultron.master.job_state import JobState, JobStatus
from ultron.spec.job import JobSpec
from ultron.tasks.finalize import _report
from ultron.trial_records import TrialResult, TrialStatus

pytestmark = pytest.mark.usefixtures("prefect")


def _state() -> JobState:
    trials = [
        TrialResult(f"{i:04d}", {"lr": 0.1 * i}, TrialStatus.COMPLETED, score=i / 10)
        for i in range(1, 4)
    ]
    return JobState("job-r", status=JobStatus.COMPLETED, trials=trials)


@flow
def _write(folder: str) -> dict[str, str]:
    spec = JobSpec.model_validate(
        {"code": ".", "model": "pkg.m:Model", "search_space": {"lr": [0.1]}},
        context={"check_paths": False},
    )
    return _report(spec, "job-r", folder, _state())


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
