"""Where the job's code is, and the class it names: the spec's ``code`` and ``model`` fields.

``code`` is a folder or a tar archive on the worker's disk (relative to the spec file's folder,
holding ``setup.py`` or ``pyproject.toml``), or an object-store URL of a ``.tar.gz`` that
containerize fetches and checks. ``model`` is ``module:Class``. Whether the code base defines
that class is :mod:`ultron.spec.codebase`'s check.

Example:
    >>> check_model_path("pkg.train:Model")
    'pkg.train:Model'
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, StringConstraints, ValidationInfo

from ultron.spec.archive_rules import ARCHIVE_SUFFIXES
from ultron.spec.strict import rule_error

__all__ = ["CodeURL", "check_code_location", "check_model_path"]

CodeURL = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9+.-]*://"),
    Field(title="Object-store URL", description="An fsspec URL of a .tar.gz (s3://...)."),
]
"""A code base in an object store."""

_MODEL_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def check_model_path(value: str) -> str:
    """``model`` as ``module:Class`` (a field validator)."""
    if not _MODEL_PATH.match(value):
        raise rule_error("model must be module:Class", "write e.g. mypkg.train:Model")
    return value


def check_code_location(value: str | Path, info: ValidationInfo) -> str | Path:
    """``code``: an object-store URL of a ``.tar.gz``, or a folder or tar archive that exists
    (resolved against the context's ``base_dir``; not looked at with ``check_paths: False``).
    A field validator."""
    if isinstance(value, str):  # an object-store URL: containerize fetches and checks it
        if not value.endswith((".tar.gz", ".tgz")):
            raise rule_error(
                "a code base in an object store must be a .tar.gz archive",
                "upload tar -czf code.tar.gz of your project (or use ultron submit)",
            )
        return value
    context = info.context or {}
    base_dir = Path(context.get("base_dir", "."))
    path = value if value.is_absolute() else base_dir / value
    if not context.get("check_paths", True):
        return path
    if not path.exists():
        raise rule_error(
            f"the code base must exist (looked at {path})",
            "point code at your project folder or its .tar.gz",
        )
    if path.is_file() and not path.name.endswith(ARCHIVE_SUFFIXES):
        raise rule_error(
            f"the code base must be a folder or a tar archive ({', '.join(ARCHIVE_SUFFIXES)})",
            "package it with tar -czf code.tar.gz, or point code at the project folder",
        )
    if path.is_dir() and not any((path / f).exists() for f in ("setup.py", "pyproject.toml")):
        raise rule_error(
            "the code base folder must hold setup.py or pyproject.toml",
            "add a pyproject.toml that declares your package",
        )
    return path.resolve()
