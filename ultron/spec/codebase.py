"""Reads the code base, without importing or installing it, and checks what the spec names in it.

``ultron validate`` reports a model class or strategy class that the code base does not define
(with the likely spelling), before any environment is built. The code base's files and modules
are read by :mod:`ultron.spec.codetree` (a folder or a ``.tar.gz`` archive, never extracted).
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
from dataclasses import dataclass, field
from pathlib import Path

from ultron.algorithms.registry import is_builtin
from ultron.errors import ConfigIssue
from ultron.spec.codetree import CodeTree, Unreadable, all_modules, in_tree, module_file, open_tree
from ultron.spec.job import JobSpec

__all__ = ["check_code_base"]

_MODEL_METHODS = {"score": 3}
_HOPPER_MODEL_METHODS = {"train_epoch": 3}  # execution: hopper trains a sub-epoch per call
_STRATEGY_METHODS = {"sample_hyperparameter_candidates": 1, "update_state": 2}
_STOPPER_METHODS = {"on_report": 3}


def check_code_base(spec: JobSpec) -> list[ConfigIssue]:
    """The problems with the classes ``spec`` names in its code base (empty when none).

    Checks ``model`` and, when they are not built-ins, ``strategy`` and ``early_stopping.type``
    (a stopper needs ``on_report(trial_id, step, value)``): the module exists in the
    code base, it parses, it binds the class at its top level; for a class with no base
    classes, that it has the methods its interface needs with signatures that take the
    calls ultron makes, and that the strategy's ``__init__`` takes ``strategy_options``.
    """
    try:
        with open_tree(Path(spec.code)) as tree:
            methods = _HOPPER_MODEL_METHODS if spec.execution.hopper else _MODEL_METHODS
            issues = _check_class(tree, "model", spec.model, methods, construct=True)
            if not is_builtin(spec.strategy):
                issues += _check_class(tree, "strategy", spec.strategy, _STRATEGY_METHODS)
                issues += _check_options(tree, spec)
            stopping = spec.early_stopping
            if stopping is not None and _is_path(stopping.type):
                issues += _check_class(tree, "early_stopping.type", stopping.type, _STOPPER_METHODS)
            return issues
    except Unreadable as exc:
        return [ConfigIssue("code", str(spec.code), exc.rule, exc.fix)]


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


def _is_path(name: str) -> bool:
    """Whether ``name`` is a ``package.module:Class`` (not a built-in's bare name)."""
    return ":" in name or "." in name


def _split(path: str) -> tuple[str, str]:
    module, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    return module, name


def _check_class(
    tree: CodeTree,
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
    tree: CodeTree, field_name: str, path: str
) -> tuple[_Bindings, str] | ConfigIssue | None:
    """The module's top-level bindings and file; an issue; or ``None`` if it cannot be judged."""
    module, _ = _split(path)
    rel = module_file(tree, module)
    if rel is None:
        top = module.split(".")[0]
        if in_tree(tree, top) is False and importlib.util.find_spec(top) is not None:
            return None  # installed beside ultron, not part of the code base
        close = difflib.get_close_matches(module, all_modules(tree), n=1)
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
    "train_epoch": "hyperparameters, checkpoint_path, resume",
    "sample_hyperparameter_candidates": "n",
    "update_state": "hyperparameter_candidates, validation_scores",
    "on_report": "trial_id, step, value",
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


def _check_options(tree: CodeTree, spec: JobSpec) -> list[ConfigIssue]:
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
