"""The checkpoint syncer (paper V-H): a side thread that uploads complete checkpoint folders
to the job's storage, commit marker last, retries what failed and never holds training up.

Each test that takes ``store`` runs against a local folder and against a real S3 server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ultron.worker.checkpoint_stores import (
    StalledFileSystem,
    Store,
    payload,
    write_checkpoint,
)
from ultron.checkpoints import mark_complete
from ultron.worker.checkpoint_store import COMMIT_MARKER
from ultron.worker.syncer import CheckpointSyncer


def test_bad_arguments_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_last is 0; it must be at least 1"):
        CheckpointSyncer(tmp_path, str(tmp_path / "r"), keep_last=0)
    with pytest.raises(ValueError, match="poll_interval_s is 0"):
        CheckpointSyncer(tmp_path, str(tmp_path / "r"), poll_interval_s=0)
    syncer = CheckpointSyncer(tmp_path, str(tmp_path / "r"))
    syncer.stop()
    with pytest.raises(RuntimeError, match="create a new one"):
        syncer.start()


def test_only_complete_folders_are_uploaded(store: Store, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_checkpoint(local, 0)
    write_checkpoint(local, 1, complete=False)
    with store.syncer(local) as syncer:
        assert syncer.flush(timeout_s=30)
        assert syncer.uploaded == ["epoch-0000"]
        fs, root = store.fs()
        assert not fs.exists(f"{root}/epoch-0001/weights.bin")
        mark_complete(local / "epoch-0001")
        assert syncer.flush(timeout_s=30)
    assert syncer.uploaded == ["epoch-0000", "epoch-0001"]
    assert syncer.errors == []


def test_commit_marker_lists_every_file_with_its_size(store: Store, tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "local", 3)
    with store.syncer(tmp_path / "local") as syncer:
        assert syncer.flush(timeout_s=30)
    fs, root = store.fs()
    marker = json.loads(fs.cat_file(f"{root}/epoch-0003/{COMMIT_MARKER}"))
    assert marker["name"] == "epoch-0003"
    assert marker["files"] == {
        "optimizer/state.json": {"size": len(json.dumps({"step": 3}))},
        "weights.bin": {"size": len(payload(3))},
    }
    for rel, entry in marker["files"].items():
        assert fs.size(f"{root}/epoch-0003/{rel}") == entry["size"]
    assert not fs.exists(f"{root}/epoch-0003/COMPLETE")  # the local marker stays local


def test_stop_uploads_what_is_pending(store: Store, tmp_path: Path) -> None:
    local = tmp_path / "local"
    syncer = store.syncer(local, poll_interval_s=3600)  # only stop() will scan again
    syncer.start()
    write_checkpoint(local, 0)
    write_checkpoint(local, 1)
    assert syncer.stop(timeout_s=30)
    assert not syncer.running
    assert syncer.uploaded == ["epoch-0000", "epoch-0001"]
    assert store.committed() == ["epoch-0000", "epoch-0001"]


def test_keep_last_prunes_older_committed_checkpoints(store: Store, tmp_path: Path) -> None:
    local = tmp_path / "local"
    store.pipe("epoch-0000/in-flight.bin", b"another uploader")
    fs, root = store.fs()
    with store.syncer(local, keep_last=2) as syncer:
        for step in (1, 2, 3, 4):
            write_checkpoint(local, step)
            assert syncer.flush(timeout_s=30)
    assert store.committed() == ["epoch-0003", "epoch-0004"]
    assert fs.exists(f"{root}/epoch-0000/in-flight.bin")  # never committed: not ours to prune
    assert not fs.exists(f"{root}/epoch-0001/weights.bin")


def wait_for_a_failure(syncer: CheckpointSyncer) -> None:
    """Wait until the side thread has recorded a failed upload, however long the store takes
    to answer (a loaded machine can take more than a second for the first S3 call)."""
    while not syncer.errors:
        assert not syncer.flush(timeout_s=0.5)  # never uploaded meanwhile; wakes the thread


def test_upload_errors_do_not_raise_and_are_retried_on_s3(
    tmp_path: Path, s3_url: str, s3_storage_options: dict[str, Any]
) -> None:
    bucket = f"later-{tmp_path.name.replace('_', '-').lower()}"[:60]
    store = Store(f"s3://{bucket}/checkpoints/trial-1", s3_storage_options)
    local = tmp_path / "local"
    with store.syncer(local) as syncer:
        write_checkpoint(local, 0)  # the caller's side never sees the failure
        wait_for_a_failure(syncer)
        assert syncer.errors and syncer.uploaded == [] and syncer.running
        assert syncer.pending() == ["epoch-0000"]
        fs, _ = store.fs()
        fs.mkdir(bucket)  # the store comes back
        assert syncer.flush(timeout_s=30)
    assert syncer.uploaded == ["epoch-0000"]
    assert store.restore(tmp_path / "restored") == "epoch-0000"


def test_upload_errors_do_not_raise_and_are_retried_on_a_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store's folder should be")
    store = Store(str(blocker / "checkpoints"), {})
    with store.syncer(tmp_path / "local") as syncer:
        write_checkpoint(tmp_path / "local", 0)
        wait_for_a_failure(syncer)
        assert syncer.errors and syncer.running  # tens of failures; the thread lives on
        blocker.unlink()
        assert syncer.flush(timeout_s=30)
    assert syncer.uploaded == ["epoch-0000"]


def test_training_never_waits_on_a_stalled_store(tmp_path: Path) -> None:
    StalledFileSystem.install()
    local, remote = tmp_path / "local", f"stalled://{tmp_path}/store"
    store = Store(remote, {"skip_instance_cache": True})
    with store.syncer(local, keep_last=2) as syncer:
        write_checkpoint(local, 0)
        assert StalledFileSystem.entered.wait(30)  # the upload of epoch-0000 hangs midway
        for step in (1, 2, 3):  # the training thread goes on writing checkpoints
            write_checkpoint(local, step)
        assert syncer.uploaded == []
        assert store.committed() == []  # no marker before every file is there
        assert store.restore(tmp_path / "early") is None
        StalledFileSystem.gate.set()
        assert syncer.flush(timeout_s=30)
    assert syncer.uploaded == ["epoch-0000", "epoch-0002", "epoch-0003"]  # 1 superseded
    assert store.committed() == ["epoch-0002", "epoch-0003"]
    assert store.restore(tmp_path / "restored") == "epoch-0003"
