"""Reads the code base, without importing or installing it, and checks what the spec names in it.

``ultron validate`` reports a model class or strategy class that the code base does not define
(with the likely spelling), before any environment is built. The code base is a folder or a
``.tar.gz`` archive (read member by member, never extracted); a module is looked for as
``<module path>.py`` or ``<module path>/__init__.py`` at the project root, under ``src/``, and
under the folders ``pyproject.toml`` or ``setup.py`` declare (``package-dir``, ``where``).
The class must be bound at the module's top level: a ``class`` statement, an assignment or an
import. A module that binds names we cannot see (``from x import *``, a module ``__getattr__``,
a compiled extension) and a module that is installed outside the code base are not judged here:
the trial environment's check after containerize sees them
(:mod:`ultron.containerize.modelcheck`).

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> _ = (root / "pyproject.toml").write_text("[project]\\nname = 'p'\\n")
    >>> (root / "pkg").mkdir()
    >>> _ = (root / "pkg" / "__init__.py").write_text("")
    >>> _ = (root / "pkg" / "train.py").write_text(
    ...     "class Model:\\n    def score(self, hp, path, resume):\\n        return 0.0\\n")
    >>> spec = JobSpec.model_validate(
    ...     {"code": str(root), "model": "pkg.train:Modle", "search_space": {"x": [1, 2]}})
    >>> [(issue.field, issue.fix) for issue in check_code_base(spec)]
    [('model', 'did you mean pkg.train:Model? define Modle in pkg/train.py, or fix the name')]
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import tarfile
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ultron.algorithms.registry import is_builtin
from ultron.errors import ConfigIssue
from ultron.spec.job import JobSpec

__all__ = ["check_code_base"]

_PROJECT_FILES = ("pyproject.toml", "setup.py")
_SKIPPED = frozenset({"__pycache__", "node_modules", "build", "dist", "venv", "site-packages"})
_MAX_FILES = 20_000  # modules listed for suggestions; a bigger tree is cut short
_MAX_READ = 8 << 20
_COMPILED = (".so", ".pyd", ".pyx")
_MODEL_METHODS = {"score": 3}
_STRATEGY_METHODS = {"sample_hyperparameter_candidates": 1, "update_state": 2}


def check_code_base(spec: JobSpec) -> list[ConfigIssue]:
    """The problems with the classes ``spec`` names in its code base (empty when none).

    Checks ``model`` and, when it is not a built-in, ``strategy``: the module exists in the
    code base, it parses, it binds the class at its top level; for a class with no base
    classes, that it has the methods its interface needs with signatures that take the
    calls ultron makes, and that the strategy's ``__init__`` takes ``strategy_options``.
    """
    try:
        with _open_tree(Path(spec.code)) as tree:
            issues = _check_class(tree, "model", spec.model, _MODEL_METHODS, construct=True)
            if not is_builtin(spec.strategy):
                issues += _check_class(tree, "strategy", spec.strategy, _STRATEGY_METHODS)
                issues += _check_options(tree, spec)
            return issues
    except _Unreadable as exc:
        return [ConfigIssue("code", str(spec.code), exc.rule, exc.fix)]


class _Unreadable(Exception):
    def __init__(self, rule: str, fix: str) -> None:
        super().__init__(rule)
        self.rule, self.fix = rule, fix


@dataclass
class _Tree:
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
def _open_tree(code: Path) -> Iterator[_Tree]:
    if code.is_dir():
        tree = _Tree(_folder_listing(code), lambda rel: (code / rel).read_bytes()[:_MAX_READ])
        _declare_bases(tree)
        yield tree
        return
    if not code.name.endswith((".tar.gz", ".tgz")):
        raise _Unreadable("the code base must be a folder or a .tar.gz archive", "point at one")
    try:
        archive = tarfile.open(code, "r:*")  # noqa: SIM115 (closed below, after the yield)
    except (OSError, tarfile.TarError) as exc:
        rule = f"the archive must be readable ({exc})"
        raise _Unreadable(rule, "pack it again with tar -czf") from None
    with archive:
        yield _archive_tree(archive)


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


def _archive_tree(archive: tarfile.TarFile) -> _Tree:
    members: dict[str, tarfile.TarInfo] = {}
    for member in archive.getmembers():
        parts = PurePosixPath(member.name).parts
        parts = tuple(p for p in parts if p != ".")
        if member.isfile() and parts and ".." not in parts and not member.name.startswith("/"):
            members["/".join(parts)] = member
    tops = {name.split("/")[0] for name in members if not name.startswith((".", "__MACOSX"))}
    prefix = ""
    if not any(name in members for name in _PROJECT_FILES):
        top = next(iter(tops)) if len(tops) == 1 else ""
        if not top or not any(f"{top}/{name}" in members for name in _PROJECT_FILES):
            raise _Unreadable(
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

    tree = _Tree(listing, read)
    _declare_bases(tree)
    return tree


def _declare_bases(tree: _Tree) -> None:
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


def _setup_py_bases(tree: _Tree) -> list[str]:
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


def _module_file(tree: _Tree, module: str) -> str | None:
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


def _first_file(tree: _Tree, candidates: list[str]) -> str | None:
    return next((c for c in candidates if tree.has_file(c)), None)


def _all_modules(tree: _Tree) -> list[str]:
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


@dataclass
class _Bindings:
    """What a module binds at its top level."""

    names: dict[str, ast.AST | None] = field(default_factory=dict)  # name -> its class or None
    opaque: bool = False  # ``from x import *`` or a module ``__getattr__``: we cannot tell


_COMPOUND = (
    ast.If,
    ast.Try,
    ast.TryStar,
    ast.With,
    ast.AsyncWith,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.Match,
)


def _top_level(body: list[ast.stmt], found: _Bindings) -> _Bindings:
    """Add what the statements bind (inside if/try/with/for/match blocks too) to ``found``."""
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found.names[node.name] = node if isinstance(node, ast.ClassDef) else None
            found.opaque |= node.name == "__getattr__"
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found.names.setdefault(name.id, None)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                found.opaque |= alias.name == "*"
                found.names.setdefault(alias.asname or alias.name.split(".")[0], None)
        elif isinstance(node, _COMPOUND):
            for block in ("body", "orelse", "finalbody"):
                _top_level(getattr(node, block, []), found)
            for holder in [*getattr(node, "handlers", []), *getattr(node, "cases", [])]:
                _top_level(holder.body, found)
    return found


def _split(path: str) -> tuple[str, str]:
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    return module, name


def _check_class(
    tree: _Tree,
    field_name: str,
    path: str,
    methods: dict[str, int],
    *,
    construct: bool = False,
) -> list[ConfigIssue]:
    """Problems with the class at ``path`` (``module:Class``) in the tree."""
    module, name = _split(path)
    found = _find_class(tree, field_name, path)
    if isinstance(found, ConfigIssue):
        return [found]
    if found is None:
        return []
    bindings, rel = found
    if name not in bindings.names:
        if bindings.opaque:
            return []
        close = difflib.get_close_matches(name, list(bindings.names), n=1)
        hint = f"did you mean {module}:{close[0]}? " if close else ""
        return [
            ConfigIssue(
                field_name,
                path,
                f"{module} ({rel}) must define {name} at its top level, and it does not",
                f"{hint}define {name} in {rel}, or fix the name",
            )
        ]
    node = bindings.names[name]
    if not isinstance(node, ast.ClassDef) or node.bases or node.keywords or node.decorator_list:
        return []  # inherited or added methods, or no class statement: the trial check sees them
    return _method_issues(node, field_name, path, methods, construct=construct)


def _find_class(
    tree: _Tree, field_name: str, path: str
) -> tuple[_Bindings, str] | ConfigIssue | None:
    """The module's top-level bindings and file; an issue; or ``None`` if it cannot be judged."""
    module, _ = _split(path)
    rel = _module_file(tree, module)
    if rel is None:
        top = module.split(".")[0]
        if _in_tree(tree, top) is False and importlib.util.find_spec(top) is not None:
            return None  # installed beside ultron, not part of the code base
        close = difflib.get_close_matches(module, _all_modules(tree), n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        where = ", ".join(f"{b}/" if b else "the project root" for b in tree.bases)
        return ConfigIssue(
            field_name,
            path,
            f"the code base must hold module {module} (looked under {where})",
            f"{hint}fix the module path, or add {module.replace('.', '/')}.py to the code base",
        )
    if not rel:
        return None  # a compiled module
    try:
        body = ast.parse(tree.read(rel), filename=rel).body
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        return ConfigIssue(
            field_name,
            path,
            f"{rel} must be valid Python, and it is not ({exc.args[0]} at line {line})",
            f"fix the syntax (python -m py_compile {rel} shows it)",
        )
    return _top_level(body, _Bindings()), rel


def _in_tree(tree: _Tree, top: str) -> bool:
    return any(
        top in tree.listing.get(base, set()) or f"{top}.py" in tree.listing.get(base, set())
        for base in tree.bases
    )


def _method_issues(
    node: ast.ClassDef, field_name: str, path: str, methods: dict[str, int], *, construct: bool
) -> list[ConfigIssue]:
    body = _top_level(node.body, _Bindings()).names
    issues = []
    for method, count in methods.items():
        if method not in body:
            rule = f"{node.name} must have a method {method}(), and it has none"
            fix = f"add def {method}(self, {_PARAMS[method]}) to {node.name}"
            issues.append(ConfigIssue(field_name, path, rule, fix))
            continue
        function = _plain_function(node, method)
        problem = _call_problem(function, count) if function else None
        if problem:
            rule = (
                f"ultron calls {method}({_PARAMS[method]}) positionally, and "
                f"{node.name}.{method} {problem}"
            )
            fix = f"define def {method}(self, {_PARAMS[method]})"
            issues.append(ConfigIssue(field_name, path, rule, fix))
    init = _plain_function(node, "__init__") if construct else None
    problem = _call_problem(init, 0) if init else None
    if problem:
        rule = f"ultron constructs {node.name}() with no arguments, and its __init__ {problem}"
        fix = "give every __init__ argument a default; hyper-parameters reach score()"
        issues.append(ConfigIssue(field_name, path, rule, fix))
    return issues


_PARAMS = {
    "score": "hyperparameters, checkpoint_path, resume",
    "sample_hyperparameter_candidates": "n",
    "update_state": "hyperparameter_candidates, validation_scores",
}


def _plain_function(node: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    """The undecorated ``def name(self, ...)`` in the class body (the last one wins)."""
    found: ast.FunctionDef | None = None
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
            plain = isinstance(item, ast.FunctionDef) and not item.decorator_list
            found = item if plain and isinstance(item, ast.FunctionDef) else None
    return found


def _call_problem(function: ast.FunctionDef, count: int) -> str | None:
    """Why calling the method with ``count`` positional arguments (after self) fails."""
    args = function.args
    positional = [*args.posonlyargs, *args.args][1:]
    required = len(positional) - len(args.defaults)
    kw_defaults = zip(args.kwonlyargs, args.kw_defaults, strict=True)
    missing_kw = [a.arg for a, default in kw_defaults if default is None]
    if count > len(positional) and args.vararg is None:
        return f"takes {len(positional)} argument(s) besides self"
    if count < required:
        names = ", ".join(a.arg for a in positional[count:required])
        return f"{'also ' if count else ''}needs {names}"
    if missing_kw:
        return f"{'also ' if count else ''}needs the keyword argument(s) {', '.join(missing_kw)}"
    return None


def _check_options(tree: _Tree, spec: JobSpec) -> list[ConfigIssue]:
    """A user's strategy options that its ``__init__`` (in the class body) does not take."""
    if not spec.strategy_options:
        return []
    found = _find_class(tree, "strategy", spec.strategy)
    if not isinstance(found, tuple):
        return []
    node = found[0].names.get(_split(spec.strategy)[1])
    if not isinstance(node, ast.ClassDef):
        return []
    init = _plain_function(node, "__init__")
    if init is None:
        return []  # inherited or decorated: build_strategy checks it in the flow
    args = init.args
    if args.kwarg is not None:
        return []
    accepted = [a.arg for a in [*args.args[1:], *args.kwonlyargs]]
    unknown = sorted(set(spec.strategy_options) - set(accepted))
    if not unknown:
        return []
    takes = ", ".join(a for a in accepted if a not in ("search_space", "seed", "direction"))
    return [
        ConfigIssue(
            "strategy_options",
            spec.strategy_options,
            f"{node.name}.__init__ does not take {', '.join(unknown)}",
            f"pass only the options it takes ({takes or 'none'})",
        )
    ]
