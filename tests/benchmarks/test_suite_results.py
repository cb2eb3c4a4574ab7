"""benchmarks.suite_results' parts: each its worker counts and seeds, a bad one refused."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def results(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.suite_results`` from the checkout (not installed)."""
    monkeypatch.syspath_prepend(str(REPO))
    import benchmarks.suite_results

    return benchmarks.suite_results


def test_a_part_is_worker_counts_and_seeds(results: ModuleType) -> None:
    assert results._part("64,256:1") == ([64, 256], 1)
    assert results._part("8:3") == ([8], 3)


@pytest.mark.parametrize("bad", ["64,256", "8:x", "0:3", "8:0"])
def test_a_bad_part_is_refused_with_its_value_and_the_form(
    results: ModuleType, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        results.main(["--part", bad])
    assert stop.value.code == 2
    assert repr(bad) in capsys.readouterr().err
