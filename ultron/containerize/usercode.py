"""The user's code owns its own module names, in every process that imports it.

A code base may hold packages called ``tasks``, ``algorithms`` or ``mypkg``, whatever else is
importable in the process that loads it: the folder a job was started from, a package of the
same name installed beside ultron, or another job's code base of an earlier run in the same
process (``ultron serve`` runs job after job). While a :func:`user_code` block runs, the code
base's own top-level names import from its folders, whatever else goes by them; when the block
ends, ``sys.path`` and ``sys.modules`` are as they were.
The trial process gets the same folders first on its path at start (see
:mod:`ultron.worker.process`) and is started with ``python -P``, so the current folder never
comes before them.

The names of what ultron runs on are never set aside: the standard library, ``ultron`` itself
and the packages it depends on (``prefect``, ``dask``, ``redis``, ...). A code base cannot
replace those in a process that runs ultron; anything else of the same name is the user's.

Example:
    >>> import importlib, sys, tempfile
    >>> from pathlib import Path
    >>> def code_base(value):
    ...     root = Path(tempfile.mkdtemp())
    ...     (root / "mypkg").mkdir()
    ...     _ = (root / "mypkg" / "__init__.py").write_text(f"VALUE = {value}")
    ...     return root
    >>> first, second = code_base(1), code_base(2)
    >>> with user_code([first]):
    ...     importlib.import_module("mypkg").VALUE
    1
    >>> with user_code([second]):                   # the same name, another code base
    ...     importlib.import_module("mypkg").VALUE
    2
    >>> "mypkg" in sys.modules, str(second) in sys.path
    (False, False)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from importlib import metadata
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

__all__ = ["import_paths", "top_level_names", "user_code"]

_DISTRIBUTION = "ultron-automl"


@functools.cache
def _ours() -> frozenset[str]:
    """Top-level module names of the standard library, ultron and its dependencies (not extras)."""
    wanted, todo = set(), [_DISTRIBUTION]
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in wanted:
            continue
        wanted.add(name)
        with contextlib.suppress(metadata.PackageNotFoundError):
            for requirement in metadata.requires(name) or []:
                if "extra ==" not in requirement:
                    todo.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0])
    tops = {
        top
        for top, distributions in metadata.packages_distributions().items()
        if any(re.sub(r"[-_.]+", "-", d).lower() in wanted for d in distributions)
    }
    return frozenset(sys.stdlib_module_names) | tops | {"ultron"}


def import_paths(source: str | Path) -> tuple[str, ...]:
    """The folders a code base's modules import from: ``src/`` (a src layout) and its root."""
    root = Path(source)
    return tuple(str(p) for p in (root / "src", root) if p.is_dir())


def top_level_names(paths: Iterable[str | Path]) -> set[str]:
    """The names a code base's folders provide at their top (packages and modules) that it
    owns in a process: all but those of the standard library, ultron and its dependencies."""
    names: set[str] = set()
    for folder in map(Path, paths):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            name = entry.name.removesuffix(".py") if entry.is_file() else entry.name
            if entry.is_file() and not entry.name.endswith(".py"):
                continue
            if name.isidentifier() and not name.startswith("_"):
                names.add(name)
    return names - _ours()


def _owned(name: str, names: set[str]) -> bool:
    return name.partition(".")[0] in names


def _under(module: ModuleType, folders: list[str]) -> bool:
    where = getattr(module, "__file__", None) or ""
    return any(where.startswith(folder + os.sep) for folder in folders)


class _CodeBaseFinder(importlib.abc.MetaPathFinder):
    """Finds the code base's own top-level names in its folders, before anywhere else.

    Only those names: a dependency the code base does not define still comes from where it
    always does (a folder of the code base never shadows ``optuna`` in our process). Submodules
    follow their package's ``__path__``, inside the code base.
    """

    def __init__(self, folders: list[str], names: set[str]) -> None:
        self.folders = folders
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if "." in fullname or fullname not in self.names:
            return None
        return importlib.machinery.PathFinder.find_spec(fullname, self.folders)


@contextlib.contextmanager
def user_code(paths: Iterable[str | Path]) -> Iterator[None]:
    """Import the code base's own names from ``paths`` for the block's duration.

    Modules already imported under one of the code base's top-level names (the folder the job
    started from, an earlier job's code base, an installed package of the same name) are set
    aside and put back afterwards; whatever the block imported from the code base, or under
    its names, is dropped from ``sys.modules``. ``sys.path`` is not touched: a finder placed
    first on ``sys.meta_path`` serves the code base's names, and leaves with the block.
    Objects made inside the block keep working after it (they hold their modules); a new
    ``import`` of the code base's names after the block no longer finds it.

    Args:
        paths: the code base's import folders, first one first (``src/`` before the root).
    """
    folders = [str(Path(p).resolve()) for p in paths if Path(p).is_dir()]
    names = top_level_names(folders)
    set_aside = {n: m for n, m in list(sys.modules.items()) if _owned(n, names)}
    for name in set_aside:
        del sys.modules[name]
    finder = _CodeBaseFinder(folders, names)
    sys.meta_path.insert(0, finder)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        for name, module in list(sys.modules.items()):
            if _owned(name, names) or _under(module, folders):
                del sys.modules[name]
        sys.modules.update(set_aside)
        importlib.invalidate_caches()
