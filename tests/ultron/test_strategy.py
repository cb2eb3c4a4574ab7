"""Strategies by name, and a user's own class loaded by dotted path from their code base."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from algorithms.random_search import RandomSearch
from ultron.environment import TrialEnvironment
from ultron.errors import SpecError
from ultron.spec import JobSpec
from ultron.strategy import build_strategy

TOY = Path(__file__).parents[1] / "data" / "toy"


def _spec(**fields: object) -> JobSpec:
    base = {"code": str(TOY), "model": "toy_model:Quadratic", "search_space": {"x": [1, 2, 3]}}
    return JobSpec.model_validate({**base, **fields}, context={"check_paths": False})


def _env() -> TrialEnvironment:
    return TrialEnvironment(
        python=Path(sys.executable), code_hash="0" * 64, root=TOY, source=TOY, reused=True
    )


def test_builtin_names_are_case_insensitive() -> None:
    assert isinstance(build_strategy(_spec(strategy="RANDOM")), RandomSearch)


def test_users_class_from_the_code_base_gets_the_arguments_it_accepts() -> None:
    sys.modules.pop("toy_model", None)
    strategy = build_strategy(
        _spec(strategy="toy_model:CountingSearch", strategy_options={"start": 5}), _env()
    )
    assert type(strategy).__name__ == "CountingSearch"
    assert strategy.sample_hyperparameter_candidates(2) == [{"x": 5}, {"x": 6}]


def test_missing_class_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="strategy is 'toy_model:NoSuchClass'"):
        build_strategy(_spec(strategy="toy_model:NoSuchClass"), _env())


def test_bad_option_for_a_builtin_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="strategy_options"):
        build_strategy(_spec(strategy="random", strategy_options={"temperature": 3}))
