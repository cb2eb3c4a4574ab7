"""pop_variants builds the suite's stoppers: with options that change nothing, the same stopper.

Its copy of the suite factories' arguments (``benchmarks/lcbench.py``) must not drift from them,
or every attempt it records is measured against another POP, Bandit or EarlyTerm. No surrogate
needed: the stoppers are compared as built.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def variants(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks.pop_variants`` from the checkout (not installed)."""
    monkeypatch.syspath_prepend(str(REPO))
    import benchmarks.pop_variants

    return benchmarks.pop_variants


def _settings(stopper: Any) -> dict[str, Any]:
    """What a stopper was built with (its state, less the generator and the clock)."""
    skip = {"rng", "clock", "_model", "_partial", "_seen"}
    out = {k: v for k, v in vars(stopper).items() if k not in skip and not callable(v)}
    if hasattr(stopper, "_partial"):
        out["partial"] = None if stopper._partial is None else stopper._partial.quantile
    return out


@pytest.mark.parametrize("method", ["POP (ours)", "Bandit", "EarlyTerm"])
def test_a_variant_with_the_suite_grid_is_the_suite_stopper(
    variants: ModuleType, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmarks import lcbench
    from ultron.simulation.benchmark import SimulatedClock

    factory = getattr(lcbench, variants._FACTORIES[method])
    clock = SimulatedClock()
    suite_stopper = factory(8, clock, 90.0)
    # An option equal to the suite's own value: the variant is built from its copy of the
    # factory's arguments rather than by the factory.
    monkeypatch.setattr(variants, "_OPTIONS", {"interval": lcbench.INTERVAL})
    variant = variants._variant(method)(8, clock, 90.0)
    assert type(variant) is type(suite_stopper)
    assert _settings(variant) == _settings(suite_stopper)
