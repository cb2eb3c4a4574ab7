"""Reads a job spec from a file, a string or a dict, and turns every problem into one message.

All problems of a spec are reported at once, each naming the field (as the user wrote it,
paper names included), the value, the rule and the fix, with no traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from ultron.datamanager.spec import DataSpec
from ultron.errors import ConfigIssue, SpecError
from ultron.spec.job import DomainSpec, EarlyStopping, JobSpec, Objective, Resources

__all__ = ["PAPER_KEYS", "load_spec"]

# The paper's Fig. 2 keys and where each lands in our spec.
PAPER_KEYS: dict[str, tuple[str, ...]] = {
    "jobname": ("name",),
    "file_name": ("code",),
    "hp_ranges": ("search_space",),
    "parallelism_fact": ("parallelism",),
    "compute": ("resources", "compute"),
    "cpu_per_pod": ("resources", "cpu"),
    "memory_per_pod": ("resources", "memory"),
    "gpu_per_pod": ("resources", "gpu"),
}
_PAPER_MODEL_KEYS = ("model_classname", "module_name", "package_name")

_NESTED: dict[str, type[BaseModel]] = {
    "objective": Objective,
    "resources": Resources,
    "search_space": DomainSpec,
    "early_stopping": EarlyStopping,
    "data": DataSpec,
}

_FIXES = {
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
}


def load_spec(source: str | Path | Mapping[str, Any], *, base_dir: Path | None = None) -> JobSpec:
    """Load and validate a job spec.

    Args:
        source: a path to a YAML/JSON file, or the spec itself as a mapping.
        base_dir: folder that relative paths (``code``) are resolved against; defaults to the
            spec file's folder, or the working directory for a mapping.

    Raises:
        SpecError: listing every problem found.
    """
    label = "job spec"
    if isinstance(source, Mapping):
        raw: Any = dict(source)
    else:
        path = Path(source)
        label = str(path)
        if not path.is_file():
            issue = ConfigIssue("spec", str(path), "the spec file must exist", "check the path")
            raise SpecError([issue], label)
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            issue = ConfigIssue(
                "spec",
                path.name,
                f"it must be valid YAML or JSON ({exc})",
                "fix the syntax at the line shown",
            )
            raise SpecError([issue], label) from None
        base_dir = base_dir or path.parent
    if not isinstance(raw, dict):
        issue = ConfigIssue("spec", raw, "the spec must be a mapping of fields", "see README")
        raise SpecError([issue], label)
    data, names = _from_paper(raw)
    try:
        return JobSpec.model_validate(data, context={"base_dir": base_dir or Path.cwd()})
    except ValidationError as exc:
        raise SpecError([_issue(err, names, data) for err in exc.errors()], label) from None


def _from_paper(raw: dict[str, Any]) -> tuple[dict[str, Any], dict[tuple[str, ...], str]]:
    """Map the paper's keys to ours; return the data and our-path -> user's-name renames."""
    data: dict[str, Any] = {}
    names: dict[tuple[str, ...], str] = {}
    for key, value in raw.items():
        target = PAPER_KEYS.get(key)
        if target is None:
            if key not in _PAPER_MODEL_KEYS:
                data[key] = value
            continue
        names[target] = key
        if len(target) == 1:
            data[target[0]] = value
        else:
            data.setdefault(target[0], {})[target[1]] = value
    if "model_classname" in raw or "module_name" in raw:
        module = str(raw.get("module_name", ""))
        if raw.get("package_name"):
            module = f"{raw['package_name']}.{module}"
        data["model"] = f"{module}:{raw.get('model_classname', '')}"
        names[("model",)] = "model_classname/module_name/package_name"
    if isinstance(data.get("strategy"), str) and data["strategy"].isupper():
        data["strategy"] = data["strategy"].lower()  # the paper writes RANDOM, TPE
    return data, names


def _issue(err: Any, names: dict[tuple[str, ...], str], data: dict[str, Any]) -> ConfigIssue:
    loc = tuple(str(part) for part in err["loc"])
    field = _field_name(loc, names)
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "ultron_rule":
        return ConfigIssue(field, err["input"], ctx["rule"], ctx["fix"])
    if kind == "extra_forbidden":
        known = _known_fields(loc[:-1])
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        fix = f"{hint}remove it or rename it to one of: {', '.join(known)}"
        return ConfigIssue(field, err["input"], "it is not a known field", fix)
    if kind == "missing":
        return ConfigIssue(field, None, "it is required", "add this field (see README)")
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


def _field_name(loc: tuple[str, ...], names: dict[tuple[str, ...], str]) -> str:
    for size in range(len(loc), 0, -1):
        if loc[:size] in names:
            return ".".join((names[loc[:size]], *loc[size:]))
    return ".".join(loc) or "spec"


def _known_fields(parent: tuple[str, ...]) -> list[str]:
    """The field names allowed where an unknown key was found."""
    if not parent:
        return [*JobSpec.model_fields, *PAPER_KEYS, *_PAPER_MODEL_KEYS]
    model = _NESTED.get(parent[0])
    return list(model.model_fields) if model else []
