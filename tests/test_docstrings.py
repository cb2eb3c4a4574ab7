"""The examples in every module's docstrings run, under the modules' installed names.

(pytest's ``--doctest-modules`` would import ``algorithms/space.py`` as ``algorithms.space``, a
second copy outside the ``ultron`` namespace.)
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).parents[1]


def _modules() -> list[str]:
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"
    ]
    names = set(packages)
    for package in packages:
        path = importlib.import_module(package).__path__
        names |= {m.name for m in pkgutil.iter_modules(path, package + ".") if not m.ispkg}
    return sorted(names)


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name: str, redis_url: str) -> None:
    """``redis_url`` is the session's real Redis, for the examples that talk to one."""
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"redis_url": redis_url}, verbose=False)
    assert result.failed == 0
