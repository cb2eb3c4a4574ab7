"""Reads a job spec from a file, a string or a dict, and turns every problem into one message.

All problems of a spec are reported at once, each naming the field (as the user wrote it,
paper names included), the value, the rule and the fix, with no traceback.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ultron.datamanager.spec import DataSpec
from ultron.errors import ConfigIssue, SpecError
from ultron.spec.cluster import AddressCluster, KubernetesCluster, LocalCluster, SlurmCluster
from ultron.spec.codebase import check_code_base
from ultron.spec.job import EarlyStopping, JobSpec, Objective, Resources
from ultron.spec.paper import PAPER_KEYS, PAPER_MODEL_KEYS, from_paper
from ultron.spec.space import ENTRY_TYPES

__all__ = ["PAPER_KEYS", "load_spec"]

_NESTED: dict[str, type[BaseModel]] = {
    "objective": Objective,
    "resources": Resources,
    "early_stopping": EarlyStopping,
    "data": DataSpec,
}

# The cluster section's types, told apart by ``type`` as search-space entries are.
_CLUSTERS: dict[str, type[BaseModel]] = {
    "local": LocalCluster,
    "address": AddressCluster,
    "kubernetes": KubernetesCluster,
    "slurm": SlurmCluster,
}

_SUFFIXES = (".yaml", ".yml", ".json")

_FIXES = {
    "finite_number": "write a finite number (.nan, .inf, NaN and Infinity are refused)",
    "missing": "add this field",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "int_from_float": "write a whole number",
    "float_parsing": "write a number",
    "float_type": "write a number",
    "bool_parsing": "write true or false",
    "string_type": "write a text value",
    "dict_type": "write a mapping of names to values",
    "list_type": "write a list",
    "model_type": "write a mapping of names to values",
    "path_type": "write a path",
    "byte_size": "write a size such as 500MB or 2GiB, or a whole number of bytes",
    "byte_size_unit": "write a size such as 500MB or 2GiB, or a whole number of bytes",
}


def load_spec(
    source: str | Path | Mapping[str, Any],
    *,
    base_dir: Path | None = None,
    check_code: bool = False,
) -> JobSpec:
    """Load and validate a job spec.

    Args:
        source: a path to a YAML/JSON file, or the spec itself as a mapping.
        base_dir: folder that relative paths (``code``) are resolved against; defaults to the
            spec file's folder, or the working directory for a mapping.
        check_code: also read the code base, without importing or installing it, and check
            that the model class and a user's strategy class are defined there
            (:func:`ultron.spec.codebase.check_code_base`).

    Raises:
        SpecError: listing every problem found.
    """
    label = "job spec"
    if isinstance(source, Mapping):
        raw: Any = dict(source)
    else:
        path = Path(source)
        label = str(path)
        raw = _read_file(path, label)
        base_dir = base_dir or path.parent
    if not isinstance(raw, dict):
        kind = "empty" if raw is None else f"a {type(raw).__name__}"
        rule = f"the spec must be a mapping of fields (name: value), and it is {kind}"
        issue = ConfigIssue("spec", raw, rule, "write fields such as name:, code:, model: (README)")
        raise SpecError([issue], label)
    data, names, issues = from_paper(raw)
    try:
        spec = JobSpec.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as exc:
        issues += [_issue(err, names, data) for err in exc.errors()]
    if issues:
        raise SpecError(issues, label) from None
    if check_code:
        issues = [_renamed(issue, names) for issue in check_code_base(spec)]
        if issues:
            raise SpecError(issues, label)
    return spec


def _renamed(issue: ConfigIssue, names: dict[tuple[str, ...], str]) -> ConfigIssue:
    """The issue under the name the user wrote (the paper's keys)."""
    field = _field_name(tuple(issue.field.split(".")), names)
    return ConfigIssue(field, issue.value, issue.rule, issue.fix)


def _read_file(path: Path, label: str) -> Any:
    """The parsed content of a spec file: JSON for ``.json``, YAML otherwise."""

    def fail(rule: str, fix: str, value: object = None) -> SpecError:
        return SpecError([ConfigIssue("spec", value or str(path), rule, fix)], label)

    if path.is_dir():
        found = sorted(p.name for p in path.glob("*") if p.suffix in _SUFFIXES)
        example = path / (found[0] if found else "job.yaml")
        raise fail("it is a folder; the spec must be a YAML or JSON file", f"pass {example}")
    if not path.exists():
        siblings = [p.name for p in path.parent.glob("*")] if path.parent.is_dir() else []
        close = difflib.get_close_matches(path.name, siblings, n=1)
        hint = f"did you mean {path.parent / close[0]}? " if close else ""
        raise fail("the spec file must exist", f"{hint}check the path")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise fail(f"the file must be readable ({exc.strerror})", "check its permissions") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark is allowed, and dropped
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        rule = (
            f"the file must be UTF-8 text, and byte {exc.start} (line {line}) is "
            f"0x{data[exc.start]:02x}, which is not UTF-8 ({exc.reason})"
        )
        raise fail(rule, "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    if not text.strip():
        raise fail("the file is empty; it must hold the job's fields", "write the spec (README)")
    parse = _parse_json if path.suffix == ".json" else _parse_yaml
    return parse(text, path.name, label)


def _duplicate(path: str, key: object, values: list[Any], lines: list[int]) -> ConfigIssue:
    where = f" (lines {', '.join(map(str, lines))})" if lines else ""
    return ConfigIssue(
        f"{path}.{key}" if path else str(key),
        values,
        f"the key is written {len(values)} times in one mapping{where}; a key may appear "
        "once (the parser would keep the last one and drop the others silently)",
        f"keep the {key} you mean and delete the others",
    )


class _DuplicateKeys(Exception):
    def __init__(self, issues: list[ConfigIssue]) -> None:
        super().__init__(issues)
        self.issues = issues


class _UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key written twice in one mapping, at any depth."""

    def construct_document(self, node: yaml.Node) -> Any:
        issues = self._duplicates(node, "", set())
        if issues:
            raise _DuplicateKeys(issues)
        return super().construct_document(node)

    def _duplicates(self, node: yaml.Node, path: str, seen: set[int]) -> list[ConfigIssue]:
        if id(node) in seen:  # an alias: checked where its anchor is
            return []
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            items = [(f"{path}[{i}]", item) for i, item in enumerate(node.value)]
            return [i for where, item in items for i in self._duplicates(item, where, seen)]
        if not isinstance(node, yaml.MappingNode):
            return []
        issues: list[ConfigIssue] = []
        keys: dict[Any, list[tuple[yaml.Node, yaml.Node]]] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            if key_node.tag != "tag:yaml.org,2002:merge":  # << merges; its keys may be replaced
                keys.setdefault(self.construct_object(key_node), []).append((key_node, value_node))
            child = f"{path}.{key_node.value}" if path else str(key_node.value)
            issues += self._duplicates(value_node, child, seen)
        for key, pairs in keys.items():
            if len(pairs) > 1:
                values = [_node_text(v) for _, v in pairs]
                lines = [k.start_mark.line + 1 for k, _ in pairs]
                issues.append(_duplicate(path, key, values, lines))
        return issues


def _node_text(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return str(node.value)
    return "<a list>" if isinstance(node, yaml.SequenceNode) else "<a mapping>"


def _parse_yaml(text: str, name: str, label: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader
    except _DuplicateKeys as exc:
        raise SpecError(exc.issues, label) from None
    except yaml.YAMLError as exc:
        rule = f"it must be valid YAML or JSON ({exc})"
        issue = ConfigIssue("spec", name, rule, "fix the syntax at the line shown")
        raise SpecError([issue], label) from None


class _Repeated(dict[str, Any]):
    """A JSON object with a key written more than once; ``repeated`` holds every value."""

    repeated: dict[str, list[Any]]


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    repeated: dict[str, list[Any]] = {}
    for key, value in pairs:
        if key in obj:
            repeated.setdefault(key, [obj[key]]).append(value)
        obj[key] = value
    if not repeated:
        return obj
    marked = _Repeated(obj)
    marked.repeated = repeated
    return marked


def _json_duplicates(value: Any, path: str) -> list[ConfigIssue]:
    if isinstance(value, list):
        items = [(f"{path}[{i}]", item) for i, item in enumerate(value)]
    elif isinstance(value, dict):
        items = [(f"{path}.{key}" if path else key, item) for key, item in value.items()]
    else:
        return []
    issues = [i for where, item in items for i in _json_duplicates(item, where)]
    for key, values in getattr(value, "repeated", {}).items():
        issues.append(_duplicate(path, key, values, []))
    return issues


def _parse_json(text: str, name: str, label: str) -> Any:
    try:
        raw = json.loads(text, object_pairs_hook=_json_object)
    except json.JSONDecodeError as exc:
        rule = f"it must be valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        issue = ConfigIssue("spec", name, rule, "fix the syntax at that line")
        raise SpecError([issue], label) from None
    issues = _json_duplicates(raw, "")
    if issues:
        raise SpecError(issues, label)
    return raw


def _entry_loc(loc: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """A search-space or cluster error's location without the union's tag, and the tag:
    ``search_space.lr.uniform.low`` is ``search_space.lr.low`` to the user (and
    ``search_space.layers.list.each.width.int.low`` is ``search_space.layers.each.width.low``),
    and ``cluster.address.address`` is ``cluster.address``."""
    if len(loc) > 2 and loc[0] == "search_space" and loc[2] in ENTRY_TYPES:
        rest, tag = loc[3:], loc[2]
        if len(rest) > 2 and rest[0] == "each" and rest[2] in ENTRY_TYPES:
            rest, tag = (*rest[:2], *rest[3:]), rest[2]
        return (*loc[:2], *rest), tag
    if len(loc) > 1 and loc[0] == "cluster" and loc[1] in _CLUSTERS:
        return (loc[0], *loc[2:]), loc[1]
    return loc, None


def _issue(err: Any, names: dict[tuple[str, ...], str], data: dict[str, Any]) -> ConfigIssue:
    loc, tag = _entry_loc(tuple(str(part) for part in err["loc"]))
    field = _field_name(loc, names)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in ("union_tag_invalid", "union_tag_not_found"):  # a search-space entry's type
        types = _CLUSTERS if loc[:1] == ("cluster",) else ENTRY_TYPES
        expected = " or ".join(", ".join(map(repr, types)).rsplit(", ", 1))
        if kind == "union_tag_not_found":
            return ConfigIssue(f"{field}.type", None, f"it is required: {expected}", "add type:")
        close = difflib.get_close_matches(str(ctx.get("tag")), list(types), n=1)
        fix = f"write {close[0]!r}" if close else f"write one of {expected}"
        return ConfigIssue(f"{field}.type", ctx.get("tag"), f"it must be {expected}", fix)
    if kind == "ultron_rule" and ctx.get("where"):  # a rule across entries names its place
        return ConfigIssue(f"{field}.{ctx['where']}", ctx.get("value"), ctx["rule"], ctx["fix"])
    if kind == "ultron_rule":
        return ConfigIssue(field, err["input"], ctx["rule"], ctx["fix"])
    if kind == "extra_forbidden":
        known = _known_fields(loc[:-1], tag)
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        fix = f"{hint}remove it or rename it to one of: {', '.join(known)}"
        return ConfigIssue(field, err["input"], "it is not a known field", fix)
    if kind == "missing":
        return ConfigIssue(field, None, "it is required", "add this field (see README)")
    if kind in ("int_type", "float_type") and isinstance(err["input"], str | bool):
        return _not_a_number(field, err["input"], whole=kind == "int_type")
    if kind in ("enum", "literal_error"):
        expected = ctx.get("expected", "")
        options = [o.strip(" '") for o in expected.replace(" or ", ",").split(",") if o.strip()]
        close = difflib.get_close_matches(str(err["input"]), options, n=1)
        fix = f"write {close[0]!r}" if close else f"write one of {expected}"
        return ConfigIssue(field, err["input"], f"it must be {expected}", fix)
    for bound, word in (("ge", "or more"), ("gt", "or more (strictly)"), ("le", "or less")):
        if bound in ctx:
            rule = err["msg"].replace("Input should be", "it must be")
            return ConfigIssue(field, err["input"], rule, f"set it to {ctx[bound]} {word}")
    rule = err["msg"].replace("Input should be", "it must be")
    return ConfigIssue(field, err["input"], rule, _FIXES.get(kind, "see the spec in README"))


def _not_a_number(field: str, value: str | bool, *, whole: bool) -> ConfigIssue:
    """A number field given text (``"2"``) or true/false: numbers are written bare."""
    kind = "a whole number" if whole else "a number"
    if isinstance(value, bool):
        return ConfigIssue(field, value, f"it must be {kind}, not true/false", f"write {kind}")
    try:
        float(value)
    except ValueError:
        fix = f"write {kind}"
    else:
        fix = f"write {value.strip()} without quotes"
    return ConfigIssue(field, value, f"it must be {kind}, not text", fix)


def _field_name(loc: tuple[str, ...], names: dict[tuple[str, ...], str]) -> str:
    for size in range(len(loc), 0, -1):
        if loc[:size] in names:
            return ".".join((names[loc[:size]], *loc[size:]))
    return ".".join(loc) or "spec"


def _known_fields(parent: tuple[str, ...], tag: str | None = None) -> list[str]:
    """The field names allowed where an unknown key was found (``tag``: in a search-space
    entry of that type)."""
    if not parent:
        return [*JobSpec.model_fields, *PAPER_KEYS, *PAPER_MODEL_KEYS]
    model: type[BaseModel] | None
    if tag:
        model = (_CLUSTERS if parent[:1] == ("cluster",) else ENTRY_TYPES)[tag]
    else:
        model = _NESTED.get(parent[0])
    return list(model.model_fields) if model else []
