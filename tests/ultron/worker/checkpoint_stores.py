"""The checkpoint stores the worker's checkpoint tests write to, and checkpoints to put in them.

:class:`Store` is one trial's folder of checkpoints in the job's storage: a local folder or a
real S3 server (moto's, on loopback; the ``store`` fixture of ``conftest.py`` gives each). A
"stalled" filesystem (:class:`StalledFileSystem`, a local folder whose uploads wait on an event)
holds an upload midway deterministically.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ultron.checkpoints import mark_complete, new_checkpoint_dir
from ultron.trial_records import TrialRequest
from ultron.worker import checkpoint_store as store_module
from ultron.worker.checkpoint_store import remote_fs, restore_latest
from ultron.worker.syncer import CheckpointSyncer


@dataclass
class Store:
    """One trial's checkpoints in a store, at ``url`` with fsspec's ``options``."""

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


class StalledFileSystem(LocalFileSystem):
    """A local folder whose uploads wait until ``gate`` is set: a store that hangs."""

    protocol = ("stalled",)
    gate: ClassVar[threading.Event] = threading.Event()
    entered: ClassVar[threading.Event] = threading.Event()

    @classmethod
    def install(cls) -> None:
        """Register ``stalled://`` with fsspec, its gate closed and no upload entered yet."""
        fsspec.register_implementation("stalled", cls, clobber=True)
        cls.gate.clear()
        cls.entered.clear()

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


def attempt_request(
    tmp_path: Path, url: str, machine: str, *, trial_id: str = "0001", resume: bool = False
) -> TrialRequest:
    """A trial's request on ``machine`` (a folder of its own), syncing to ``url``."""
    return TrialRequest(
        job_id="race",
        trial_id=trial_id,
        hyperparameters={},
        model="m:M",
        python="python",
        metric="loss",
        seed=1,
        checkpoint_path=str(tmp_path / machine / "checkpoints" / trial_id),
        log_path=str(tmp_path / machine / "logs" / trial_id),
        redis_url="redis://unused",
        checkpoint_url=url,
        resume=resume,
    )
