"""Ultron-AutoML: distributed hyper-parameter optimization on Prefect and Dask.

What a user calls:

- :func:`ultron.run` runs a job from a spec and returns an :class:`~ultron.HPOResult`;
- :func:`ultron.resume` resumes an unfinished job by its id, from the spec it stored;
- :func:`ultron.report` sends intermediate metrics from inside a model's ``score``;
- :class:`ultron.ModelInterface` is the paper's model interface (Fig. 4).

Importing ``ultron`` is light: Prefect and Dask load only when a job runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ultron.errors import SpecError, UltronError
from ultron.model import ModelInterface, ReportDecision, report

if TYPE_CHECKING:
    from ultron.api import resume, run
    from ultron.master.results import HPOResult
    from ultron.spec.job import JobSpec

__all__ = [
    "HPOResult",
    "JobSpec",
    "ModelInterface",
    "ReportDecision",
    "SpecError",
    "UltronError",
    "report",
    "resume",
    "run",
]
__version__ = "0.1.0"

_LAZY = {
    "run": "ultron.api",
    "resume": "ultron.api",
    "HPOResult": "ultron.master.results",
    "JobSpec": "ultron.spec.job",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ultron' has no attribute {name!r}")
