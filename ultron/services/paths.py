"""Where a job keeps things on this machine and in its storage.

``ULTRON_HOME`` (default ``~/.cache/ultron``) holds what is local and reusable: trial
environments, the embedded Redis server's data, scratch space for checkpoints and trial logs.
The job's results go to the spec's ``storage`` (a folder or an fsspec URL).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from ultron.settings import settings

__all__ = ["artifact_key", "job_results_url", "new_job_id", "scratch_dir", "ultron_home"]


def ultron_home() -> Path:
    """The local folder for environments, the embedded Redis and scratch space (``ULTRON_HOME``)."""
    return settings().home


def scratch_dir(job_id: str) -> Path:
    """Local scratch space of one job: trial checkpoints and logs."""
    return ultron_home() / "scratch" / job_id


def job_results_url(storage: str, job_id: str) -> str:
    """Where the job's results go: ``<storage>/<job_id>``, a folder or a URL."""
    if "://" in storage:
        return f"{storage.rstrip('/')}/{job_id}"
    return str(Path(storage).expanduser().resolve() / job_id)


def new_job_id(name: str, *, suffix: str | None = None) -> str:
    """A readable job id: the job name and ``suffix`` (default a short random one)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name).strip("-") or "job"
    return f"{safe[:40]}-{suffix or uuid.uuid4().hex[:8]}"


def artifact_key(job_id: str, what: str) -> str:
    """The key of one of the job's Prefect artifacts (lowercase letters, digits and dashes)."""
    safe = "".join(c if c.isalnum() else "-" for c in job_id.lower())
    return f"{safe[:90]}-{what}"
