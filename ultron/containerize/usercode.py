"""The user's code owns its own module names, in every process that imports it.

A code base may hold packages called ``tasks``, ``algorithms`` or ``mypkg``, whatever else is
importable in the process that loads it: the folder a job was started from, a package of the
same name installed beside ultron, or another job's code base of an earlier run in the same
process (``ultron serve`` runs job after job). :func:`user_code` puts a code base's folders in
front of ``sys.path`` and hides every module that goes by one of the code base's top-level names
while the block runs; when the block ends, ``sys.path`` and ``sys.modules`` are as they were.
The trial process gets the same folders first on its path at start (see
:mod:`ultron.worker.process`) and is started with ``python -P``, so the current folder never
comes before them.

Standard-library names and ``ultron`` itself are never set aside: a code base cannot replace
them in a process that runs ultron.

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
import importlib
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType

__all__ = ["import_paths", "top_level_names", "user_code"]

_NEVER_SET_ASIDE = frozenset(sys.stdlib_module_names) | {"ultron"}


def import_paths(source: str | Path) -> tuple[str, ...]:
    """The folders a code base's modules import from: ``src/`` (a src layout) and its root."""
    root = Path(source)
    return tuple(str(p) for p in (root / "src", root) if p.is_dir())


def top_level_names(paths: Iterable[str | Path]) -> set[str]:
    """The names a code base's folders provide at their top (packages and modules) that it
    owns in a process: all but the standard library's and ``ultron``."""
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
    return names - _NEVER_SET_ASIDE


def _owned(name: str, names: set[str]) -> bool:
    return name.partition(".")[0] in names


def _under(module: ModuleType, folders: list[str]) -> bool:
    where = getattr(module, "__file__", None) or ""
    return any(where.startswith(folder + os.sep) for folder in folders)


@contextlib.contextmanager
def user_code(paths: Iterable[str | Path]) -> Iterator[None]:
    """Import from ``paths`` first, under the code base's own names, for the block's duration.

    Modules already imported under one of the code base's top-level names (ours, the folder
    the job started from, an earlier job's) are set aside and put back afterwards; whatever
    the block imported from the code base, or under its names, is dropped from
    ``sys.modules``, and the folders leave ``sys.path``. Objects made inside the block keep
    working after it (they hold their modules); a new ``import`` of the code base's names
    after the block no longer finds it.

    Args:
        paths: the code base's import folders, first one first (``src/`` before the root).
    """
    folders = [str(Path(p).resolve()) for p in paths if Path(p).is_dir()]
    names = top_level_names(folders)
    set_aside = {n: m for n, m in list(sys.modules.items()) if _owned(n, names)}
    for name in set_aside:
        del sys.modules[name]
    added = [folder for folder in folders if folder not in sys.path]
    sys.path[:0] = added
    importlib.invalidate_caches()
    try:
        yield
    finally:
        for folder in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
        for name, module in list(sys.modules.items()):
            if _owned(name, names) or _under(module, folders):
                del sys.modules[name]
        sys.modules.update(set_aside)
        importlib.invalidate_caches()
