"""Strategies by name, and a user's own class loaded by dotted path from their code base."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ultron.algorithms.random_search import RandomSearch
from ultron.errors import SpecError
from ultron.master.strategy import build_stopper, build_strategy, check_options
from ultron.spec.job import JobSpec
from ultron.usercode import import_paths, user_code

TOY = Path(__file__).parents[2] / "data" / "toy"


def _spec(**fields: object) -> JobSpec:
    base = {"code": str(TOY), "model": "toy_model:Quadratic", "search_space": {"x": [1, 2, 3]}}
    return JobSpec.model_validate({**base, **fields}, context={"check_paths": False})


def test_builtin_names_are_case_insensitive() -> None:
    assert isinstance(build_strategy(_spec(strategy="RANDOM")), RandomSearch)


def test_users_class_from_the_code_base_gets_the_arguments_it_accepts() -> None:
    with user_code(import_paths(TOY)):
        strategy = build_strategy(
            _spec(strategy="toy_model:CountingSearch", strategy_options={"start": 5})
        )
    assert type(strategy).__name__ == "CountingSearch"
    assert strategy.sample_hyperparameter_candidates(2) == [{"x": 5}, {"x": 6}]
    assert "toy_model" not in sys.modules  # nothing of the code base outlives the block


def test_missing_class_is_a_spec_error() -> None:
    with user_code(import_paths(TOY)), pytest.raises(SpecError, match="'toy_model:NoSuchClass'"):
        build_strategy(_spec(strategy="toy_model:NoSuchClass"))


def test_bad_option_for_a_builtin_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="strategy_options"):
        build_strategy(_spec(strategy="random", strategy_options={"temperature": 3}))


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"strategy": "tpe", "strategy_options": {"temperature": 3}}, "strategy_options"),
        (
            {"early_stopping": {"type": "asha", "max_resource": 9, "options": {"nope": 1}}},
            "early_stopping.options",
        ),
    ],
)
def test_check_options_names_the_field_without_building(
    fields: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecError, match=field):
        check_options(_spec(**fields))


def test_check_options_accepts_what_the_classes_take() -> None:
    spec = _spec(
        strategy="evolution",
        early_stopping={"type": "hyperband", "max_resource": 27},
    )
    check_options(spec)
    assert build_stopper(spec) is not None
