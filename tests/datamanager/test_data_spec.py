"""The ``data`` section: defaults, format inference and errors that carry a fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ultron.datamanager.spec import DataSpec, Expectation


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
