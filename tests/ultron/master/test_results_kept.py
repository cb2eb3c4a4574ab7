"""The job's result files are never overwritten with a poorer record (issue 31 item 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ultron.algorithms.base import Direction
from ultron.errors import SpecError, UltronError
from ultron.master.results import check_no_foreign_results, write_results
from ultron.trial_records import TrialResult, TrialStatus


def _trials(*ids: str) -> list[TrialResult]:
    return [TrialResult(i, {"x": 1.0}, TrialStatus.COMPLETED, score=float(i)) for i in ids]


def _write(url: str, trials: list[TrialResult]) -> dict[str, str]:
    return write_results(
        url, trials=trials, curves={}, direction=Direction.MINIMIZE, metric="loss", extra={}
    )


def test_a_table_that_lacks_written_trials_leaves_the_files_as_they_are(tmp_path: Path) -> None:
    url = str(tmp_path / "runs" / "job-1")
    files = _write(url, _trials("0000", "0001"))
    before = {name: Path(path).read_text() for name, path in files.items()}
    _write(url, _trials("0000", "0001", "0002"))  # a resumed job's table grows: written
    grown = {name: Path(path).read_text() for name, path in files.items()}
    assert grown != before
    with pytest.raises(UltronError, match=r"hold trials this job's table lacks \(0001, 0002\)"):
        _write(url, _trials("0000"))
    assert {name: Path(path).read_text() for name, path in files.items()} == grown


def test_a_first_run_over_results_of_its_id_is_refused(tmp_path: Path) -> None:
    url = str(tmp_path / "runs" / "job-1")
    check_no_foreign_results(url, "job-1")  # nothing there: a first run may go
    _write(url, _trials("0000"))
    with pytest.raises(SpecError) as refused:
        check_no_foreign_results(url, "job-1")
    assert refused.value.issues[0].field == "job_id"
    assert url in str(refused.value) and "Fix: run with the Redis that ran the job" in str(
        refused.value
    )
