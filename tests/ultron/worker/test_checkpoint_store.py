"""Restoring a trial's newest committed checkpoint from the job's storage (paper V-H): a
damaged, tampered or half-uploaded checkpoint is skipped for the one before it.

Each test that takes ``store`` runs against a local folder and against a real S3 server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ultron.worker.checkpoint_stores import Store, payload, write_checkpoint
from ultron.checkpoints import latest_local
from ultron.worker.checkpoint_store import COMMIT_MARKER


def test_restore_picks_the_newest_committed(store: Store, tmp_path: Path) -> None:
    for step in (1, 2, 9, 10):
        write_checkpoint(tmp_path / "local", step)
    with store.syncer(tmp_path / "local", keep_last=None) as syncer:
        assert syncer.flush(timeout_s=30)
    target = tmp_path / "restored"
    assert store.restore(target) == "epoch-0010"
    assert (target / "epoch-0010" / "weights.bin").read_bytes() == payload(10)
    assert (target / "epoch-0010" / "optimizer" / "state.json").exists()
    assert latest_local(target) == target / "epoch-0010"  # COMPLETE written locally
    assert [p.name for p in target.iterdir()] == ["epoch-0010"]  # no staging left
    assert store.restore(tmp_path / "other") == "epoch-0010"
    assert Store(store.url + "-none", store.options).restore(tmp_path / "empty") is None


@pytest.mark.parametrize("damage", ["no_marker", "truncated", "missing_file", "bad_marker"])
def test_a_damaged_newest_checkpoint_restores_the_one_before(
    store: Store, tmp_path: Path, damage: str
) -> None:
    for step in (1, 2, 3):
        write_checkpoint(tmp_path / "local", step)
    with store.syncer(tmp_path / "local", keep_last=None) as syncer:
        assert syncer.flush(timeout_s=30)
    fs, root = store.fs()
    newest = f"{root}/epoch-0003"
    if damage == "no_marker":
        fs.rm_file(f"{newest}/{COMMIT_MARKER}")
    elif damage == "truncated":
        fs.pipe_file(f"{newest}/weights.bin", payload(3)[:100])
    elif damage == "missing_file":
        fs.rm_file(f"{newest}/optimizer/state.json")
    else:
        fs.pipe_file(f"{newest}/{COMMIT_MARKER}", b'{"files": ')
    target = tmp_path / "restored"
    assert store.restore(target) == "epoch-0002"
    assert (target / "epoch-0002" / "weights.bin").read_bytes() == payload(2)
    assert sorted(p.name for p in target.iterdir()) == ["epoch-0002"]


@pytest.mark.parametrize("name", ["../../outside.bin", "/tmp/absolute.bin", "a/../../b.bin"])
def test_a_marker_naming_files_outside_the_checkpoint_is_never_followed(
    tmp_path: Path, name: str
) -> None:
    store = Store(f"file://{tmp_path}/store/checkpoints/trial-1", {})
    for step in (1, 2):
        write_checkpoint(tmp_path / "local", step)
    with store.syncer(tmp_path / "local", keep_last=None) as syncer:
        assert syncer.flush(timeout_s=30)
    fs, root = store.fs()
    newest = f"{root}/epoch-0002"
    store.pipe(f"epoch-0002/{name.replace('/', '_')}", b"x" * 5)
    marker = {"files": {name: {"size": 5}}}
    fs.pipe_file(f"{newest}/{COMMIT_MARKER}", json.dumps(marker).encode())
    target = tmp_path / "deep" / "restored"
    assert store.restore(target) == "epoch-0001"  # the tampered one is skipped
    written = {p for p in tmp_path.rglob("*.bin") if "store" not in p.parts}
    assert written == {target / "epoch-0001" / "weights.bin", *(tmp_path / "local").rglob("*.bin")}


def test_checksums_catch_a_file_with_the_right_size_and_wrong_bytes(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), {})
    for step in (1, 2):
        write_checkpoint(tmp_path / "local", step)
    with store.syncer(tmp_path / "local", checksums=True) as syncer:
        assert syncer.flush(timeout_s=30)
    (tmp_path / "store" / "epoch-0002" / "weights.bin").write_bytes(b"x" * len(payload(2)))
    assert store.restore(tmp_path / "restored") == "epoch-0001"


def test_a_crashed_upload_is_ignored_then_replaced(store: Store, tmp_path: Path) -> None:
    local = tmp_path / "local"
    write_checkpoint(local, 1)
    with store.syncer(local) as syncer:
        assert syncer.flush(timeout_s=30)
    # A syncer that died midway: one file of epoch-0002 arrived, no marker.
    store.pipe("epoch-0002/stale.bin", b"half")
    fs, root = store.fs()
    assert store.restore(tmp_path / "restored") == "epoch-0001"
    write_checkpoint(local, 2)
    with store.syncer(local) as syncer:
        assert syncer.flush(timeout_s=30)
    assert store.committed() == ["epoch-0001", "epoch-0002"]
    assert not fs.exists(f"{root}/epoch-0002/stale.bin")
    assert store.restore(tmp_path / "restored") == "epoch-0002"


def test_a_newer_local_checkpoint_is_kept_without_download(store: Store, tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "local", 3)
    with store.syncer(tmp_path / "local") as syncer:
        assert syncer.flush(timeout_s=30)
    here = tmp_path / "here"
    write_checkpoint(here, 5)
    write_checkpoint(here, 6, complete=False)
    assert store.restore(here) == "epoch-0005"
    assert sorted(p.name for p in here.iterdir()) == ["epoch-0005", "epoch-0006"]
