"""The worker's side of checkpointing: restore before a resumed attempt, sync while it runs.

Each trial attempt on a worker gets a :class:`~ultron.worker.syncer.CheckpointSyncer` that uploads
the complete checkpoint folders of its ``checkpoint_path`` to
``<storage>/<job_id>/checkpoints/<trial_id>/`` from a side thread while the model trains; when
the attempt ends, its answer waits for the last uploads (:func:`finish_sync`), so the trial's next
attempt finds them committed. ``finalize`` calls :func:`flush_checkpoints` on every worker, so the
job completes only once every checkpoint is committed, or names in its summary each one that
never reached the store.
"""

from __future__ import annotations

import logging
import shutil
import threading
from pathlib import Path

from ultron.checkpoints.local import latest_local
from ultron.settings import settings
from ultron.trial_records import TrialRequest
from ultron.worker.checkpoint_store import committed_names, listing, remote_fs, restore_latest
from ultron.worker.syncer import CheckpointSyncer

__all__ = [
    "ExploitError",
    "begin_sync",
    "exploit_for",
    "finish_sync",
    "flush_checkpoints",
    "restore_for",
    "start_sync",
]

logger = logging.getLogger(__name__)

_RETURN_WAIT_S = 120.0
"""How long an attempt's answer waits at most for its last uploads (a store that is away);
``ULTRON_CHECKPOINT_FLUSH_S``, when shorter, bounds it too."""

_syncers: list[tuple[str, CheckpointSyncer]] = []  # (trial id, its attempt's syncer)
_lock = threading.Lock()


def restore_for(request: TrialRequest) -> str | None:
    """Before a resumed attempt: put the newest committed checkpoint into ``checkpoint_path``.

    A local complete checkpoint at least as new is kept as it is; a failure is logged and the
    trial starts from what is there.
    """
    if not request.resume or request.checkpoint_url is None:
        return None
    try:
        name = restore_latest(request.checkpoint_url, request.checkpoint_path)
    except Exception:
        logger.exception("restoring trial %s's checkpoint failed", request.trial_id)
        return None
    logger.info("trial %s resumes from checkpoint %s", request.trial_id, name)
    return name


class ExploitError(RuntimeError):
    """Population-based training found no checkpoint of the trial it was to copy."""


def exploit_for(request: TrialRequest) -> str | None:
    """PBT's exploit, before the attempt: the trial's checkpoints become its source's newest.

    The trial's own checkpoints, here and in the store, are removed first (a retry after a
    crash must never restore the weights it had before the exploit). The source's newest
    complete checkpoint on this machine is copied; on another machine, its newest committed
    one is restored from the store.

    Returns:
        The copied checkpoint's name, or None when the request is no exploit.

    Raises:
        ExploitError: the source has no checkpoint here nor in the store.
    """
    if request.exploit_from is None:
        return None
    _retire(request.trial_id)
    own = Path(request.checkpoint_path)
    shutil.rmtree(own, ignore_errors=True)
    own.mkdir(parents=True, exist_ok=True)
    if request.checkpoint_url is not None:
        fs, root = remote_fs(request.checkpoint_url)
        if listing(fs, root):
            fs.rm(root, recursive=True)
    source = (
        latest_local(request.exploit_checkpoint_path) if request.exploit_checkpoint_path else None
    )
    if source is not None:
        shutil.copytree(source, own / source.name)
        name: str | None = source.name
    elif request.exploit_checkpoint_url is not None:
        name = restore_latest(request.exploit_checkpoint_url, own)
    else:
        name = None
    if name is None:
        raise ExploitError(
            f"population-based training: trial {request.trial_id} was to continue from trial "
            f"{request.exploit_from}'s checkpoint, and that trial saved none. Fix: save a "
            "checkpoint under checkpoint_path every epoch (ultron.checkpoints.save_torch, or "
            "new_checkpoint_dir and mark_complete) and load it when resume is true"
        )
    logger.info(
        "trial %s continues from trial %s's checkpoint %s",
        request.trial_id,
        request.exploit_from,
        name,
    )
    return name


def _retire(trial_id: str) -> None:
    """Stop this worker's syncers of the trial's earlier attempts: what they still upload is
    about to be replaced, and what they would call pending later is another attempt's."""
    with _lock:
        old = [s for t, s in _syncers if t == trial_id]
        _syncers[:] = [(t, s) for t, s in _syncers if t != trial_id]
    for syncer in old:
        syncer.stop(timeout_s=5.0)


def start_sync(request: TrialRequest, *, start: bool = True) -> CheckpointSyncer | None:
    """Start uploading the attempt's complete checkpoints; without ``start`` the caller
    starts it later with :func:`begin_sync`."""
    if request.checkpoint_url is None:
        return None
    syncer = CheckpointSyncer(request.checkpoint_path, request.checkpoint_url, keep_last=2)
    if start:
        begin_sync(syncer, request.trial_id)
    return syncer


def begin_sync(syncer: CheckpointSyncer, trial_id: str) -> None:
    """Start ``syncer``'s thread and make it this worker's syncer of trial ``trial_id``
    (:func:`flush_checkpoints` waits for it, a later attempt's start stops it). Until then
    nothing else stops it, so it cannot be stopped before it started."""
    syncer.start()
    with _lock:
        _syncers[:] = [(t, s) for t, s in _syncers if s.running]
        _syncers.append((trial_id, syncer))


def finish_sync(syncer: CheckpointSyncer | None, trial_id: str) -> bool:
    """The attempt returned: upload what it left and wait for it (its answer waits too).

    The master resumes or retries the trial only once it has the answer, and the next attempt,
    here or on another machine, restores the newest committed checkpoint. Uploads that went on
    in the background let it start first: it restored an older checkpoint than the one this
    attempt returned with (its epochs trained again, from other weights than the stopper
    counted), and both attempts then uploaded the same checkpoint names at once (one removing
    the other's half-uploaded files: an upload found "incomplete").

    Returns:
        Whether everything was committed; if not (the store is away for ``_RETURN_WAIT_S``, or
        ``ULTRON_CHECKPOINT_FLUSH_S`` if shorter), a
        warning says a resume on another machine starts from an older checkpoint, and the
        finalizer names what is missing.
    """
    if syncer is None:
        return True
    if syncer.stop(timeout_s=min(_RETURN_WAIT_S, settings().checkpoint_flush_s)):
        return True
    logger.warning(
        "trial %s returned with checkpoints %s not in the store (%s); a resume on another "
        "machine starts from an older one",
        trial_id,
        syncer.pending(),
        syncer.errors[-1] if syncer.errors else "no error recorded",
    )
    return False


def flush_checkpoints(timeout_s: float = 300.0) -> list[dict[str, str]]:
    """Wait for every pending upload of this worker (the paper's finalizer).

    Returns:
        One entry per checkpoint that could not be committed in ``timeout_s``: ``trial_id``,
        ``checkpoint`` (its folder's name), ``local_path``, ``store_url`` and ``error`` (the
        syncer's last failure, or why none was recorded).
    """
    with _lock:
        syncers = list(_syncers)
        _syncers.clear()
    missing: list[dict[str, str]] = []
    for trial_id, syncer in syncers:
        if syncer.stop(timeout_s=timeout_s):
            continue
        errors = syncer.errors
        stored = _committed(syncer)
        for name in syncer.pending():
            if name in stored:  # committed by a later attempt's syncer (a resume elsewhere)
                continue
            last = next((e for e in reversed(errors) if e.startswith(f"{name}: ")), None)
            missing.append(
                {
                    "trial_id": trial_id,
                    "checkpoint": name,
                    "local_path": str(syncer.local_root / name),
                    "store_url": f"{syncer.remote_url}/{name}",
                    "error": last or (errors[-1] if errors else f"not uploaded in {timeout_s} s"),
                }
            )
    return missing


def _committed(syncer: CheckpointSyncer) -> set[str]:
    """The checkpoints committed in the syncer's store folder (none when it cannot be read)."""
    try:
        fs, root = remote_fs(syncer.remote_url, syncer.storage_options)
        return set(committed_names(listing(fs, root)))
    except OSError:  # the store is away: every pending checkpoint is reported as missing
        return set()
