"""A trial attempt's checkpoints on the worker (:mod:`ultron.worker.checkpoints`): its syncer
starts with it, the attempt returns only once its checkpoints are committed, a resumed attempt on
another machine restores what its predecessor returned with, and a flush names each checkpoint
that never reached the store.
"""

from __future__ import annotations

import threading
from pathlib import Path

from tests.ultron.worker.checkpoint_stores import (
    StalledFileSystem,
    Store,
    attempt_request,
    payload,
    write_checkpoint,
)
from ultron.worker.checkpoint_store import COMMIT_MARKER
from ultron.worker.checkpoints import finish_sync, flush_checkpoints, restore_for, start_sync


def test_flush_names_each_checkpoint_that_never_reached_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store" / "checkpoints"
    store.mkdir(parents=True)
    (store / "0002").write_text("a file where trial 0002's folder goes: every write fails")

    for trial_id in ("0001", "0002"):
        url = f"file://{store}/{trial_id}"
        request = attempt_request(tmp_path, url, "local", trial_id=trial_id)
        write_checkpoint(Path(request.checkpoint_path), 0)
        assert start_sync(request) is not None
    missing = flush_checkpoints(timeout_s=1.0)
    assert [(m["trial_id"], m["checkpoint"]) for m in missing] == [("0002", "epoch-0000")]
    (entry,) = missing
    assert entry["local_path"] == str(tmp_path / "local" / "checkpoints" / "0002" / "epoch-0000")
    assert entry["store_url"] == f"file://{store}/0002/epoch-0000"
    assert entry["error"].startswith("epoch-0000: ")  # the syncer's own failure, with its cause
    assert (store / "0001" / "epoch-0000" / COMMIT_MARKER).exists()
    assert flush_checkpoints(timeout_s=1.0) == []  # each syncer is flushed once


def test_a_resumed_attempt_elsewhere_restores_the_checkpoint_its_predecessor_returned_with(
    store: Store, tmp_path: Path
) -> None:
    first = attempt_request(tmp_path, store.url, "machine-a")
    syncer = start_sync(first)
    for step in (1, 2, 3):  # 3: written as the suspended model returned
        write_checkpoint(Path(first.checkpoint_path), step)
    assert finish_sync(syncer, first.trial_id)  # the attempt's answer comes after this
    assert store.committed() == ["epoch-0002", "epoch-0003"] and not syncer.running
    second = attempt_request(tmp_path, store.url, "machine-b", resume=True)
    assert restore_for(second) == "epoch-0003"
    weights = Path(second.checkpoint_path) / "epoch-0003" / "weights.bin"
    assert weights.read_bytes() == payload(3)


def test_an_attempt_returns_only_once_a_slow_upload_is_committed(tmp_path: Path) -> None:
    StalledFileSystem.install()
    first = attempt_request(tmp_path, f"stalled://{tmp_path}/store", "machine-a")
    syncer = start_sync(first)
    write_checkpoint(Path(first.checkpoint_path), 4)

    def store_resumes() -> None:  # the store answers once the upload has begun
        if StalledFileSystem.entered.wait(30):
            StalledFileSystem.gate.set()

    opener = threading.Thread(target=store_resumes)
    opener.start()
    try:
        assert finish_sync(syncer, first.trial_id)
        assert Store(f"{tmp_path}/store", {}).committed() == ["epoch-0004"]
    finally:
        StalledFileSystem.gate.set()
        StalledFileSystem.entered.set()
        opener.join(30)
