"""The On Demand Containerizer (paper V-B): the trial environment of a code base, and safe
archive extraction, and the import rules that let a code base own its module names.
"""

from __future__ import annotations

from ultron.containerize.archive import safe_extract
from ultron.containerize.environment import (
    TrialEnvironment,
    build_environment,
    code_hash,
    find_project_root,
)
from ultron.containerize.usercode import import_paths, top_level_names, user_code

__all__ = [
    "TrialEnvironment",
    "build_environment",
    "code_hash",
    "find_project_root",
    "import_paths",
    "safe_extract",
    "top_level_names",
    "user_code",
]
