"""The On Demand Containerizer (paper V-B): the trial environment of a code base, the check of
the model class in it, safe archive extraction, and the import rules that let a code base own
its module names.

Names load on first use (:mod:`ultron._lazy`): the trial process imports
:mod:`ultron.containerize.usercode` and must not pay for building environments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ultron._lazy import lazy_exports

if TYPE_CHECKING:
    from ultron.containerize.archive import safe_extract
    from ultron.containerize.codebase import code_hash
    from ultron.containerize.environment import (
        TrialEnvironment,
        build_environment,
        find_project_root,
    )
    from ultron.containerize.modelcheck import check_model
    from ultron.containerize.usercode import claim_names, import_paths, top_level_names, user_code

__all__ = [
    "TrialEnvironment",
    "build_environment",
    "check_model",
    "claim_names",
    "code_hash",
    "find_project_root",
    "import_paths",
    "safe_extract",
    "top_level_names",
    "user_code",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "archive": ["safe_extract"],
        "codebase": ["code_hash"],
        "environment": ["TrialEnvironment", "build_environment", "find_project_root"],
        "modelcheck": ["check_model"],
        "usercode": ["claim_names", "import_paths", "top_level_names", "user_code"],
    },
)
