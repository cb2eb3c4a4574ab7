"""Trial checkpoints (paper V-H): written locally, synced to the object store by a side thread.

The training thread writes each checkpoint into its own folder under the trial's local
``checkpoint_path`` (``epoch-0007/``) and writes a ``COMPLETE`` file into it last
(:mod:`~ultron.checkpoints.local`). A :class:`CheckpointSyncer` thread uploads complete
folders to ``<remote_url>/<name>/`` and writes a ``_COMMITTED`` marker (the file list with
sizes) once every file has arrived (:mod:`~ultron.checkpoints.syncer`). Before ``score``,
:func:`restore_latest` puts the newest committed checkpoint back into ``checkpoint_path``; a
half-uploaded or damaged one is skipped for the one before (:mod:`~ultron.checkpoints.store`).
Names are ordered naturally: ``epoch-10`` is newer than ``epoch-9``.

Example:
    >>> import tempfile
    >>> local, remote = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> with CheckpointSyncer(local, remote) as syncer:
    ...     folder = new_checkpoint_dir(local, 7)
    ...     _ = (folder / "weights.bin").write_bytes(b"0123")
    ...     _ = mark_complete(folder)         # returns at once; the upload happens aside
    ...     syncer.flush(timeout_s=30)
    True
    >>> restore_latest(remote, tempfile.mkdtemp())
    'epoch-0007'
"""

from ultron.checkpoints.local import (
    COMPLETE_MARKER,
    complete_checkpoints,
    is_complete,
    latest_local,
    load_latest_torch,
    mark_complete,
    natural_key,
    new_checkpoint_dir,
    save_torch,
)
from ultron.checkpoints.store import COMMIT_MARKER, restore_latest
from ultron.checkpoints.syncer import CheckpointSyncer

__all__ = [
    "COMMIT_MARKER",
    "COMPLETE_MARKER",
    "CheckpointSyncer",
    "complete_checkpoints",
    "is_complete",
    "latest_local",
    "load_latest_torch",
    "mark_complete",
    "natural_key",
    "new_checkpoint_dir",
    "restore_latest",
    "save_torch",
]
