"""Reading a job's trial logs from its storage, and each trial's state from the job's Redis:
what ``ultron logs`` shows, from any machine that reaches both.

The workers write each trial's output, masked, to ``<storage>/<job>/logs/<trial>.log``
(:mod:`ultron.worker.trial_log`); the job's record in Redis names that folder
(``results_url``, written when the search starts). A trial is finished once its row is in the
trial table, or its worker stored the answer of its latest attempt (that worker wrote the whole
log before), or the job no longer runs: :func:`follow_log` reads the state first and the log
after, so its last read holds every line.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(f"{folder}/0001.log", "w").write("hello\\n")
    >>> read_log(f"{folder}/0001.log", 2)
    b'llo\\n'
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ultron.errors import UsageError
from ultron.master.job_state import JobStore
from ultron.paths import job_results_url, trial_log_url
from ultron.redis import keys
from ultron.secrets import MASK
from ultron.trial_records import TrialStatus

__all__ = [
    "PENDING",
    "RUNNING",
    "follow_log",
    "logged_trials",
    "read_log",
    "results_location",
    "trial_state",
]

RUNNING = "running"
"""The state of a trial whose attempt runs now."""
PENDING = "pending"
"""The state of a trial that the job has not run (yet), or that is between two attempts."""

_UNFINISHED = (RUNNING, PENDING)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def results_location(client: Any, job_id: str, *, namespace: str = keys.NAMESPACE) -> str:
    """Where the job's results (and ``logs/``) are: from its record in Redis.

    Raises:
        UsageError: the job is not known, or its storage URL was stored masked (it holds a
            password); the message says to pass ``--storage``.
    """
    store = JobStore(client, job_id, namespace=namespace)
    recorded, spec = (_text(v) for v in client.hmget(store.key, ["results_url", "spec"]))
    if not recorded and not spec:
        raise UsageError(
            f"job {job_id!r} is not known to this Redis. Fix: `ultron jobs` lists them"
        )
    if not recorded:  # a job whose search has not started: its spec's storage, as stored
        recorded = job_results_url(json.loads(spec).get("storage", "ultron-runs"), job_id)
    if MASK in recorded:
        raise UsageError(
            f"job {job_id}'s storage holds a password, stored masked ({recorded}). Fix: pass "
            "the storage with --storage"
        )
    return recorded


def _stored_answer(
    client: Any, job_id: str, trial_id: str, attempt: int, namespace: str
) -> str | None:
    raw = client.get(keys.trial_result(job_id, trial_id, attempt, namespace=namespace))
    return str(json.loads(raw).get("status")) if raw else None


def trial_state(client: Any, job_id: str, trial_id: str, *, namespace: str = keys.NAMESPACE) -> str:
    """The trial's state: :data:`RUNNING`, :data:`PENDING`, or how it ended (a
    :class:`~ultron.trial_records.TrialStatus` value, or ``interrupted`` when the job ended
    with it unfinished)."""
    store = JobStore(client, job_id, namespace=namespace)
    row = client.hget(store.trials_key, trial_id)
    if row:
        return str(json.loads(row)["status"])
    info = store.running().get(trial_id)
    attempt = int(info.get("attempt", 1)) if info else 1
    while info is None and client.exists(
        keys.trial_result(job_id, trial_id, attempt + 1, namespace=namespace)
    ):
        attempt += 1  # not in the running record: its latest stored attempt, if any
    answer = _stored_answer(client, job_id, trial_id, attempt, namespace)
    if answer is not None and answer != TrialStatus.CRASHED:
        return answer  # finished; its row follows with the master's next write
    if _text(client.hget(store.key, "status")) != RUNNING:
        return "interrupted"
    return RUNNING if info is not None else PENDING


def read_log(url: str, offset: int = 0, *, storage_options: dict[str, Any] | None = None) -> bytes:
    """The log at ``url`` from byte ``offset`` on; ``b""`` when there is none (yet)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
    fs.invalidate_cache(path)  # an object store's listing would show an old size
    try:
        size = fs.size(path)
        return b"" if size is None or size <= offset else bytes(fs.cat_file(path, start=offset))
    except FileNotFoundError:
        return b""


def logged_trials(results_url: str) -> list[str]:
    """The ids of the trials with a log under ``<results_url>/logs``, in order."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(f"{results_url.rstrip('/')}/logs")
    fs.invalidate_cache(root)
    try:
        names = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    found = (str(name).rstrip("/").rsplit("/", 1)[-1] for name in names)
    return sorted(name[: -len(".log")] for name in found if name.endswith(".log"))


def follow_log(
    client: Any,
    job_id: str,
    trial_id: str,
    results_url: str,
    write: Callable[[bytes], None],
    *,
    follow: bool = True,
    poll_s: float = 0.5,
    namespace: str = keys.NAMESPACE,
) -> str:
    """Write the trial's log to ``write``; with ``follow``, also what it adds until the trial
    has finished. Returns the trial's state at the last read.
    """
    url = trial_log_url(results_url, trial_id)
    offset = 0
    while True:
        state = trial_state(
            client, job_id, trial_id, namespace=namespace
        )  # first: what is read after is complete
        data = read_log(url, offset)
        if data:
            write(data)
            offset += len(data)
        if not follow or state not in _UNFINISHED:
            return state
        time.sleep(poll_s)  # the log grows in steps of the worker's poll (0.5 s)
