"""Lazy re-exports for the ``__init__`` of a package whose modules run in light processes.

Importing one module of a package runs the package's ``__init__`` first: the trial process
imports ``ultron.worker.process`` and the report path ``ultron.services.keys``, and neither
may pull in the rest of their package (the cluster factory, the spec, Optuna). Their
``__init__`` re-exports each public name on first use instead.

Example:
    >>> getattr_, dir_ = lazy_exports("ultron.services", {"keys": ["job"]})
    >>> getattr_("job")("a")
    'ultron:job:a'
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` that import ``package.<module>`` on first use.

    Args:
        package: the package's ``__name__``.
        exports: module name (relative to the package) -> the public names it defines; a name
            equal to its module's name is the module itself.
    """
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(f"{package}.{where[name]}")
        return module if name == where[name] else getattr(module, name)

    def __dir__() -> list[str]:
        return sorted(where)

    return __getattr__, __dir__
