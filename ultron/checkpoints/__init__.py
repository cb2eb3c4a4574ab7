"""Trial checkpoints (paper V-H), the side a model's ``score`` uses in the trial process.

The training thread writes each checkpoint into its own folder under the trial's local
``checkpoint_path`` (``epoch-0007/``) and writes a ``COMPLETE`` file into it last:
:func:`save_torch` does both for PyTorch, :func:`new_checkpoint_dir` and :func:`mark_complete`
for anything else. On the worker a side thread uploads complete folders to the job's storage
(:class:`ultron.worker.syncer.CheckpointSyncer`) and puts the newest committed one back before a
resumed attempt. Names are ordered naturally: ``epoch-10`` is newer than ``epoch-9``.

Example:
    >>> import tempfile
    >>> local = tempfile.mkdtemp()
    >>> folder = new_checkpoint_dir(local, 7)
    >>> _ = (folder / "weights.bin").write_bytes(b"0123")
    >>> _ = mark_complete(folder)
    >>> latest_local(local).name
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

__all__ = [
    "COMPLETE_MARKER",
    "complete_checkpoints",
    "is_complete",
    "latest_local",
    "load_latest_torch",
    "mark_complete",
    "natural_key",
    "new_checkpoint_dir",
    "save_torch",
]
