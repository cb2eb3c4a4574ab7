"""great-expectations checks the data before any trial; failures are named with a fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ultron.datamanager import DataSpec, DataValidationError, validate_data

pytest.importorskip("great_expectations")

EXPECTATIONS: list[dict[str, Any]] = [
    {"expect": "columns", "columns": ["x", "y"]},
    {"expect": "type", "column": "y", "type": "int64"},
    {"expect": "not_null", "column": "x"},
    {"expect": "between", "column": "x", "min": 0.0, "max": 1.0},
    {"expect": "in_set", "column": "y", "values": list(range(600))},
]


def _spec(**changes: Any) -> DataSpec:
    return DataSpec.model_validate({"url": "train.npz", "expectations": EXPECTATIONS, **changes})


def test_good_data_passes(dataset_dir: Path) -> None:
    validate_data(_spec(), base_dir=dataset_dir)


def test_every_failing_expectation_is_named(tmp_path: Path, make_dataset: Any) -> None:
    path = make_dataset(tmp_path, rows=50)
    with np.load(path) as arrays:
        x, y = arrays["x"].copy(), arrays["y"].copy()
    x[3, 0, 0, 0] = 2.5  # out of range
    x[4, 1, 1, 1] = np.nan  # missing
    y[7] = 999  # not an allowed label
    np.savez(path, x=x, y=y.astype(np.int32))
    expectations = [
        *EXPECTATIONS[:4],
        {"expect": "in_set", "column": "y", "values": list(range(50))},
    ]
    with pytest.raises(DataValidationError) as info:
        validate_data(_spec(expectations=expectations), base_dir=tmp_path)
    failed = {failure.expectation for failure in info.value.failures}
    assert failed == {
        "y type int64",
        "x not_null",
        "x between [0.0, 1.0]",
        "y in_set [" + ", ".join(map(str, range(50))) + "]",
    }
    report = str(info.value)
    assert report.startswith(f"data at {tmp_path / 'train.npz'} failed 4 expectation(s):")
    assert "999" in report and "Fix:" in report


def test_missing_column_is_named(dataset_dir: Path) -> None:
    spec = _spec(
        expectations=[
            {"expect": "columns", "columns": ["x", "label"]},
            {"expect": "not_null", "column": "label"},
        ]
    )
    with pytest.raises(DataValidationError) as info:
        validate_data(spec, base_dir=dataset_dir)
    assert [f.observed.split(";")[0] for f in info.value.failures] == [
        "missing ['label']",
        "no such column",
    ]


def test_no_expectations_reads_nothing(tmp_path: Path) -> None:
    validate_data(DataSpec(url="absent.npz"), base_dir=tmp_path)
