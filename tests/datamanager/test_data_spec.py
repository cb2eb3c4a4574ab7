"""The ``data`` section: defaults, format inference and errors that carry a fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ultron.datamanager.spec import DataSpec, Expectation
from ultron.errors import SpecError
from ultron.spec.loader import load_spec


def test_defaults() -> None:
    spec = DataSpec(url="data/train.parquet")
    assert spec.resolved_format() == "parquet"
    assert (spec.batch_size, spec.workers, spec.prefetch, spec.expectations) == (32, 1, 4, [])
    assert spec.placement == "colocated"  # a worker in each trial process
    assert DataSpec(url="a.npz", placement="service", workers=3).workers == 3


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"url": "data/"}, "set format"),
        ({"url": "a.tfrecord"}, "needs features"),
        ({"url": "a.npz", "batch_size": 0}, "batch_size"),
        ({"url": "a.npz", "pipeline": "not a path"}, "module:function"),
        ({"url": "a.npz", "colour": 1}, "colour"),
        ({"url": "a.npz", "workers": 2}, "set placement: service"),
        ({"url": "a.npz", "placement": "remote"}, "placement"),
        ({"url": "a.npz", "expectations": [{"expect": "in_set", "column": "y"}]}, "values"),
        ({"url": "a.npz", "expectations": [{"expect": "between"}]}, "needs a column"),
        (
            {"url": "a.npz", "expectations": [{"expect": "type", "column": "y", "type": "str"}]},
            "float32",
        ),
    ],
)
def test_bad_specs_name_the_rule(data: dict, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        DataSpec.model_validate(data)
    text = " ".join(
        f"{e['loc']} {e['msg']} {e.get('ctx', {}).get('fix', '')}" for e in info.value.errors()
    )
    assert words in text


def test_rule_errors_carry_a_fix() -> None:
    with pytest.raises(ValidationError) as info:
        Expectation.model_validate({"expect": "columns"})
    (error,) = info.value.errors()
    assert error["type"] == "ultron_rule"
    assert error["ctx"]["fix"] == "add columns: [x, y]"


@pytest.mark.parametrize(
    ("expectation", "field"),
    [
        ({"expect": "between", "column": "x", "min": float("nan")}, "min"),
        ({"expect": "between", "column": "x", "max": float("inf")}, "max"),
        ({"expect": "between", "column": "x", "min": float("-inf"), "max": 1}, "min"),
        ({"expect": "in_set", "column": "y", "values": [0, float("nan")]}, "values"),
    ],
)
def test_expectation_numbers_must_be_finite(expectation: dict, field: str) -> None:
    """A nan bound compares false with every value, an inf one passes every value: both refused."""
    with pytest.raises(ValidationError) as info:
        DataSpec.model_validate({"url": "a.npz", "expectations": [expectation]})
    (error,) = info.value.errors()
    assert error["loc"] == ("expectations", 0, field)
    assert error["type"] in ("finite_number", "ultron_rule")


def test_a_nan_bound_in_a_spec_file_is_named_with_its_fix(tmp_path: Path) -> None:
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "code: proj\nmodel: pkg.train:Model\nsearch_space: {x: [1, 2]}\n"
        "data:\n  url: data.npz\n  expectations:\n"
        "    - {expect: between, column: x, min: .nan, max: 1.0}\n"
        "    - {expect: in_set, column: y, values: [0, .inf]}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(spec)
    issues = {issue.field: issue for issue in info.value.issues}
    assert sorted(issues) == ["data.expectations.0.min", "data.expectations.1.values"]
    assert "finite" in issues["data.expectations.0.min"].rule
    assert ".nan" in issues["data.expectations.0.min"].fix
    assert "values[1]" in issues["data.expectations.1.values"].rule
    assert issues["data.expectations.1.values"].fix
