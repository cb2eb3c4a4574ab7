"""Earlier configurations fitted into a new space (kept, projected, dropped), and every
built-in strategy told them before it proposes anything."""

from __future__ import annotations

import math

import pytest

from ultron.algorithms.base import Direction
from ultron.algorithms.registry import BUILTIN_STRATEGIES, resolve_strategy
from ultron.algorithms.space import Choice, IntRange, LogUniform, SearchSpace, Uniform, canonical
from ultron.algorithms.warm_start import Fit, project

SPACE = SearchSpace(
    {
        "lr": LogUniform(1e-4, 1e-1),
        "hidden": IntRange(16, 128),
        "dropout": Uniform(0.0, 0.4),
        "optimizer": Choice(("adam", "sgd")),
    }
)
INSIDE = {"lr": 0.01, "hidden": 64, "dropout": 0.1, "optimizer": "adam"}


def test_a_configuration_inside_the_space_is_kept_as_it_is() -> None:
    fitted = project(INSIDE, SPACE)
    assert (fitted.config, fitted.fit, fitted.why) == (INSIDE, Fit.KEPT, "")


@pytest.mark.parametrize(
    ("change", "expected", "why"),
    [
        ({"lr": 0.5}, {"lr": 0.1}, "lr clipped 0.5 -> 0.1"),
        ({"lr": 1e-6}, {"lr": 1e-4}, "lr clipped 1e-06 -> 0.0001"),
        ({"hidden": 300}, {"hidden": 128}, "hidden clipped 300 -> 128"),
        ({"hidden": 8.0}, {"hidden": 16}, "hidden clipped 8.0 -> 16"),
        ({"hidden": 40.4}, {"hidden": 40}, "hidden rounded 40.4 -> 40"),
        ({"dropout": -0.2}, {"dropout": 0.0}, "dropout clipped -0.2 -> 0.0"),
    ],
)
def test_a_number_outside_its_domain_is_clipped_into_bounds(
    change: dict[str, float], expected: dict[str, float], why: str
) -> None:
    fitted = project({**INSIDE, **change}, SPACE)
    assert fitted.fit is Fit.PROJECTED and fitted.why == why
    assert fitted.config == {**INSIDE, **expected} and SPACE.contains(fitted.config)


def test_a_parameter_the_space_lost_is_left_out_and_an_integral_float_is_an_int() -> None:
    fitted = project({**INSIDE, "hidden": 64.0, "momentum": 0.9}, SPACE)
    assert fitted.fit is Fit.PROJECTED and fitted.why == "left out momentum (not in this space)"
    assert fitted.config == INSIDE and isinstance(fitted.config["hidden"], int)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({**INSIDE, "optimizer": "rmsprop"}, "optimizer 'rmsprop' is not among its choices"),
        ({k: v for k, v in INSIDE.items() if k != "dropout"}, "it has no value for dropout"),
        ({**INSIDE, "lr": "fast"}, "lr 'fast' is not a finite number"),
        ({**INSIDE, "lr": math.nan}, "lr nan is not a finite number"),
        ({**INSIDE, "hidden": True}, "hidden True is not a finite number"),
    ],
)
def test_what_cannot_fit_is_dropped_with_its_reason(config: dict[str, object], why: str) -> None:
    fitted = project(config, SPACE)
    assert (fitted.config, fitted.fit, fitted.why) == (None, Fit.DROPPED, why)


PRIOR = [
    {"lr": 0.01, "hidden": 64, "dropout": 0.1, "optimizer": "adam"},
    {"lr": 0.001, "hidden": 32, "dropout": 0.3, "optimizer": "sgd"},
    {"lr": 0.05, "hidden": 100, "dropout": 0.0, "optimizer": "adam"},
]


# cmaes and gp take observations by the same code as tpe (OptunaSearch._tell, Optuna's
# add_trial); left out here because building them costs seconds each (torch, cmaes imports).
@pytest.mark.parametrize("name", sorted(set(BUILTIN_STRATEGIES) - {"cmaes", "gp"}))
def test_every_builtin_takes_observations_before_it_proposes(name: str) -> None:
    # A warm start's single update before the first sample: no error, and what it proposes
    # next is inside the space and is none of the told configurations.
    options = {"points": 2} if name == "grid" else {}
    strategy = resolve_strategy(name)(
        search_space=SPACE, seed=0, direction=Direction.MAXIMIZE, **options
    )
    strategy.update_state(PRIOR, [0.9, 0.5, math.nan])
    proposed = strategy.sample_hyperparameter_candidates(4)
    assert proposed and all(SPACE.contains(c) for c in proposed)
    assert not {canonical(c) for c in proposed} & {canonical(c) for c in PRIOR}


def test_grid_search_skips_the_points_it_was_told() -> None:
    space = SearchSpace({"x": Choice((1, 2, 3)), "y": Choice(("a", "b"))})
    grid = resolve_strategy("grid")(search_space=space)
    grid.update_state([{"x": 1, "y": "b"}, {"x": 3, "y": "a"}], [0.5, 0.7])
    assert grid.sample_hyperparameter_candidates(10) == [
        {"x": 1, "y": "a"},
        {"x": 2, "y": "a"},
        {"x": 2, "y": "b"},
        {"x": 3, "y": "b"},
    ]
    again = resolve_strategy("grid")(search_space=space)
    again.load_state_dict(grid.state_dict())
    assert again.sample_hyperparameter_candidates(10) == []


def test_evolution_mutates_the_told_population_at_once() -> None:
    # Told a full population before proposing, evolution skips its random start: every
    # proposal is a mutant of a told member (one or a few values changed).
    space = SearchSpace({f"x{i}": Uniform(0.0, 1.0) for i in range(6)})
    prior = [{f"x{i}": 0.5 for i in range(6)} for _ in range(4)]
    evolution = resolve_strategy("evolution")(
        search_space=space, seed=1, population_size=4, sample_size=2
    )
    evolution.update_state(prior, [1.0, 2.0, 3.0, 4.0])
    for child in evolution.sample_hyperparameter_candidates(5):
        assert sum(value == 0.5 for value in child.values()) >= 2  # a mutant, not a random draw


def test_a_conditional_space_takes_the_active_parameters_of_an_earlier_configuration() -> None:
    from ultron.algorithms.space import Choice, Conditional, IntRange, Repeated, Uniform

    space = SearchSpace(
        {
            "optimizer": Choice(("sgd", "adam")),
            "momentum": Conditional(Uniform(0.0, 0.9), {"optimizer": "sgd"}),
            "layers": Repeated(1, 2, {"width": IntRange(8, 64)}),
        }
    )
    adam = project({"optimizer": "adam", "layers": [{"width": 16}]}, space)
    assert adam.fit == Fit.KEPT and adam.config == {"optimizer": "adam", "layers": [{"width": 16}]}
    # momentum is inactive under adam: left out; three layers clipped to two.
    old = {"optimizer": "adam", "momentum": 0.5, "layers": [{"width": 8}] * 2 + [{"width": 99}]}
    fitted = project(old, space)
    assert fitted.fit == Fit.PROJECTED and space.contains(fitted.config)
    assert fitted.config == {"optimizer": "adam", "layers": [{"width": 8}, {"width": 8}]}
    assert "layers clipped 3 -> 2" in fitted.why and "momentum (inactive here)" in fitted.why
    # Under sgd momentum is active: a configuration without it cannot be told.
    assert project({"optimizer": "sgd", "layers": [{"width": 8}]}, space).fit == Fit.DROPPED
