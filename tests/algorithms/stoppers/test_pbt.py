"""Population-based training's decisions: who is replaced, by whom, when, and with what."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ultron.algorithms.space import Choice, IntRange, LogUniform, SearchSpace, Uniform
from ultron.algorithms.stoppers.base import Decision
from ultron.algorithms.stoppers.pbt import PBT, explore

SPACE = SearchSpace({"lr": LogUniform(1e-4, 1.0), "act": Choice(("relu", "tanh"))})


def _population(values: dict[str, float], **options: object) -> PBT:
    """A population that reported ``values`` at its first boundary (step 2 of 6)."""
    pbt = PBT(max_resource=6, interval=2, population=len(values), search_space=SPACE, **options)  # type: ignore[arg-type]
    for t in values:
        pbt.on_trial_start(t)
        pbt.on_trial_config(t, {"lr": 0.01, "act": "relu"})
    for t, v in values.items():
        assert pbt.on_report(t, 1, v) is Decision.CONTINUE
    for t, v in values.items():
        assert pbt.on_report(t, 2, v) is Decision.SUSPEND
    return pbt


def test_nothing_is_decided_while_a_member_runs_towards_the_boundary() -> None:
    pbt = PBT(max_resource=6, interval=2, population=3, search_space=SPACE)
    for t in "abc":
        pbt.on_trial_start(t)
        pbt.on_report(t, 1, 1.0)
    pbt.on_report("a", 2, 1.0)
    pbt.on_report("b", 2, 2.0)
    assert pbt.poll(free_slots=2, can_start_new=False) == []
    pbt.on_report("c", 2, 3.0)
    assert {c.trial_id for c in pbt.poll(free_slots=3, can_start_new=False)} >= {"c"}


def test_the_bottom_quantile_copies_the_top_and_the_copies_come_first() -> None:
    # Minimizing: a and b are the worst two of eight (quantile 0.25), g and h the best two.
    values = dict(zip("abcdefgh", (9.0, 8.0, 5.0, 5.0, 4.0, 3.0, 1.0, 2.0), strict=True))
    pbt = _population(values, seed=3)
    first = pbt.poll(free_slots=8, can_start_new=False)
    assert {c.trial_id for c in first} == set("abcdefgh")
    assert [c.trial_id for c in first[:2]] == ["a", "b"]  # exploits first
    exploits = {c.trial_id: c.source for c in first if c.source is not None}
    assert set(exploits) == {"a", "b"} and set(exploits.values()) <= {"g", "h"}
    for c in first[:2]:
        assert c.config is not None and SPACE.contains(c.config)
    assert all(c.config is None for c in first[2:])
    lineage = pbt.lineage("a")
    assert lineage[0]["step"] == 2 and lineage[0]["from"] == exploits["a"]
    assert lineage[0]["value"] == 9.0 and lineage[0]["config_before"]["lr"] == 0.01
    assert lineage[0]["config_after"] == first[0].config
    assert pbt.lineage("c") == []


def test_a_member_that_ends_early_leaves_the_round_to_the_others() -> None:
    pbt = PBT(max_resource=6, interval=2, population=3, search_space=SPACE, direction="maximize")
    for t in "abc":
        pbt.on_trial_start(t)
        pbt.on_trial_config(t, {"lr": 0.01, "act": "relu"})
    pbt.on_report("a", 2, 1.0)
    pbt.on_report("b", 2, 2.0)
    assert pbt.poll(free_slots=3, can_start_new=False) == []  # c still runs towards step 2
    pbt.on_trial_complete("c")  # it failed
    commands = pbt.poll(free_slots=3, can_start_new=False)
    assert [(c.trial_id, c.source) for c in commands] == [("a", "b"), ("b", None)]


def test_resumes_wait_for_free_slots_and_the_last_step_stops() -> None:
    pbt = _population({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
    assert len(pbt.poll(free_slots=1, can_start_new=False)) == 1
    assert len(pbt.poll(free_slots=5, can_start_new=False)) == 3
    assert pbt.on_report("a", 6, 0.5) is Decision.STOP


def test_state_round_trip_gives_the_same_decisions() -> None:
    values = dict(zip("abcdefgh", range(8), strict=True))
    one, two = _population(values, seed=7), _population(values, seed=7)
    copy = PBT(max_resource=6, interval=2, population=8, search_space=SPACE, seed=99)
    copy.load_state_dict(json.loads(json.dumps(one.state_dict())))
    assert copy.poll(free_slots=8, can_start_new=False) == two.poll(
        free_slots=8, can_start_new=False
    )


def test_explore_perturbs_within_bounds_and_resamples_with_its_probability() -> None:
    space = SearchSpace(
        {"x": Uniform(0.0, 1.0), "n": IntRange(1, 10), "c": Choice(("a", "b", "c"))}
    )
    rng = np.random.default_rng(0)
    kept = [
        explore({"x": 0.95, "n": 10, "c": "a", "other": 1}, space, rng, resample_probability=0.0)
        for _ in range(50)
    ]
    assert {k["x"] for k in kept} == {0.76, 1.0}  # 0.95 * 0.8, and 0.95 * 1.2 clipped
    assert {k["n"] for k in kept} == {8, 10}
    assert {k["c"] for k in kept} == {"a"} and {k["other"] for k in kept} == {1}
    drawn = [
        explore({"x": 0.5, "n": 5, "c": "a"}, space, rng, resample_probability=1.0)
        for _ in range(50)
    ]
    assert len({d["c"] for d in drawn}) == 3 and all(space.contains(d) for d in drawn)


@pytest.mark.parametrize(
    "options",
    [{"interval": 6}, {"interval": 0}, {"population": 1}, {"quantile": 0.6}, {"quantile": 0.0}],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    kwargs = {"max_resource": 6, "population": 4, "search_space": SPACE, **options}
    with pytest.raises(ValueError, match=next(iter(options))):
        PBT(**kwargs)  # type: ignore[arg-type]
