"""The user's code owns its own module names, in every process that imports it.

A code base may hold packages called ``tasks``, ``algorithms`` or ``mypkg``, whatever else is
importable in the process that loads it: the folder a job was started from, a package of the
same name installed beside ultron, or another job's code base imported earlier by the same
process (a script or a notebook that calls ``ultron.run`` job after job). Two ways in:

- :func:`user_code`, in our processes (the master imports a bring-your-own strategy): while
  the block runs, the code base's own top-level names import from its folders, whatever else
  goes by them; when it ends, ``sys.path`` and ``sys.modules`` are as they were. The names of
  what ultron runs on are never taken: the standard library, ``ultron`` and the packages it
  depends on (``prefect``, ``dask``, ``distributed``, ``redis``, ...).
- :func:`claim_names`, in the trial process, which belongs to one code base for its life: the
  code base's names import from its folders (all but the standard library's and ``ultron``),
  and its folders are at the end of ``sys.path`` for the processes the trial starts. The trial
  process is started with ``python -P``, so the current folder is not on its path at all.

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
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from importlib import metadata
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["claim_names", "import_paths", "top_level_names", "user_code"]

_DISTRIBUTION = "ultron-automl"
# What a code base never takes, even in its own trial process.
_BASE = frozenset(sys.stdlib_module_names) | {"ultron"}


@functools.cache
def _ours() -> frozenset[str]:
    """Top-level module names of the standard library, ultron and every package it runs on:
    its requirements, their extras included, and the extras of ultron that are installed.

    Walking the installed distributions takes a second or more at every job's start, so the
    answer is kept under ``ULTRON_HOME`` per Python environment, keyed by what an install or
    an uninstall changes (:func:`_installed_key`)."""
    key = _installed_key()
    where = _ours_file()
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        kept = json.loads(where.read_text())
        if kept["key"] == key:
            return _BASE | frozenset(kept["names"])
    tops = _walk_requirements()
    with contextlib.suppress(OSError):  # a read-only home only costs the walk next time
        where.parent.mkdir(parents=True, exist_ok=True)
        partial = where.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"key": key, "names": sorted(tops)}))
        partial.replace(where)  # atomic: a job starting beside us reads all of it or nothing
    return _BASE | tops


def _ours_file() -> Path:
    from ultron.paths import ultron_home

    prefix = hashlib.sha256(sys.prefix.encode()).hexdigest()[:16]
    return ultron_home() / "cache" / f"ours-{prefix}.json"


def _installed_key() -> list[Any]:
    """What changes when a distribution is installed, upgraded or removed: the modification
    times of the folders on ``sys.path`` that hold distributions (their ``*.dist-info``
    folders come and go), with the interpreter and ultron's own version."""
    folders = []
    for entry in sys.path:
        path = Path(entry or ".")
        if path.name in ("site-packages", "dist-packages"):
            with contextlib.suppress(OSError):
                folders.append([str(path.resolve()), path.stat().st_mtime_ns])
    try:
        version: str | None = metadata.version(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = None
    return [sys.prefix, sys.version, version, folders]


def _walk_requirements() -> frozenset[str]:
    """The top-level names of ultron's distribution and those it requires, transitively."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, str]] = set()
    todo = [(_DISTRIBUTION, extra) for extra in ["", *_provided_extras(_DISTRIBUTION)]]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        with contextlib.suppress(metadata.PackageNotFoundError):
            for text in metadata.requires(name) or []:
                requirement = Requirement(text)
                if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                    required = canonicalize_name(requirement.name)
                    todo += [(required, e) for e in ["", *requirement.extras]]
    wanted = {name for name, _ in seen}
    tops = {
        top
        for top, distributions in metadata.packages_distributions().items()
        if any(canonicalize_name(d) in wanted for d in distributions)
    }
    return frozenset(tops)


def _provided_extras(name: str) -> list[str]:
    try:
        return metadata.metadata(name).get_all("Provides-Extra") or []
    except metadata.PackageNotFoundError:
        return []


def import_paths(source: str | Path) -> tuple[str, ...]:
    """The folders a code base's modules import from: ``src/`` (a src layout) and its root."""
    root = Path(source)
    return tuple(str(p) for p in (root / "src", root) if p.is_dir())


def _module_name(entry: Path) -> str | None:
    if entry.is_dir():
        return entry.name
    for suffix in sorted(importlib.machinery.all_suffixes(), key=len, reverse=True):
        if entry.name.endswith(suffix):  # .py, .pyc, and extension modules (.cpython-311-...so)
            return entry.name[: -len(suffix)]
    return None


def top_level_names(paths: Iterable[str | Path], *, keep: frozenset[str] | None = None) -> set[str]:
    """The names a code base's folders provide at their top (packages and modules) that it
    owns in a process: all but those in ``keep`` (default: the standard library's, ultron's
    and those of the packages ultron runs on)."""
    names: set[str] = set()
    for folder in map(Path, paths):
        if folder.is_dir():
            for entry in folder.iterdir():
                name = _module_name(entry)
                if name and name.isidentifier() and not name.startswith("__"):
                    names.add(name)
    return names - (_ours() if keep is None else keep)


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


def _resolved(paths: Iterable[str | Path]) -> list[str]:
    return [str(Path(p).resolve()) for p in paths if Path(p).is_dir()]


def claim_names(paths: Iterable[str | Path]) -> None:
    """Give a code base its names in this process for good (the trial process's way).

    Modules already imported under those names are dropped, the code base's folders serve
    them first, and the folders go at the end of ``sys.path`` so that processes this one
    starts (a data loader's workers) import the code base too.
    """
    folders = _resolved(paths)
    names = top_level_names(folders, keep=_BASE)
    for name in [n for n in sys.modules.copy() if _owned(n, names)]:
        del sys.modules[name]
    sys.meta_path.insert(0, _CodeBaseFinder(folders, names))
    sys.path.extend(folder for folder in folders if folder not in sys.path)
    importlib.invalidate_caches()


@contextlib.contextmanager
def user_code(paths: Iterable[str | Path]) -> Iterator[None]:
    """Import the code base's own names from ``paths`` for the block's duration.

    Modules already imported under one of the code base's top-level names (the folder the job
    started from, an earlier job's code base, an installed package of the same name) are set
    aside and put back afterwards; what the block imported from the code base, or under its
    names, is dropped from ``sys.modules``, and nothing else is. ``sys.path`` is not touched: a
    finder placed first on ``sys.meta_path`` serves the code base's names, and leaves with the
    block. Objects made inside the block keep working after it (they hold their modules); a
    new ``import`` of the code base's names after the block no longer finds it.

    Args:
        paths: the code base's import folders, first one first (``src/`` before the root).
    """
    folders = _resolved(paths)
    names = top_level_names(folders)
    set_aside = {n: m for n, m in sys.modules.copy().items() if _owned(n, names)}
    for name in set_aside:
        del sys.modules[name]
    before = set(sys.modules.copy())
    finder = _CodeBaseFinder(folders, names)
    sys.meta_path.insert(0, finder)
    importlib.invalidate_caches()
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(finder)
        for name, module in sys.modules.copy().items():
            if name not in before and (_owned(name, names) or _under(module, folders)):
                del sys.modules[name]
        sys.modules.update(set_aside)
        importlib.invalidate_caches()
