"""Conditional entries and lists of sub-spaces in a spec: parsed, refused with the field named,
and rendered in the run form (the JSON schema Prefect registers for ``hpo-job``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ultron.algorithms.space import Choice, IntRange, Uniform
from ultron.errors import ConfigIssue
from ultron.spec.job import JobSpec
from ultron.spec.loader import load_spec

CODE = Path(__file__).resolve().parents[3] / "examples" / "quickstart" / "code"
SPEC: dict[str, Any] = {
    "code": str(CODE),
    "model": "pkg.train:Model",
    "search_space": {
        "optimizer": ["adam", "sgd"],
        "momentum": {"type": "uniform", "low": 0, "high": 0.99, "when": {"optimizer": "sgd"}},
        "layers": {
            "count": [1, 4],
            "each": {"width": {"type": "int", "low": 16, "high": 256}, "activation": ["relu"]},
        },
    },
}


def test_a_conditional_space_loads_into_the_search_space_of_the_strategies() -> None:
    space = load_spec(SPEC).space
    assert list(space)[:4] == ["optimizer", "momentum", "layers", "layers.0.width"]
    assert space["momentum"] == Uniform(0.0, 0.99) and space["layers"] == IntRange(1, 4)
    assert space["layers.3.activation"] == Choice(("relu",))
    assert space.contains({"optimizer": "adam", "layers": [{"width": 20, "activation": "relu"}]})
    # The spec dumps as it was written (no when: null on plain entries): a stored spec of an
    # older ultron still compares equal on resume.
    dumped = load_spec(SPEC).model_dump(mode="json")["search_space"]
    assert "when" not in dumped["optimizer"] and dumped["momentum"]["when"] == {"optimizer": "sgd"}
    assert load_spec({**SPEC, "search_space": dumped}).space.params == space.params


def _with(path: str, value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(SPEC)
    *parents, last = path.split(".")
    node = spec["search_space"]
    for part in parents:
        node = node[part]
    node[last] = value
    return spec


@pytest.mark.parametrize(
    ("path", "value", "field", "rule"),
    [
        ("momentum.when", {"optimzer": "sgd"}, "momentum.when.optimzer", "not a parameter"),
        ("momentum.when", {"optimizer": "sdg"}, "momentum.when.optimizer", "among the choices"),
        ("momentum.when", {"optimizer": ["sgd", 3]}, "momentum.when.optimizer", "among the"),
        ("momentum.when", {"layers": 2}, "momentum.when.layers", "must be a choice"),
        ("momentum.when", {"momentum": 0.5}, "momentum.when.momentum", "itself"),
        ("momentum.when", {}, "momentum.when", "at least one"),
        (
            "optimizer",
            {"type": "choice", "values": ["adam", "sgd"], "when": {"act": "a"}},
            "optimizer.when.act",
            "not a parameter",
        ),
        ("layers.count", [3, 1], "layers.count", "0 <= fewest (3) <= most (1)"),
        ("layers.count", [1, 65], "layers.count", "at most 64"),
        ("layers.count", [1, 2.5], "layers.count", "whole numbers"),
        ("layers.count", [-1, 2], "layers.count", "0 <= fewest"),
        ("layers.each", {}, "layers.each", "at least one entry"),
        ("layers.each.width.low", "x", "layers.each.width.low", "not text"),
        ("layers.each.width.when", {"optimizer": "sgd"}, "layers.each.width.when", "cannot be"),
    ],
)
def test_a_broken_condition_or_list_names_its_field(
    path: str,
    value: Any,
    field: str,
    rule: str,
    only_issue: Callable[..., ConfigIssue],
) -> None:
    issue = only_issue(_with(path, value))
    assert issue.field == f"search_space.{field}"
    assert rule in issue.rule


def test_a_cycle_of_conditions_is_refused(only_issue: Callable[..., ConfigIssue]) -> None:
    spec = copy.deepcopy(SPEC)
    spec["search_space"]["a"] = {"type": "choice", "values": [1, 2], "when": {"b": 1}}
    spec["search_space"]["b"] = {"type": "choice", "values": [1, 2], "when": {"a": 2}}
    issue = only_issue(spec)
    assert issue.field == "search_space.a.when.b" and "cycle (a -> b -> a)" in issue.rule


def test_the_run_form_renders_lists_and_conditions() -> None:
    """The spec's JSON schema (what Prefect registers for ``hpo-job`` and its form renders;
    the registered one is checked in ``tests/flows/test_deployments.py``) has the list entry
    with its count and typed each, and a described when on every entry."""
    schema = JobSpec.model_json_schema(mode="validation")
    definitions = schema["$defs"]
    entry = schema["properties"]["search_space"]["additionalProperties"]["anyOf"][0]
    kinds = {
        definitions[e["$ref"].rsplit("/", 1)[1]]["properties"]["type"]["const"]
        for e in entry["oneOf"]
    }
    assert kinds == {"uniform", "loguniform", "int", "choice", "list"}
    listed = definitions["ListSpec"]["properties"]
    assert listed["count"]["type"] == "array" and listed["count"]["description"]
    assert listed["each"]["description"] and "oneOf" in listed["each"]["additionalProperties"]
    for kind in ("UniformSpec", "LogUniformSpec", "IntSpec", "ChoiceSpec", "ListSpec"):
        assert definitions[kind]["properties"]["when"]["description"]
