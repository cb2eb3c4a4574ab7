"""Algorithms decide, tasks act: ultron.algorithms imports only itself, the standard library,
numpy, scipy and optuna (the allow-list that import-linter's forbidden contracts cannot say)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ALGORITHMS = Path(__file__).parents[2] / "algorithms"
ALLOWED = frozenset(sys.stdlib_module_names) | {"numpy", "scipy", "optuna"}


def _imports(source: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_algorithms_import_only_themselves_the_standard_library_and_numeric_libraries() -> None:
    outside = {
        f"{source.relative_to(ALGORITHMS)}: {name}"
        for source in ALGORITHMS.rglob("*.py")
        for name in _imports(source)
        if name != "ultron.algorithms"
        and not name.startswith("ultron.algorithms.")
        and name.split(".")[0] not in ALLOWED
    }
    assert outside == set()
