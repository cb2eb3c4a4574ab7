"""Where a job keeps things on this machine and in its storage, and the checks that keep it there.

``ULTRON_HOME`` (default ``~/.cache/ultron``) holds what is local and reusable: trial
environments, the embedded Redis server's data, scratch space for checkpoints and trial logs.
The job's results go to the spec's ``storage`` (a folder or an fsspec URL).

A job id names a folder under both, and Redis keys: :func:`check_job_id` admits only plain
names (letters, digits, ``.``, ``_``, ``-``), so an id can never climb out of a folder or reach
into another job's keys. Every path built from an id is resolved (symlinks followed) and
checked to lie inside its folder (:func:`inside`) before anything is written or deleted there,
and :func:`remove_tree` deletes only inside the folder it is given.

Example:
    >>> check_job_id("quickstart-1a2b")
    'quickstart-1a2b'
    >>> try:
    ...     check_job_id("../elsewhere")
    ... except SpecError as exc:
    ...     print(exc.issues[0].field, exc.issues[0].value)
    job_id ../elsewhere
    >>> job_results_url("s3://bucket/runs/", "quickstart-1a2b")
    's3://bucket/runs/quickstart-1a2b'
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path

from ultron.errors import ConfigIssue, SpecError
from ultron.settings import settings

__all__ = [
    "JOB_ID_MAX_LENGTH",
    "artifact_key",
    "check_job_id",
    "check_trial_id",
    "inside",
    "job_results_url",
    "new_job_id",
    "remove_tree",
    "scratch_dir",
    "storage_location",
    "trial_log_url",
    "ultron_home",
]

JOB_ID_MAX_LENGTH = 128
"""The longest job id: it names folders (255 bytes at most on most filesystems) and keys."""

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_JOB_ID_RULE = (
    f"a job id must be 1 to {JOB_ID_MAX_LENGTH} characters: letters A-Z and a-z, digits, '.', "
    "'_' and '-', starting with a letter or digit"
)
_JOB_ID_FIX = "use a plain name such as my-job-2024-01, or give no job id to get a fresh one"


def ultron_home() -> Path:
    """The local folder for environments, the embedded Redis and scratch space (``ULTRON_HOME``)."""
    return settings().home


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` when it is a plain name that is safe in paths and Redis keys.

    Refused: the empty id, ids longer than :data:`JOB_ID_MAX_LENGTH`, and any character but
    ASCII letters, digits, ``.``, ``_`` and ``-`` (so no ``/``, ``\\``, NUL, whitespace or ``:``),
    and ids that start with ``.``, ``_`` or ``-`` (so no ``.`` or ``..``, hidden folders or
    options).

    Raises:
        SpecError: the id is not such a name; the issue says which part of the rule it breaks.
    """
    return _check_name(job_id, "job_id", fix=_JOB_ID_FIX)


def check_trial_id(trial_id: str) -> str:
    """Return ``trial_id`` when it is a plain name, by the rule of :func:`check_job_id`: a
    trial id names a file in the job's storage (its log), so it must not climb out of it.

    Raises:
        SpecError: the id is not such a name.
    """
    return _check_name(trial_id, "trial_id", fix="use the trial's id as `ultron logs JOB` lists it")


def _check_name(name: str, field: str, *, fix: str) -> str:
    """``name`` if it is a plain name (see :func:`check_job_id`); else a SpecError on ``field``."""
    value: object = name
    problem = None
    if not isinstance(name, str):
        problem = f"it is a {type(name).__name__}, not a string"
    elif not name:
        problem = "it is empty"
    elif len(name) > JOB_ID_MAX_LENGTH:
        problem = f"it has {len(name)} characters"
    elif name in (".", ".."):
        problem = "it names the current or the parent folder"
    elif "/" in name or "\\" in name:
        problem = "it holds a path separator"
    elif "\0" in name:
        problem = "it holds a NUL character"
    elif any(c.isspace() for c in name):
        problem = "it holds whitespace"
    elif not _JOB_ID.fullmatch(name):
        bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "._-"))})
        problem = f"it holds {', '.join(map(repr, bad))}" if bad else f"it starts with {name[0]!r}"
    if problem is None:
        return name
    rule = _JOB_ID_RULE.replace("a job id", f"a {field.replace('_', ' ')}")
    issue = ConfigIssue(field, value, f"{rule} ({problem})", fix)
    raise SpecError([issue], source=field.replace("_", " "))


def inside(
    path: str | os.PathLike[str], root: str | os.PathLike[str], *, what: str = "path"
) -> Path:
    """Return ``path`` resolved, after checking that it lies inside ``root`` (or is ``root``).

    Both are resolved first (``~`` expanded, ``..`` removed, every symlink on the way followed;
    parts that do not exist yet are taken as written), so a link that points out of ``root``
    is caught.

    Args:
        path: the path to check.
        root: the folder it must lie in.
        what: the field the path was built from, named in the error (``job_id``, ``storage``).

    Raises:
        SpecError: the resolved path lies outside the resolved root.
    """
    base = Path(root).expanduser().resolve()
    full = Path(path).expanduser().resolve()
    if full == base or full.is_relative_to(base):
        return full
    issue = ConfigIssue(
        what,
        str(path),
        f"it leads to {full}, which must lie inside {base}",
        "use a plain name without '..', and remove symlinks that point out of that folder",
    )
    raise SpecError([issue], source="path")


def remove_tree(path: str | os.PathLike[str], *, root: str | os.PathLike[str]) -> bool:
    """Delete the folder (or file) ``path``, only when it lies strictly inside ``root``.

    A symlink is removed itself, never what it points to; links inside the tree are removed as
    links too (``shutil.rmtree`` does not follow them). ``root`` itself is never deleted.

    Returns:
        Whether something was deleted (``False`` when ``path`` does not exist).

    Raises:
        SpecError: ``path`` (its parent resolved, for a symlink) lies outside ``root``, or is it.
        OSError: the deletion failed.
    """
    target = Path(path).expanduser()
    base = Path(root).expanduser().resolve()
    if target.is_symlink():
        where = inside(target.parent, base) / target.name
    elif target.exists():
        where = inside(target, base)
    else:
        return False
    if where == base:
        issue = ConfigIssue(
            "path",
            str(path),
            f"it is the folder {base} itself; only what lies inside it may be deleted",
            "delete a folder inside it",
        )
        raise SpecError([issue], source="path")
    if where.is_symlink() or not where.is_dir():
        where.unlink()
    else:
        shutil.rmtree(where)
    return True


def scratch_dir(job_id: str) -> Path:
    """Local scratch space of one job: trial checkpoints and logs (``<home>/scratch/<id>``).

    Raises:
        SpecError: the job id is unsafe, or the folder leads out of ``<home>/scratch`` (a
            symlink).
    """
    base = ultron_home() / "scratch"
    return inside(base / check_job_id(job_id), base, what="job_id")


def job_results_url(storage: str, job_id: str) -> str:
    """Where the job's results go: ``<storage>/<job_id>``, a folder or a URL.

    A folder (also a ``file://`` URL) is resolved, and the result checked to lie inside it;
    in any other URL the checked id adds exactly one plain segment.

    Raises:
        SpecError: the job id is unsafe, or the job's folder leads out of ``storage`` (a
            symlink).
    """
    check_job_id(job_id)
    if storage.startswith("file://"):
        folder = Path(storage[len("file://") :])
        inside(folder / job_id, folder, what="job_id")
        return f"{storage.rstrip('/')}/{job_id}"
    if "://" in storage:
        return f"{storage.rstrip('/')}/{job_id}"
    folder = Path(storage).expanduser().resolve()
    return str(inside(folder / job_id, folder, what="job_id"))


def trial_log_url(results_url: str, trial_id: str) -> str:
    """Where a trial's log goes: ``<results_url>/logs/<trial_id>.log`` (a path or a URL; a
    path is resolved and checked to lie inside ``results_url``).

    Example:
        >>> trial_log_url("s3://bucket/runs/job-1", "0007")
        's3://bucket/runs/job-1/logs/0007.log'

    Raises:
        SpecError: the trial id is not a plain name (it could lead out of the folder).
    """
    name = f"{check_trial_id(trial_id)}.log"
    if "://" in results_url:
        return f"{results_url.rstrip('/')}/logs/{name}"
    return str(inside(Path(results_url) / "logs" / name, results_url, what="trial_id"))


def storage_location(storage: str) -> str:
    """Where ``storage`` is, whatever the working folder: a folder resolved to an absolute path,
    a URL as it is. A job's first run records it, so a resume from another folder writes to
    the same place (:mod:`ultron.master.resume`).

    Example:
        >>> storage_location("s3://bucket/runs"), storage_location("/runs/") == "/runs"
        ('s3://bucket/runs', True)
    """
    if "://" in storage:
        return storage
    return str(Path(storage).expanduser().resolve())


def new_job_id(name: str, *, suffix: str | None = None) -> str:
    """A readable job id: the job name and ``suffix`` (default a short random one).

    The name is made safe: every character but ASCII letters, digits, ``_`` and ``-`` becomes
    ``-``, and it is cut to 40 characters; the result passes :func:`check_job_id`.
    """
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in name)
    safe = safe[:40].strip("-_") or "job"
    return check_job_id(f"{safe}-{suffix or uuid.uuid4().hex[:8]}")


def artifact_key(job_id: str, what: str) -> str:
    """The key of one of the job's Prefect artifacts (lowercase letters, digits and dashes)."""
    safe = "".join(c if c.isalnum() else "-" for c in job_id.lower())
    return f"{safe[:90]}-{what}"
