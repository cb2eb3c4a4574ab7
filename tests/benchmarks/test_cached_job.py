"""benchmarks/cached_job.py's summary (the real runs it times run by hand: see
benchmarks/RESULTS.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmarks package runs from the checkout


def test_the_summary_gives_best_and_median_and_the_verdict() -> None:
    from benchmarks.cached_job import summary

    runs = [
        {"wall_s": w, "cpu_s": w / 2, "load": load, "cached": 12, "workers": False}
        for w, load in ((4.0, 3.0), (2.0, 1.5), (2.5, 2.0))
    ]
    printed = summary(runs)
    assert "over 3 cached run(s)" in printed and "load average 1.5-3.0" in printed
    assert "wall 2.00 / 2.50 s   cpu 1.00 / 1.25 s" in printed
    assert "runs that started workers: 0" in printed
    assert printed.splitlines()[-1].endswith("(median, 2 cores): met")
    with pytest.raises(ValueError, match="at least 1"):
        summary([])
