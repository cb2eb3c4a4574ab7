"""pop_variants runs the suite's own stoppers with options on top: no options build the suite's
stopper, an option overrides that one setting and keeps the rest. No surrogate needed: the
stoppers are compared as built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _benchmarks_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))  # the benchmarks package runs from the checkout


def _settings(stopper: Any) -> dict[str, Any]:
    """What a stopper was built with (its state, less the generator and the clock)."""
    skip = {"rng", "clock", "_model", "_partial", "_seen"}
    out = {k: v for k, v in vars(stopper).items() if k not in skip and not callable(v)}
    if hasattr(stopper, "_partial"):
        out["partial"] = None if stopper._partial is None else stopper._partial.quantile
    return out


@pytest.mark.parametrize("method", ["POP (ours)", "Bandit", "EarlyTerm"])
def test_options_override_one_setting_of_the_suite_stopper(method: str) -> None:
    from benchmarks import lcbench
    from benchmarks.pop_variants import METHODS
    from benchmarks.suite_job import method as suite_method
    from ultron.simulation.benchmark import SimulatedClock

    assert method in METHODS
    clock = SimulatedClock()
    _, suite_stopper = suite_method(method, 8, 0, clock, 90.0)
    _, same = suite_method(method, 8, 0, clock, 90.0, {})
    _, other = suite_method(method, 8, 0, clock, 90.0, {"interval": lcbench.INTERVAL + 2})
    assert type(same) is type(other) is type(suite_stopper)
    assert _settings(same) == _settings(suite_stopper)
    changed = {k for k, v in _settings(other).items() if _settings(suite_stopper)[k] != v}
    assert "interval" in changed and other.interval == lcbench.INTERVAL + 2
