"""``ultron report JOB`` and the experiment command's input errors (no job runs here)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ultron.cli.main import app
from ultron.trial_records import TrialResult, TrialStatus


def _finished_job(folder: Path) -> None:
    """The result files that finalize writes for a job of three trials."""
    folder.mkdir(parents=True)
    trials = [
        TrialResult(f"{i:04d}", {"lr": 10.0**-i}, TrialStatus.COMPLETED, score=i / 10)
        for i in range(1, 4)
    ]
    (folder / "trials.json").write_text(json.dumps([t.to_dict() for t in trials]))
    best = {"job_id": folder.name, "status": "completed", "metric": "loss", "mode": "minimize"}
    (folder / "best.json").write_text(json.dumps(best))


def test_report_writes_the_html_of_a_finished_job(tmp_path: Path) -> None:
    _finished_job(tmp_path / "runs" / "job-a")
    out = CliRunner().invoke(app, ["report", "job-a", "--storage", str(tmp_path / "runs")])
    assert out.exit_code == 0, out.output
    html = (tmp_path / "runs" / "job-a" / "report.html").read_text()
    assert "HPO job job-a" in html and html.count("data:image/png;base64,") == 2
    assert "0.1" in html  # the best loss, trial 0001's


def test_report_of_an_unknown_job_says_where_it_looked(tmp_path: Path, redis_url: str) -> None:
    # Bad input, exit 2, as `ultron status` and `ultron cancel` of an unknown job.
    out = CliRunner().invoke(app, ["report", "nosuch", "--storage", str(tmp_path)])
    assert out.exit_code == 2
    assert "no job results at" in out.output and "nosuch" in out.output
    assert "Traceback" not in out.output
    out = CliRunner().invoke(app, ["report", "nosuch-7", "--redis-url", redis_url])
    assert out.exit_code == 2
    assert "job 'nosuch-7' is not known to this Redis" in out.output
    assert "Traceback" not in out.output


def test_report_refuses_a_job_id_that_leaves_the_storage(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["report", "../x", "--storage", str(tmp_path)])
    assert out.exit_code == 2 and "job_id" in out.output
