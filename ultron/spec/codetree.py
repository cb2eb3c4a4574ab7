"""The files of a user's code base, read without extracting, importing or installing it.

A code base is a folder or a tar archive (``.tar``, ``.tar.gz``, ...: read member by member, never
extracted, after the checks extraction makes, :mod:`ultron.spec.archive_rules`) with
``pyproject.toml`` or ``setup.py`` at its top or in its single top-level folder. Modules are
looked for as ``<module path>.py`` or ``<module path>/__init__.py`` at the project root, under
``src/``, and under the folders ``pyproject.toml`` or ``setup.py`` declare (``package-dir``,
``where``). Hidden folders, ``__pycache__``, ``build``, ``dist`` and virtual environments are
skipped. :mod:`ultron.spec.codebase` checks the classes a spec names against this tree.

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> _ = (root / "pyproject.toml").write_text(
    ...     "[tool.setuptools.packages.find]\\nwhere = ['lib']\\n")
    >>> (root / "lib" / "pkg").mkdir(parents=True)
    >>> _ = (root / "lib" / "pkg" / "__init__.py").write_text("")
    >>> _ = (root / "lib" / "pkg" / "train.py").write_text("class Model: ...\\n")
    >>> with open_tree(root) as tree:
    ...     module_file(tree, "pkg.train"), module_file(tree, "pkg.eval"), all_modules(tree)
    ('lib/pkg/train.py', None, ['pkg', 'pkg.train'])
"""

from __future__ import annotations

import ast
import os
import tarfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ultron.settings import settings
from ultron.spec.archive_rules import ARCHIVE_SUFFIXES, ArchiveRefused, read_members

__all__ = ["CodeTree", "Unreadable", "all_modules", "in_tree", "module_file", "open_tree"]

_PROJECT_FILES = ("pyproject.toml", "setup.py")
_SKIPPED = frozenset({"__pycache__", "node_modules", "build", "dist", "venv", "site-packages"})
_MAX_FILES = 20_000  # modules listed for suggestions; a bigger tree is cut short
_MAX_READ = 8 << 20
_COMPILED = (".so", ".pyd", ".pyx")


class Unreadable(Exception):
    """The code base cannot be read as a tree; ``rule`` and ``fix`` go into the spec error."""

    def __init__(self, rule: str, fix: str) -> None:
        super().__init__(rule)
        self.rule, self.fix = rule, fix


@dataclass
class CodeTree:
    """The files of a project, by relative POSIX path, from a folder or an archive."""

    listing: dict[str, set[str]]  # folder ("" for the root) -> names of files and folders in it
    read_bytes: Callable[[str], bytes]  # relative path -> bytes
    bases: list[str] = field(default_factory=list)  # folders modules import from
    package_dirs: dict[str, str] = field(default_factory=dict)  # package -> folder

    def has_file(self, rel: str) -> bool:
        folder, _, name = rel.rpartition("/")
        return name in self.listing.get(folder, set()) and rel not in self.listing

    def read(self, rel: str) -> bytes:
        return self.read_bytes(rel)


@contextmanager
def open_tree(code: Path) -> Iterator[CodeTree]:
    """The tree of the folder or tar archive ``code`` (an archive stays open meanwhile).

    Raises:
        Unreadable: ``code`` is neither a folder nor a readable archive with a project file,
            or the archive breaks a rule that would stop its extraction.
    """
    if code.is_dir():
        tree = CodeTree(_folder_listing(code), lambda rel: (code / rel).read_bytes()[:_MAX_READ])
        _declare_bases(tree)
        yield tree
        return
    if not code.name.endswith(ARCHIVE_SUFFIXES):
        rule = f"the code base must be a folder or a tar archive ({', '.join(ARCHIVE_SUFFIXES)})"
        raise Unreadable(rule, "point at one")
    try:
        archive = tarfile.open(code, "r:*")  # noqa: SIM115 (closed below, after the yield)
    except (OSError, tarfile.TarError, EOFError) as exc:
        rule = f"the archive must be readable ({type(exc).__name__}: {exc})"
        raise Unreadable(
            rule, "pack it again with tar -czf code.tar.gz -C <parent> <folder>"
        ) from None
    with archive:
        limits = settings()
        try:
            members = read_members(
                archive,
                code,
                max_bytes=limits.archive_max_bytes,
                max_members=limits.archive_max_members,
            )
        except ArchiveRefused as refused:
            raise Unreadable(f"the archive {refused.rule}", refused.fix) from None
        yield _archive_tree(archive, members)


def _folder_listing(root: Path) -> dict[str, set[str]]:
    listing: dict[str, set[str]] = {}
    count = 0
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIPPED]
        rel = Path(folder).relative_to(root).as_posix()
        listing[rel if rel != "." else ""] = set(dirnames) | set(filenames)
        count += len(filenames)
        if count > _MAX_FILES:
            break
    return listing


def _archive_tree(archive: tarfile.TarFile, checked: list[tarfile.TarInfo]) -> CodeTree:
    members: dict[str, tarfile.TarInfo] = {}
    for member in checked:
        parts = PurePosixPath(member.name).parts
        parts = tuple(p for p in parts if p != ".")
        if member.isfile() and parts and ".." not in parts and not member.name.startswith("/"):
            members["/".join(parts)] = member
    tops = {name.split("/")[0] for name in members if not name.startswith((".", "__MACOSX"))}
    prefix = ""
    if not any(name in members for name in _PROJECT_FILES):
        top = next(iter(tops)) if len(tops) == 1 else ""
        if not top or not any(f"{top}/{name}" in members for name in _PROJECT_FILES):
            raise Unreadable(
                "the archive must hold setup.py or pyproject.toml at its top or in its single "
                "top-level folder",
                "pack the project folder: tar -czf code.tar.gz -C <parent> <folder>",
            )
        prefix = f"{top}/"
    listing: dict[str, set[str]] = {}
    for name in members:
        if name.startswith(prefix):
            steps = name[len(prefix) :].split("/")
            for depth, step in enumerate(steps):
                listing.setdefault("/".join(steps[:depth]), set()).add(step)

    def read(rel: str) -> bytes:
        handle = archive.extractfile(members[prefix + rel])
        return handle.read(_MAX_READ) if handle is not None else b""

    tree = CodeTree(listing, read)
    _declare_bases(tree)
    return tree


def _declare_bases(tree: CodeTree) -> None:
    """The folders modules import from: the root, ``src/``, and what the project declares."""
    bases = ["", "src"]
    if tree.has_file("pyproject.toml"):
        try:
            tool = tomllib.loads(tree.read("pyproject.toml").decode()).get("tool", {})
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            tool = {}
        setuptools = tool.get("setuptools", {}) if isinstance(tool, dict) else {}
        tree.package_dirs.update(_str_dict(setuptools.get("package-dir")))
        find = setuptools.get("packages", {})
        bases += _str_list(find.get("find", {}).get("where") if isinstance(find, dict) else None)
        poetry = tool.get("poetry", {}) if isinstance(tool, dict) else {}
        for entry in poetry.get("packages", []) if isinstance(poetry, dict) else []:
            bases += _str_list([entry.get("from")] if isinstance(entry, dict) else None)
    if tree.has_file("setup.py"):
        bases += _setup_py_bases(tree)
    bases.append(tree.package_dirs.pop("", ""))
    tree.bases = list(dict.fromkeys(b.strip("/") for b in bases if ".." not in b.split("/")))


def _setup_py_bases(tree: CodeTree) -> list[str]:
    """``package_dir={"": "lib"}`` and ``find_packages("lib")`` in a setup.py, when literal."""
    try:
        module = ast.parse(tree.read("setup.py"))
    except (SyntaxError, ValueError):
        return []
    bases: list[str] = []
    for node in ast.walk(module):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        for keyword in node.keywords:
            if keyword.arg == "package_dir":
                tree.package_dirs.update(_str_dict(_literal(keyword.value)))
            if name in ("find_packages", "find_namespace_packages") and keyword.arg == "where":
                bases += _str_list([_literal(keyword.value)])
        if name in ("find_packages", "find_namespace_packages") and node.args:
            bases += _str_list([_literal(node.args[0])])
    return bases


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _str_dict(value: Any) -> dict[str, str]:
    items = value.items() if isinstance(value, dict) else ()
    return {str(k): v for k, v in items if isinstance(v, str)}


def _str_list(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def module_file(tree: CodeTree, module: str) -> str | None:
    """The module's file in the tree (``""`` for a compiled one), or ``None`` if absent."""
    parts = module.split(".")
    stems = []
    for package, folder in tree.package_dirs.items():  # package-dir = {"mypkg": "lib/mypkg"}
        size = len(package.split("."))
        if parts[:size] == package.split("."):
            stems.append("/".join([folder.strip("/"), *parts[size:]]).strip("/"))
    stems += ["/".join([base, *parts]).strip("/") for base in tree.bases]
    for stem in stems:
        found = _first_file(tree, [f"{stem}.py", f"{stem}/__init__.py"])
        if found:
            return found
        parent, _, last = stem.rpartition("/")
        names = tree.listing.get(parent, set())
        if any(n.startswith(f"{last}.") and n.endswith(_COMPILED) for n in names):
            return ""
    return None


def _first_file(tree: CodeTree, candidates: list[str]) -> str | None:
    return next((c for c in candidates if tree.has_file(c)), None)


def all_modules(tree: CodeTree) -> list[str]:
    """Dotted names of the tree's Python modules, for suggestions."""
    found = []
    for base in tree.bases:
        prefix = f"{base}/" if base else ""
        for folder, names in tree.listing.items():
            inside = folder == base or folder.startswith(prefix)
            if not inside or (not base and folder and folder.split("/")[0] in tree.bases):
                continue
            package = folder[len(prefix) :].replace("/", ".") if folder != base else ""
            for name in names:
                if name.endswith(".py") and name != "setup.py":
                    stem = name[:-3]
                    dotted = package if stem == "__init__" else f"{package}.{stem}".strip(".")
                    found.append(dotted)
    return sorted(set(filter(None, found)))


def in_tree(tree: CodeTree, top: str) -> bool:
    """Whether a top-level package or module ``top`` lies in one of the tree's import folders."""
    return any(
        top in tree.listing.get(base, set()) or f"{top}.py" in tree.listing.get(base, set())
        for base in tree.bases
    )
