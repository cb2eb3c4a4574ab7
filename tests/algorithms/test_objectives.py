"""Several objectives and constraints in the algorithms: dominance, the hypervolume, and the
Optuna samplers told metric dicts (failed trials, constraints, a state round-trip)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from ultron.algorithms.base import Direction
from ultron.algorithms.objectives import (
    Bound,
    Goal,
    dominates,
    feasible,
    hypervolume,
    nondominated_ranks,
    violation,
)
from ultron.algorithms.optuna_sampler import OptunaSearch
from ultron.algorithms.registry import resolve_strategy
from ultron.algorithms.space import (
    Choice,
    Conditional,
    IntRange,
    Repeated,
    SearchSpace,
    Uniform,
)

GOALS = (Goal("acc", Direction.MAXIMIZE), Goal("ms"))
MEMORY = (Bound("mb", high=2000.0),)
SPACE = SearchSpace({"w": Uniform(0.0, 1.0), "d": Uniform(0.0, 1.0)})


def metrics(config: dict[str, float]) -> dict[str, float]:
    w = config["w"]
    return {"acc": math.sqrt(w), "ms": 10 + 90 * w, "mb": 200 + 3000 * w}


def test_dominance_and_ranks() -> None:
    assert dominates((1, 1), (1, 2)) and not dominates((1, 2), (1, 2))
    assert not dominates((1, 3), (2, 1))
    assert nondominated_ranks([(3, 3), (1, 2), (2, 1), (2, 2), (1, 2)]) == [2, 0, 0, 1, 0]


def test_hypervolume_is_exact_in_two_and_three_losses() -> None:
    # Two points: 2x1 + 1x2 - the 1x1 overlap.
    assert hypervolume([(0, 1), (1, 0)], (2, 2)) == 3.0
    assert hypervolume([(0, 1), (1, 0), (1, 1), (5, -1)], (2, 2)) == 3.0  # dominated, outside
    assert hypervolume([], (1, 1)) == 0.0
    cube = hypervolume([(0, 0, 1), (0, 1, 0), (1, 0, 0)], (2, 2, 2))
    assert cube == 8 - 1 - 0  # 2^3 minus the corner [1,2]^3 that no point dominates


def test_bounds_judge_each_side_and_a_missing_metric_is_infeasible() -> None:
    both = (Bound("mb", low=100.0, high=2000.0),)
    assert feasible({"mb": 100.0}, both) and feasible({"mb": 2000.0}, both)
    assert violation({"mb": 2500.0}, both) == 500.0 and violation({"mb": 50.0}, both) == 50.0
    assert not feasible({}, both) and not feasible({"mb": math.nan}, both)


@pytest.mark.parametrize("name", ["nsga2", "nsga3", "motpe", "random", "grid"])
def test_several_objectives_round_trip_with_failures_and_constraints(name: str) -> None:
    def make() -> OptunaSearch:
        cls = resolve_strategy(name)
        return cls(SPACE, seed=3, objectives=GOALS, constraints=MEMORY)  # type: ignore[no-any-return]

    algo = make()
    for _ in range(4):
        batch = algo.sample_hyperparameter_candidates(3)
        # A failed trial is nan; one that lacks an objective's metric is failed too.
        algo.update_state(batch, [metrics(batch[0]), math.nan, {"acc": 0.5}])
    algo.update_state([{"w": 0.5, "d": 0.5}], [metrics({"w": 0.5})])  # never asked: recorded
    state = json.loads(json.dumps(algo.state_dict()))
    again = make()
    again.load_state_dict(state)
    assert again.sample_hyperparameter_candidates(2) == algo.sample_hyperparameter_candidates(2)


def test_constraint_values_reach_optunas_constrained_samplers() -> None:
    algo = OptunaSearch(SPACE, seed=0, sampler="nsga2", objectives=GOALS, constraints=MEMORY)
    batch = algo.sample_hyperparameter_candidates(2)
    algo.update_state(batch, [metrics({"w": 0.9}), metrics({"w": 0.1})])
    done = [t for t in algo._study.trials if t.state.name == "COMPLETE"]
    assert [t.system_attrs["constraints:0:mb:high"] for t in done] == pytest.approx([900, -1500])
    assert [t.values for t in done] == [[math.sqrt(0.9), 91.0], [math.sqrt(0.1), 19.0]]


def test_a_sampler_of_one_objective_refuses_several() -> None:
    with pytest.raises(ValueError, match="optimizes one objective"):
        OptunaSearch(SPACE, sampler="cmaes", objectives=GOALS)


CONDITIONAL = SearchSpace(
    {
        "optimizer": Choice(("adam", "sgd")),
        "momentum": Conditional(Uniform(0.0, 0.99), when={"optimizer": "sgd"}),
        "w": Uniform(0.0, 1.0),
        "layers": Repeated(1, 3, {"width": IntRange(8, 64)}),
    }
)


def _conditional_metrics(config: dict[str, Any]) -> dict[str, float]:
    widths = sum(layer["width"] for layer in config["layers"])
    acc = config["w"] + config.get("momentum", 0.0) + widths / 200
    return {"acc": acc, "ms": 10 + widths, "mb": 200 + 3000 * config["w"]}


@pytest.mark.parametrize(
    ("name", "options"),
    [("nsga2", {"population_size": 4}), ("motpe", {"n_startup_trials": 4})],
)
def test_several_objectives_in_a_conditional_space_ask_only_active_parameters(
    name: str, options: dict[str, Any]
) -> None:
    def make() -> OptunaSearch:
        cls = resolve_strategy(name)
        return cls(  # type: ignore[no-any-return]
            CONDITIONAL, seed=1, objectives=GOALS, constraints=MEMORY, **options
        )

    algo = make()
    for _ in range(6):  # past the start-up trials: crossover / the model propose too
        batch = algo.sample_hyperparameter_candidates(3)
        algo.update_state(batch, [_conditional_metrics(c) for c in batch])
    told = {"optimizer": "adam", "momentum": 0.5, "w": 0.2, "layers": [{"width": 9}]}
    algo.update_state([told], [_conditional_metrics(told)])  # never asked: inactive left out
    proposed = algo.sample_hyperparameter_candidates(4)
    for config in proposed:
        active = {"optimizer", "w", "layers"} | (
            {"momentum"} if config["optimizer"] == "sgd" else set()
        )
        assert set(config) == active and CONDITIONAL.contains(config), config
    for trial in algo._study.trials:  # Optuna holds exactly each trial's active parameters
        config = CONDITIONAL.nest(dict(trial.params))
        assert dict(trial.params) == CONDITIONAL.flatten(CONDITIONAL.project(config))
    assert any(len(t.values or ()) == 2 for t in algo._study.trials)
    told_trial = [t for t in algo._study.trials if t.params.get("w") == 0.2]
    assert told_trial and "momentum" not in told_trial[-1].params
    state = json.loads(json.dumps(algo.state_dict()))
    again = make()
    again.load_state_dict(state)
    assert again.sample_hyperparameter_candidates(2) == algo.sample_hyperparameter_candidates(2)
