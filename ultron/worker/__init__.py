"""The worker side: what a Dask worker runs for each trial (the runner, its warm trial
processes, the checkpoint syncer) and the trial contract the master and the worker share.

:mod:`ultron.worker.process` is the trial process itself, a child of the worker that runs the
user's ``score``.

Names load on first use (:mod:`ultron._lazy`): the trial process imports modules of this
package and must not pay for the rest of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ultron._lazy import lazy_exports

if TYPE_CHECKING:
    from ultron.worker.checkpoint_store import (
        COMMIT_MARKER,
        committed_names,
        listing,
        prune,
        remote_fs,
        restore_latest,
        upload_checkpoint,
    )
    from ultron.worker.checkpoints import flush_checkpoints, restore_for, start_sync
    from ultron.worker.pool import WarmProcess, shutdown_processes, warm_up
    from ultron.worker.runner import run_trial
    from ultron.worker.syncer import CheckpointSyncer
    from ultron.worker.trial import TrialRequest, TrialResult, TrialStatus, trial_seed

__all__ = [
    "COMMIT_MARKER",
    "CheckpointSyncer",
    "TrialRequest",
    "TrialResult",
    "TrialStatus",
    "WarmProcess",
    "committed_names",
    "flush_checkpoints",
    "listing",
    "prune",
    "remote_fs",
    "restore_for",
    "restore_latest",
    "run_trial",
    "shutdown_processes",
    "start_sync",
    "trial_seed",
    "upload_checkpoint",
    "warm_up",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "checkpoint_store": [
            "COMMIT_MARKER",
            "committed_names",
            "listing",
            "prune",
            "remote_fs",
            "restore_latest",
            "upload_checkpoint",
        ],
        "checkpoints": ["flush_checkpoints", "restore_for", "start_sync"],
        "pool": ["WarmProcess", "shutdown_processes", "warm_up"],
        "runner": ["run_trial"],
        "syncer": ["CheckpointSyncer"],
        "trial": ["TrialRequest", "TrialResult", "TrialStatus", "trial_seed"],
    },
)
