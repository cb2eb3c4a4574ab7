"""Checkpoints (paper V-H): local folders, the syncer thread, commit markers and restore.

Each store test runs against a local folder and against a real S3 server (moto's, on
loopback). A "stalled" filesystem (a local folder whose uploads wait on an event) holds an
upload midway deterministically.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from ultron.checkpoints import latest_local, mark_complete, new_checkpoint_dir
from ultron.worker import checkpoint_store as store_module
from ultron.worker.checkpoint_store import COMMIT_MARKER, remote_fs, restore_latest
from ultron.worker.syncer import CheckpointSyncer


@dataclass
class Store:
    url: str
    options: dict[str, Any]

    def fs(self) -> tuple[Any, str]:
        return remote_fs(self.url, self.options)

    def committed(self) -> list[str]:
        fs, root = self.fs()
        return store_module.committed_names(store_module.listing(fs, root))

    def syncer(self, local: Path, **kwargs: Any) -> CheckpointSyncer:
        kwargs.setdefault("poll_interval_s", 0.05)
        return CheckpointSyncer(local, self.url, storage_options=self.options, **kwargs)

    def pipe(self, rel: str, data: bytes) -> None:
        """Write a file into the store behind the syncer's back."""
        fs, root = self.fs()
        if isinstance(fs, LocalFileSystem):
            fs.makedirs(fs._parent(f"{root}/{rel}"), exist_ok=True)
        fs.pipe_file(f"{root}/{rel}", data)

    def restore(self, local: Path) -> str | None:
        return restore_latest(self.url, local, storage_options=self.options)


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "folder":
        return Store(f"file://{tmp_path}/store/checkpoints/trial-1", {})
    s3_url = request.getfixturevalue("s3_url")
    options = request.getfixturevalue("s3_storage_options")
    return Store(f"{s3_url}/{tmp_path.name}/checkpoints/trial-1", options)


def payload(step: int) -> bytes:
    return bytes([step % 256]) * (1000 + step)


def write_checkpoint(root: Path, step: int, *, complete: bool = True) -> Path:
    folder = new_checkpoint_dir(root, step)
    (folder / "weights.bin").write_bytes(payload(step))
    (folder / "optimizer").mkdir()
    (folder / "optimizer" / "state.json").write_text(json.dumps({"step": step}))
    if complete:
        mark_complete(folder)
    return folder


def test_local_layout(tmp_path: Path) -> None:
    for step in (9, 10):
        write_checkpoint(tmp_path, step)
    write_checkpoint(tmp_path, 11, complete=False)
    latest = latest_local(tmp_path)
    assert latest is not None and latest.name == "epoch-0010"  # natural order, 11 incomplete
    assert (tmp_path / "epoch-0011" / "weights.bin").exists()
    assert new_checkpoint_dir(tmp_path, 11).exists()  # a leftover is emptied ...
    assert list((tmp_path / "epoch-0011").iterdir()) == []
    with pytest.raises(FileExistsError, match="already complete"):  # ... a complete one kept
        new_checkpoint_dir(tmp_path, 10)
    with pytest.raises(ValueError, match="step is -1"):
        new_checkpoint_dir(tmp_path, -1)
    with pytest.raises(FileNotFoundError, match="new_checkpoint_dir"):
        mark_complete(tmp_path / "nope")


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


def test_upload_errors_do_not_raise_and_are_retried_on_s3(
    tmp_path: Path, s3_url: str, s3_storage_options: dict[str, Any]
) -> None:
    bucket = f"later-{tmp_path.name.replace('_', '-').lower()}"[:60]
    store = Store(f"s3://{bucket}/checkpoints/trial-1", s3_storage_options)
    local = tmp_path / "local"
    with store.syncer(local) as syncer:
        write_checkpoint(local, 0)  # the caller's side never sees the failure
        assert not syncer.flush(timeout_s=0.5)
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
        assert not syncer.flush(timeout_s=0.5)
        assert syncer.errors and syncer.running  # tens of failures; the thread lives on
        blocker.unlink()
        assert syncer.flush(timeout_s=30)
    assert syncer.uploaded == ["epoch-0000"]


class StalledFileSystem(LocalFileSystem):
    """A local folder whose uploads wait until ``gate`` is set: a store that hangs."""

    protocol = ("stalled",)
    gate: ClassVar[threading.Event] = threading.Event()
    entered: ClassVar[threading.Event] = threading.Event()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("stalled://"):
            path = path[len("stalled://") :]
        return super()._strip_protocol(path)

    def put_file(self, lpath: Any, rpath: Any, callback: Any = None, **kwargs: Any) -> Any:
        type(self).entered.set()
        if not type(self).gate.wait(60):
            raise TimeoutError("the test never opened the gate")
        return super().put_file(lpath, rpath, callback=callback, **kwargs)


def test_training_never_waits_on_a_stalled_store(tmp_path: Path) -> None:
    fsspec.register_implementation("stalled", StalledFileSystem, clobber=True)
    StalledFileSystem.gate.clear()
    StalledFileSystem.entered.clear()
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


def test_torch_helpers_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs the torch extra")
    from ultron.checkpoints import load_latest_torch, save_torch

    assert load_latest_torch(tmp_path) is None
    for step in (1, 2):
        save_torch({"step": step, "w": torch.full((3,), float(step))}, tmp_path, step)
    state = load_latest_torch(tmp_path)
    assert state is not None
    assert state["step"] == 2 and torch.equal(state["w"], torch.full((3,), 2.0))


def test_flush_names_each_checkpoint_that_never_reached_the_store(tmp_path: Path) -> None:
    from ultron.trial_records import TrialRequest
    from ultron.worker.checkpoints import flush_checkpoints, start_sync

    store = tmp_path / "store" / "checkpoints"
    store.mkdir(parents=True)
    (store / "0002").write_text("a file where trial 0002's folder goes: every write fails")

    def request(trial_id: str) -> TrialRequest:
        return TrialRequest(
            job_id="flush",
            trial_id=trial_id,
            hyperparameters={},
            model="m:M",
            python="python",
            metric="loss",
            seed=1,
            checkpoint_path=str(tmp_path / "local" / trial_id),
            log_path=str(tmp_path / "logs" / trial_id),
            redis_url="redis://unused",
            checkpoint_url=f"file://{store}/{trial_id}",
        )

    for trial_id in ("0001", "0002"):
        write_checkpoint(tmp_path / "local" / trial_id, 0)
        assert start_sync(request(trial_id)) is not None
    missing = flush_checkpoints(timeout_s=1.0)
    assert [(m["trial_id"], m["checkpoint"]) for m in missing] == [("0002", "epoch-0000")]
    (entry,) = missing
    assert entry["local_path"] == str(tmp_path / "local" / "0002" / "epoch-0000")
    assert entry["store_url"] == f"file://{store}/0002/epoch-0000"
    assert entry["error"].startswith("epoch-0000: ")  # the syncer's own failure, with its cause
    assert (store / "0001" / "epoch-0000" / COMMIT_MARKER).exists()
    assert flush_checkpoints(timeout_s=1.0) == []  # each syncer is flushed once


def _attempt(tmp_path: Path, url: str, machine: str, *, resume: bool = False) -> Any:
    from ultron.trial_records import TrialRequest

    return TrialRequest(
        job_id="race",
        trial_id="0001",
        hyperparameters={},
        model="m:M",
        python="python",
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / machine / "checkpoints" / "0001"),
        log_path=str(tmp_path / machine / "logs" / "0001"),
        redis_url="redis://unused",
        checkpoint_url=url,
        resume=resume,
    )


def test_a_resumed_attempt_elsewhere_restores_the_checkpoint_its_predecessor_returned_with(
    store: Store, tmp_path: Path
) -> None:
    from ultron.worker.checkpoints import finish_sync, restore_for, start_sync

    first = _attempt(tmp_path, store.url, "machine-a")
    syncer = start_sync(first)
    for step in (1, 2, 3):  # 3: written as the suspended model returned
        write_checkpoint(Path(first.checkpoint_path), step)
    assert finish_sync(syncer, first.trial_id)  # the attempt's answer comes after this
    assert store.committed() == ["epoch-0002", "epoch-0003"] and not syncer.running
    second = _attempt(tmp_path, store.url, "machine-b", resume=True)
    assert restore_for(second) == "epoch-0003"
    weights = Path(second.checkpoint_path) / "epoch-0003" / "weights.bin"
    assert weights.read_bytes() == payload(3)


def test_an_attempt_returns_only_once_a_slow_upload_is_committed(tmp_path: Path) -> None:
    from ultron.worker.checkpoints import finish_sync, start_sync

    fsspec.register_implementation("stalled", StalledFileSystem, clobber=True)
    StalledFileSystem.gate.clear()
    StalledFileSystem.entered.clear()
    first = _attempt(tmp_path, f"stalled://{tmp_path}/store", "machine-a")
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
