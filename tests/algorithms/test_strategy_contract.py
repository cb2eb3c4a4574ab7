"""The contract every strategy keeps, the bring-your-own example included.

Modelled on Optuna's ``optuna/testing/pytest_samplers.py`` and Syne Tune's checkpointing test:
sample -> update -> state round-trip gives the same next candidates -> the same seed gives the
same candidates -> no candidate outside the space -> no duplicate within a batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ultron.algorithms.registry import BUILTIN_STRATEGIES, resolve_strategy
from ultron.algorithms.space import Choice, IntRange, LogUniform, SearchSpace, Uniform, canonical
from ultron.usercode import user_code

BYO_PATH = Path(__file__).resolve().parents[2] / "examples" / "byo_algorithm"
BYO = "byo_search.hill_climbing:HillClimbing"

# name -> options that keep the test fast (few startup trials so the model part runs too)
STRATEGIES: dict[str, dict[str, Any]] = {
    "random": {},
    "grid": {"points": 4},
    "tpe": {"n_startup_trials": 4},
    "cmaes": {"n_startup_trials": 2},
    "gp": {"n_startup_trials": 8},
    "qmc": {},
    "reinforce": {"learning_rate": 0.2},
    "evolution": {"population_size": 6, "sample_size": 3},
    "nsga2": {"population_size": 4},
    "nsga3": {"population_size": 4},
    "motpe": {"n_startup_trials": 4},
    BYO: {"n_random": 4},
}

SPACE = SearchSpace(
    {
        "lr": LogUniform(1e-4, 1e-1),
        "dropout": Uniform(0.0, 0.5),
        "layers": IntRange(1, 4),
        "units": IntRange(16, 512, log=True),
        "act": Choice(("relu", "tanh", "gelu")),
    }
)


@pytest.fixture(scope="module", autouse=True)
def _byo_on_path() -> Any:
    with user_code([BYO_PATH]):  # as the master imports a user's strategy
        yield


def objective(config: dict[str, Any]) -> float:
    """A deterministic score with an optimum inside the space; lower is better."""
    return (
        (math.log10(config["lr"]) + 2.5) ** 2
        + (config["dropout"] - 0.1) ** 2
        + 0.1 * abs(config["layers"] - 2)
        + 0.05 * abs(math.log2(config["units"]) - 7)
        + (0.0 if config["act"] == "gelu" else 0.2)
    )


def params(names: list[str]) -> list[Any]:
    """The strategy names as pytest params; the GP sampler (seconds per ask on CPU) is slow."""
    return [pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n for n in names]


def make(name: str, *, seed: int = 0, space: SearchSpace = SPACE, **extra: Any) -> Any:
    options = {**STRATEGIES.get(name, {}), **extra}
    return resolve_strategy(name)(space, seed=seed, direction="minimize", **options)


def drive(algo: Any, rounds: int, n: int, score: Callable[[dict[str, Any]], float]) -> list[Any]:
    """Sample and score ``rounds`` batches; every third candidate fails (nan)."""
    proposed = []
    for r in range(rounds):
        batch = algo.sample_hyperparameter_candidates(n)
        proposed.extend(batch)
        scores = [math.nan if (r * n + i) % 3 == 2 else score(c) for i, c in enumerate(batch)]
        algo.update_state(batch, scores)
    return proposed


def test_every_builtin_name_is_in_the_contract_suite() -> None:
    assert set(BUILTIN_STRATEGIES) - {"optuna"} <= set(STRATEGIES)


@pytest.mark.parametrize("name", params(list(STRATEGIES)))
def test_candidates_lie_inside_the_space_and_are_distinct_in_a_batch(name: str) -> None:
    algo = make(name)
    for batch_size in (5, 1, 7):
        batch = algo.sample_hyperparameter_candidates(batch_size)
        assert len(batch) == batch_size
        assert all(SPACE.contains(config) for config in batch), batch
        assert len({canonical(c) for c in batch}) == batch_size
        algo.update_state(batch, [objective(c) for c in batch])


@pytest.mark.parametrize("name", params(list(STRATEGIES)))
def test_failed_trials_are_tolerated(name: str) -> None:
    algo = make(name)
    batch = algo.sample_hyperparameter_candidates(4)
    algo.update_state(batch, [math.nan] * 4)
    assert all(SPACE.contains(c) for c in algo.sample_hyperparameter_candidates(3))


@pytest.mark.parametrize("name", params(list(STRATEGIES)))
def test_same_seed_gives_the_same_candidates(name: str) -> None:
    first = drive(make(name, seed=7), rounds=4, n=3, score=objective)
    second = drive(make(name, seed=7), rounds=4, n=3, score=objective)
    assert [canonical(c) for c in first] == [canonical(c) for c in second]


@pytest.mark.parametrize("name", params([n for n in STRATEGIES if n != "grid"]))
def test_different_seeds_give_different_candidates(name: str) -> None:
    first = drive(make(name, seed=1), rounds=2, n=3, score=objective)
    second = drive(make(name, seed=2), rounds=2, n=3, score=objective)
    assert [canonical(c) for c in first] != [canonical(c) for c in second]


@pytest.mark.parametrize("name", params(list(STRATEGIES)))
def test_state_round_trip_gives_the_same_next_candidates(name: str) -> None:
    algo = make(name, seed=3)
    drive(algo, rounds=3, n=3, score=objective)
    outstanding = algo.sample_hyperparameter_candidates(2)  # asked, not yet scored
    state = json.loads(json.dumps(algo.state_dict()))  # what goes to Redis must be JSON

    restored = make(name, seed=3)
    restored.load_state_dict(state)
    for twin in (algo, restored):
        twin.update_state(outstanding, [objective(c) for c in outstanding])
    expected = drive(algo, rounds=2, n=3, score=objective)
    actual = drive(restored, rounds=2, n=3, score=objective)
    assert [canonical(c) for c in actual] == [canonical(c) for c in expected]


@pytest.mark.parametrize("name", params(list(STRATEGIES)))
def test_asynchronous_use_with_outstanding_candidates(name: str) -> None:
    """The async master asks one at a time and reports out of order, one at a time."""
    algo = make(name)
    outstanding = [algo.sample_hyperparameter_candidates(1)[0] for _ in range(8)]
    for _ in range(12):
        config = outstanding.pop(1 if len(outstanding) > 1 else 0)
        algo.update_state([config], [objective(config)])
        outstanding.extend(algo.sample_hyperparameter_candidates(1))
    assert all(SPACE.contains(c) for c in outstanding)


@pytest.mark.parametrize("name", params([n for n in STRATEGIES if n != "grid"]))
def test_no_duplicates_in_a_small_discrete_space(name: str) -> None:
    space = SearchSpace({"a": Choice((1, 2, 3)), "b": Choice(("x", "y"))})
    algo = make(name, space=space)
    batch = algo.sample_hyperparameter_candidates(6)
    assert len({canonical(c) for c in batch}) == 6
    assert all(space.contains(c) for c in batch)


def test_an_unknown_optuna_sampler_is_named_in_the_error() -> None:
    from ultron.algorithms.optuna_sampler import OptunaSearch

    with pytest.raises(ValueError, match="sampler is 'annealing'"):
        OptunaSearch(SPACE, sampler="annealing")
