"""Checking the job's data against the spec's expectations with great-expectations.

The data is read through :mod:`ultron.datamanager.sources` into a pandas frame: scalar columns as
they are, and for an array column (an image) its per-example minimum and maximum as
``<name>.min`` and ``<name>.max`` (a NaN anywhere makes them NaN), so ``between`` and
``not_null`` cover every element. Everything is checked in one great-expectations run on an
ephemeral context (no files written, no analytics, no progress bars); all failures are
reported at once.

Example:
    >>> import numpy as np, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> np.savez(os.path.join(folder, "d.npz"), x=np.ones((4, 2), "float32"),
    ...          y=np.array([0, 1, 7, 1]))
    >>> spec = DataSpec(url="d.npz", expectations=[
    ...     {"expect": "in_set", "column": "y", "values": [0, 1]}])
    >>> try:
    ...     validate_data(spec, base_dir=folder)
    ... except DataValidationError as exc:
    ...     print(exc.failures[0].expectation)
    y in_set [0, 1]
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np

from ultron.datamanager.errors import DataValidationError, ExpectationFailure
from ultron.datamanager.sources import read_chunks, resolve_url
from ultron.datamanager.spec import DataSpec, Expectation

__all__ = ["validate_data"]

logger = logging.getLogger(__name__)


def validate_data(data_spec: DataSpec, *, base_dir: str | Path) -> None:
    """Check the data against ``data_spec.expectations``; nothing to do when there are none.

    Raises:
        DataValidationError: one or more expectations failed; each is named with what the
            data showed and a fix.
    """
    if not data_spec.expectations:
        return
    url = resolve_url(data_spec.url, base_dir=base_dir)
    columns = _read(data_spec, base_dir=base_dir)
    failures: list[ExpectationFailure] = []
    gx_checks: list[tuple[Expectation, Any]] = []
    for expectation in data_spec.expectations:
        failure = _precheck(expectation, columns)
        if failure is not None:
            failures.append(failure)
        elif expectation.expect != "columns":
            gx_checks += [(expectation, gx) for gx in _to_gx(expectation, columns)]
    failures += _run_gx(gx_checks, _frame(columns))
    if failures:
        raise DataValidationError(url, failures)
    logger.info("data at %s met %d expectation(s)", url, len(data_spec.expectations))


def _read(spec: DataSpec, *, base_dir: str | Path) -> dict[str, np.ndarray]:
    chunks = list(read_chunks(spec, base_dir=base_dir, max_rows=spec.rows_to_validate()))
    return {key: np.concatenate([chunk[key] for chunk in chunks]) for key in chunks[0]}


def _frame(columns: dict[str, np.ndarray]) -> Any:
    import pandas as pd

    data: dict[str, Any] = {}
    for name, values in columns.items():
        if values.ndim == 1:
            data[name] = values
        else:
            flat = values.reshape(len(values), -1).astype(np.float64)
            with np.errstate(invalid="ignore"):
                data[f"{name}.min"] = flat.min(axis=1)
                data[f"{name}.max"] = flat.max(axis=1)
    return pd.DataFrame(data)


def _precheck(e: Expectation, columns: dict[str, np.ndarray]) -> ExpectationFailure | None:
    """What is checked on the arrays themselves: that columns exist, dtypes, set on scalars."""
    if e.expect == "columns":
        missing = [c for c in e.columns or [] if c not in columns]
        if missing:
            return ExpectationFailure(
                e.describe(),
                None,
                f"missing {missing}; the data has {sorted(columns)}",
                "write those columns, or correct the expectation",
            )
        return None
    assert e.column is not None  # checked by Expectation
    if e.column not in columns:
        return ExpectationFailure(
            e.describe(),
            e.column,
            f"no such column; the data has {sorted(columns)}",
            "correct the column name",
        )
    values = columns[e.column]
    if e.expect == "type" and values.dtype.name != e.type:
        return ExpectationFailure(
            e.describe(),
            e.column,
            f"the column is {values.dtype.name}",
            f"write it as {e.type}, or expect {values.dtype.name}",
        )
    if e.expect == "in_set" and values.ndim > 1:
        return ExpectationFailure(
            e.describe(),
            e.column,
            f"the column holds arrays of shape {values.shape[1:]}",
            "use in_set on a scalar column (between for arrays)",
        )
    return None


def _to_gx(e: Expectation, columns: dict[str, np.ndarray]) -> list[Any]:
    """The great-expectations expectations that check ``e``."""
    gx = _import_gx()
    assert e.column is not None
    names = [e.column] if columns[e.column].ndim == 1 else [f"{e.column}.min", f"{e.column}.max"]
    if e.expect == "not_null":
        return [gx.expectations.ExpectColumnValuesToNotBeNull(column=n) for n in names]
    if e.expect == "between":
        return [
            gx.expectations.ExpectColumnValuesToBeBetween(
                column=n, min_value=e.min, max_value=e.max
            )
            for n in names
        ]
    if e.expect == "in_set":
        return [gx.expectations.ExpectColumnValuesToBeInSet(column=e.column, value_set=e.values)]
    if e.expect == "type" and columns[e.column].ndim == 1:
        return [gx.expectations.ExpectColumnValuesToBeOfType(column=names[0], type_=e.type)]
    return []


def _run_gx(checks: list[tuple[Expectation, Any]], frame: Any) -> list[ExpectationFailure]:
    if not checks:
        return []
    gx = _import_gx()
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False, "metric_calculations": False}
    asset = context.data_sources.add_pandas("ultron").add_dataframe_asset("data")
    batch = asset.add_batch_definition_whole_dataframe("all").get_batch(
        batch_parameters={"dataframe": frame}
    )
    failures: dict[int, ExpectationFailure] = {}
    for expectation, gx_expectation in checks:
        result = batch.validate(gx_expectation)
        if result.success:
            continue
        failure = _failure(expectation, gx_expectation, result, len(frame))
        earlier = failures.get(id(expectation))
        if earlier is not None:  # an array column is checked on its .min and its .max
            failure = ExpectationFailure(
                earlier.expectation,
                earlier.column,
                f"{earlier.observed}; {failure.observed}",
                earlier.fix,
            )
        failures[id(expectation)] = failure
    return list(failures.values())


def _failure(e: Expectation, gx_e: Any, result: Any, rows: int) -> ExpectationFailure:
    details = result.result or {}
    if result.exception_info and result.exception_info.get("raised_exception"):
        observed = f"could not be checked: {result.exception_info.get('exception_message')}"
    else:
        count = details.get("unexpected_count", "?")
        sample = details.get("partial_unexpected_list", [])[:5]
        observed = f"{count} of {rows} examples fail ({type(gx_e).__name__}"
        observed += f" on {gx_e.column}); e.g. {sample}" if sample else f" on {gx_e.column})"
    fix = {
        "not_null": "fill or drop the missing values",
        "between": f"bring the values into [{e.min}, {e.max}], or widen the range",
        "in_set": f"correct the values, or add them to {e.values}",
        "type": f"write the column as {e.type}",
    }.get(e.expect, "correct the data or the expectation")
    return ExpectationFailure(e.describe(), e.column, observed, fix)


def _import_gx() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    try:
        import great_expectations as gx
    except ImportError as exc:
        raise ImportError(
            "data expectations need great-expectations: pip install 'ultron-automl[data]'"
        ) from exc
    for name in (
        "great_expectations",
        "great_expectations.core",
        "great_expectations.data_context",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)
    return gx
