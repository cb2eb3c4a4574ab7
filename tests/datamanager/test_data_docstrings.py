"""The examples in the Data Manager's docstrings run (those that need no running service)."""

from __future__ import annotations

import doctest
from types import ModuleType

import pytest

import ultron.data
from ultron.datamanager import colocated, errors, pipeline, reader, service, sources, spec, staging


@pytest.mark.parametrize(
    "module",
    [colocated, errors, pipeline, reader, service, sources, spec, staging, ultron.data],
    ids=str,
)
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module)
    assert result.failed == 0
