"""HyperDrive's baselines as stoppers: Bandit (action elimination) and EarlyTerm (Domhan et al.).

Each test feeds reports straight to the stopper and checks its decisions against the paper's rule.
"""

from __future__ import annotations

import json
import math

import pytest

from ultron.algorithms.stoppers import Bandit, Decision, EarlyTerm

CONTINUE, STOP = Decision.CONTINUE, Decision.STOP


def test_bandit_applies_the_rule_only_on_boundaries() -> None:
    bandit = Bandit(direction="maximize", max_resource=40, interval=10, epsilon=0.5)
    assert bandit.on_report("best", 10, 0.9) is CONTINUE
    # 0.5 * 1.5 = 0.75 < 0.9: eliminated on the boundary, but not between boundaries.
    assert bandit.on_report("poor", 5, 0.5) is CONTINUE
    assert bandit.on_report("poor", 10, 0.5) is STOP
    # 0.61 * 1.5 = 0.915 >= 0.9: within the slack.
    assert bandit.on_report("close", 10, 0.61) is CONTINUE
    # its best so far counts, not its last value
    assert bandit.on_report("close", 15, 0.1) is CONTINUE
    assert bandit.on_report("close", 20, 0.1) is CONTINUE
    assert bandit.on_report("close", 40, 0.95) is STOP  # the last step ends any trial


def test_bandit_minimize_and_failures() -> None:
    bandit = Bandit(direction="minimize", max_resource=20, interval=5, min_resource=5)
    assert bandit.on_report("a", 5, 1.0) is CONTINUE
    assert bandit.on_report("b", 5, 1.9) is CONTINUE  # 1.9 <= 1.0 / (1 - 0.5)
    assert bandit.on_report("c", 5, 2.1) is STOP
    assert bandit.on_report("d", 5, math.nan) is STOP  # a failed report is the worst loss


def test_bandit_state_round_trip() -> None:
    bandit = Bandit(direction="maximize", max_resource=30, interval=10)
    bandit.on_report("a", 10, 0.9)
    copy = Bandit(direction="maximize", max_resource=30, interval=10)
    copy.load_state_dict(json.loads(json.dumps(bandit.state_dict())))
    assert copy.on_report("b", 10, 0.5) is STOP


@pytest.mark.parametrize("bad", [{"epsilon": 1.0}, {"epsilon": -0.1}, {"interval": 0}])
def test_bandit_rejects_bad_options(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Bandit(max_resource=10, **bad)


def _good(step: int) -> float:
    return 0.9 - 0.5 * step**-0.5


def test_earlyterm_stops_a_curve_that_cannot_catch_up() -> None:
    stopper = EarlyTerm(direction="maximize", max_resource=50, interval=5, seed=0)
    for step in range(1, 51):
        stopper.on_report("good", step, _good(step))
    flat = [stopper.on_report("flat", step, 0.3 + 0.001 * step) for step in range(1, 11)]
    assert flat[:4] == [CONTINUE] * 4  # not on a boundary (5, 10, ...)
    assert flat[4] is STOP


def test_earlyterm_keeps_a_curve_likely_to_beat_the_best() -> None:
    stopper = EarlyTerm(direction="maximize", max_resource=50, interval=5, seed=0)
    for step in range(1, 51):
        stopper.on_report("fair", step, 0.6 - 0.3 * step**-0.5)
    # rises fast and is still rising at step 10: well past 0.6 by step 50
    steep = [stopper.on_report("steep", s, 0.95 - 0.7 * s**-0.7) for s in range(1, 11)]
    assert steep == [CONTINUE] * 10
    assert stopper.probability("steep", 0.6) > stopper.delta


def test_earlyterm_needs_a_best_and_three_points() -> None:
    stopper = EarlyTerm(direction="minimize", max_resource=30, interval=1, seed=0)
    assert stopper.on_report("first", 1, 5.0) is CONTINUE  # nothing to beat yet
    assert stopper.on_report("first", 2, 4.0) is CONTINUE
    assert stopper.on_report("second", 1, 9.0) is CONTINUE  # one point: no curve yet
    assert stopper.on_report("second", 2, 9.0) is CONTINUE


def test_earlyterm_state_round_trip_continues_identically() -> None:
    def fed() -> EarlyTerm:
        stopper = EarlyTerm(direction="maximize", max_resource=40, interval=4, seed=3)
        for step in range(1, 41):
            stopper.on_report("good", step, _good(step))
        for step in range(1, 4):
            stopper.on_report("other", step, 0.5 + 0.01 * step)
        return stopper

    first = fed()
    copy = EarlyTerm(direction="maximize", max_resource=40, interval=4, seed=99)
    copy.load_state_dict(json.loads(json.dumps(first.state_dict())))
    assert copy.probability("other", 0.8) == first.probability("other", 0.8)
    assert copy.on_report("other", 4, 0.54) is first.on_report("other", 4, 0.54)
