"""Writes the reference pages from the code at build time (mkdocs-gen-files runs this script).

Nothing here is committed as markdown: the job spec's fields come from ``JobSpec``'s JSON schema,
the ``ULTRON_*`` variables from ``UltronSettings``, the commands from the typer app, the Redis
keys from ``ultron.redis.keys``'s docstring, and the contributing guide and the benchmark results
are the repository's own files, shown as they are.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any

import mkdocs_gen_files
import typer

from ultron.cli.main import app
from ultron.redis import keys
from ultron.settings import PREFIX, READ_ELSEWHERE, UltronSettings
from ultron.spec.job import JobSpec

ROOT = Path(__file__).resolve().parent.parent


def _cell(text: Any) -> str:
    """One table cell: no newlines, no bare pipes, reST's inline markup as markdown."""
    return " ".join(_inline(str(text)).split()).replace("|", "\\|")


def _inline(text: str) -> str:
    """reST inline markup of our docstrings and descriptions as markdown."""
    text = re.sub(r":(?:mod|func|data|class|meth|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{_cell(text)}`"


# -- the job spec ------------------------------------------------------------------------------


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _schema_type(schema: dict[str, Any]) -> str:
    """A field's type as a reader writes it, with links to the nested models."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return _code(schema["const"])
    if "enum" in schema:
        return " \\| ".join(_code(value) for value in schema["enum"])
    for union in ("oneOf", "anyOf"):
        if union in schema:
            parts = [_schema_type(option) for option in schema[union]]
            return " \\| ".join(dict.fromkeys(part for part in parts if part))
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items")
        return f"list of {_schema_type(items)}" if items else "list"
    if kind == "object":
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"mapping of name -> {_schema_type(values)}"
        return "mapping"
    if kind == "null":
        return "null"
    return str(kind or schema.get("title", "any"))


def _default(schema: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" in schema:
        return _code(schema["default"])
    return "auto"


def _model_table(model: dict[str, Any]) -> list[str]:
    required = set(model.get("required", []))
    lines = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    for name, prop in model.get("properties", {}).items():
        lines.append(
            f"| `{name}` | {_schema_type(prop)} | {_default(prop, name in required)} "
            f"| {_cell(prop.get('description', ''))} |"
        )
    return lines


def job_spec_page() -> str:
    schema = JobSpec.model_json_schema()
    lines = [
        "# Job spec reference",
        "",
        "Generated from `ultron.spec.JobSpec.model_json_schema()` when the site is built: every",
        "field of the spec and of the models it nests, with its type, default and description.",
        "Unknown keys are errors. A guide to writing a spec is",
        "[The job spec](../guides/job-spec.md).",
        "",
        "## JobSpec",
        "",
        _cell(schema.get("description", "")),
        "",
        *_model_table(schema),
    ]
    for name, model in sorted(schema.get("$defs", {}).items()):
        lines += ["", f"## {name}", "", _cell(model.get("description", "")), ""]
        if "properties" in model:
            lines += _model_table(model)
        elif "enum" in model:
            lines.append("One of: " + ", ".join(_code(value) for value in model["enum"]) + ".")
    return "\n".join(lines) + "\n"


# -- the ULTRON_* settings ---------------------------------------------------------------------


def settings_page() -> str:
    schema = UltronSettings.model_json_schema()
    lines = [
        "# Settings reference",
        "",
        "Generated from `ultron.settings.UltronSettings` when the site is built. Each field reads",
        "the environment variable `ULTRON_<FIELD>`; an empty variable counts as unset, and a bad",
        "value stops the job with an error naming the variable, the value, the rule and the fix.",
        "",
        "| variable | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    for name, field in UltronSettings.model_fields.items():
        prop = schema["properties"][name]
        default = "unset" if field.default is None else _code(str(field.default))
        lines.append(
            f"| `{PREFIX}{name.upper()}` | {_schema_type(prop)} | {default} "
            f"| {_cell(field.description or '')} |"
        )
    lines += [
        "",
        "Read by other programs, not by the package: "
        + ", ".join(f"`{name}`" for name in sorted(READ_ELSEWHERE))
        + " (the extras `scripts/setup.sh` installs, the benchmarks' data folder, and the working",
        "folder of the deployments in `prefect.yaml`). `REDIS_URL` and `PREFECT_API_URL` are read",
        "as they are: see [Redis](../operations/redis.md) and [Servers](../operations/servers.md).",
    ]
    return "\n".join(lines) + "\n"


# -- the CLI -----------------------------------------------------------------------------------


def _param_type(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    return getattr(annotation, "__name__", str(annotation or "text"))


def _usage(path: list[str], command: Any) -> str:
    arguments = [p.name.upper() for p in command.params if not p.opts[0].startswith("-")]
    suffix = " COMMAND [ARGS]..." if hasattr(command, "commands") else ""
    return " ".join([*path, "[OPTIONS]", *arguments]) + suffix


def _command_section(path: list[str], command: Any) -> list[str]:
    level = "#" * min(len(path) + 1, 4)
    lines = [f"{level} `{' '.join(path)}`", "", "```text", _usage(path, command), "```", ""]
    if command.help:
        lines += [inspect.cleandoc(command.help), ""]
    params = [p for p in command.params if not p.hidden and "completion" not in p.name]
    if params:
        lines += ["| parameter | type | default | help |", "| --- | --- | --- | --- |"]
        for param in params:
            names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
            if not param.opts[0].startswith("-"):
                names = f"`{param.name.upper()}`"
            default = "required" if param.required else _code(str(param.default))
            if param.default is None and not param.required:
                default = "unset"
            lines.append(
                f"| {names} | {_param_type(param)} | {default} | {_cell(param.help or '')} |"
            )
        lines.append("")
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            lines += _command_section([*path, name], sub)
    return lines


def cli_page() -> str:
    command = typer.main.get_command(app)
    lines = [
        "# Command-line reference",
        "",
        "Generated from the typer app (`ultron.cli.main.app`) when the site is built: every",
        "command, its arguments and options. Exit statuses: see",
        "[Running a job](../guides/getting-started.md#exit-status).",
        "",
    ]
    return "\n".join(lines + _command_section(["ultron"], command)) + "\n"


# -- the Redis keys, and the repository's own pages --------------------------------------------


def _markdown_from_docstring(text: str) -> str:
    """reST inline markup of our docstrings to markdown; the doctest example left out."""
    return _inline(text.split("\nExample:", 1)[0])


def redis_keys_page() -> str:
    doc = inspect.cleandoc(keys.__doc__ or "")
    return "\n".join(
        [
            "# Redis keys",
            "",
            "Generated from the docstring of `ultron.redis.keys`, the one module that names every",
            "key, when the site is built.",
            "",
            _markdown_from_docstring(doc),
        ]
    )


def repository_page(path: str, title_note: str) -> str:
    """A file of the repository shown as it is; its relative links point at the repository."""
    text = (ROOT / path).read_text(encoding="utf-8")
    return f"!!! note\n    {title_note}\n\n{text}"


PAGES = {
    "reference/job-spec.md": job_spec_page,
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "architecture/redis-keys.md": redis_keys_page,
}

for page, write in PAGES.items():
    with mkdocs_gen_files.open(page, "w") as out:
        out.write(write())
with mkdocs_gen_files.open("contributing.md", "w") as out:
    out.write(repository_page("CONTRIBUTING.md", "`CONTRIBUTING.md` at the repository's root."))
with mkdocs_gen_files.open("benchmarks.md", "w") as out:
    out.write(
        repository_page(
            "benchmarks/RESULTS.md",
            "`benchmarks/RESULTS.md`, the one place benchmark figures live; each is rerun with "
            "the command next to it.",
        )
    )
