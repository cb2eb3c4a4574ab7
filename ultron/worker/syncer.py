"""The checkpoint syncer: a side thread that uploads complete checkpoints (paper V-H)."""

from __future__ import annotations

import collections
import logging
import threading
import time
from pathlib import Path
from typing import Any

from ultron.checkpoints.local import complete_checkpoints
from ultron.worker.checkpoint_store import prune, remote_fs, upload_checkpoint

__all__ = ["CheckpointSyncer"]

logger = logging.getLogger(__name__)

_MAX_BACKOFF_S = 30.0


class CheckpointSyncer:
    """Uploads complete checkpoint folders to the object store from a daemon side thread.

    Every ``poll_interval_s`` the thread looks for complete folders under ``local_root`` that
    are not uploaded yet and uploads each, oldest first, to ``<remote_url>/<name>/``, then
    commits it (:func:`~ultron.worker.checkpoint_store.upload_checkpoint`). A failed upload is
    logged, kept in :attr:`errors` and retried on a later scan, backing off to 30 s; nothing
    raises into the training thread, which never waits on the store. With ``keep_last``,
    older committed checkpoints are deleted from the store (never the newest), and complete
    folders that newer ones supersede before their turn are not uploaded at all.

    Call order: :meth:`start`, any number of :meth:`flush`, then :meth:`stop`, the finalizer:
    a last scan and a wait for what is pending. A stopped syncer cannot start again. Only
    this syncer writes under ``remote_url``; run one per trial.

    Args:
        local_root: the trial's local ``checkpoint_path``.
        remote_url: where its checkpoints go: a folder or an fsspec URL (``s3://bucket/...``).
        storage_options: for the fsspec filesystem (e.g. ``client_kwargs``).
        poll_interval_s: seconds between two scans of ``local_root``.
        keep_last: committed checkpoints kept in the store; None keeps them all.
        checksums: also record each file's sha256 in the commit marker (re-reads every file)
            for :func:`~ultron.worker.checkpoint_store.restore_latest` to verify; sizes always are.

    Example:
        >>> import tempfile
        >>> from ultron.checkpoints import mark_complete, new_checkpoint_dir
        >>> local, remote = tempfile.mkdtemp(), tempfile.mkdtemp()
        >>> syncer = CheckpointSyncer(local, remote, keep_last=1)
        >>> syncer.start()
        >>> for epoch in range(3):
        ...     _ = mark_complete(new_checkpoint_dir(local, epoch))
        >>> syncer.stop(timeout_s=30), syncer.errors
        (True, [])
        >>> sorted(p.name for p in Path(remote).iterdir())
        ['epoch-0002']
    """

    def __init__(
        self,
        local_root: str | Path,
        remote_url: str,
        *,
        storage_options: dict[str, Any] | None = None,
        poll_interval_s: float = 0.5,
        keep_last: int | None = 2,
        checksums: bool = False,
    ) -> None:
        if not poll_interval_s > 0:
            raise ValueError(
                f"poll_interval_s is {poll_interval_s!r}; it must be above 0: e.g. 0.5"
            )
        if keep_last is not None and keep_last < 1:
            raise ValueError(
                f"keep_last is {keep_last!r}; it must be at least 1: pass None to keep all"
            )
        self.local_root = Path(local_root)
        self.remote_url = remote_url.rstrip("/")
        self.storage_options = dict(storage_options or {})
        self.poll_interval_s = poll_interval_s
        self.keep_last = keep_last
        self.checksums = checksums
        self._fs: Any = None
        self._root = ""
        self._uploaded: list[str] = []
        self._done: set[str] = set()  # uploaded, or superseded before its turn
        self._errors: collections.deque[str] = collections.deque(maxlen=100)
        self._prune_due = False
        self._cond = threading.Condition()
        self._sync_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._deadline = 0.0
        self._thread: threading.Thread | None = None

    @property
    def uploaded(self) -> list[str]:
        """Names of the checkpoints this syncer committed (or found committed), in order."""
        with self._cond:
            return list(self._uploaded)

    @property
    def errors(self) -> list[str]:
        """The last 100 failures, each ``"<name>: <error>"``; each was or will be retried."""
        with self._cond:
            return list(self._errors)

    @property
    def running(self) -> bool:
        """Whether the side thread is alive (until a stop has finished its last uploads)."""
        return self._thread is not None and self._thread.is_alive()

    def pending(self) -> list[str]:
        """Complete local checkpoints neither uploaded nor superseded yet."""
        names = [p.name for p in complete_checkpoints(self.local_root)]
        if self.keep_last is not None:
            names = names[-self.keep_last :]
        with self._cond:
            return [n for n in names if n not in self._done]

    def start(self) -> None:
        """Start the side thread (a daemon: :meth:`stop` it before the process ends)."""
        if self._stopping.is_set():
            raise RuntimeError("this CheckpointSyncer was stopped; create a new one to restart")
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"checkpoint-syncer-{self.local_root.name}", daemon=True
            )
            self._thread.start()

    def flush(self, timeout_s: float | None = 60.0) -> bool:
        """Wait until every checkpoint complete now is uploaded; False if time ran out.

        Without a running thread, it scans once in the caller's thread.
        """
        target = {p.name for p in complete_checkpoints(self.local_root)}
        if not self.running:
            self.sync_once()
            with self._cond:
                return not target - self._done
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while target - self._done:
                left = self.poll_interval_s if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.set()  # a retry now, whatever the back-off
                self._cond.wait(min(left, self.poll_interval_s))
        return True

    def stop(self, *, wait: bool = True, timeout_s: float = 60.0) -> bool:
        """Scan a last time and upload what is pending, retrying failures for ``timeout_s``.

        Returns:
            Whether nothing is pending (always read after the wait, if any).
        """
        self._deadline = time.monotonic() + timeout_s
        self._stopping.set()
        self._wake.set()
        if self._thread is None:
            self._run()  # never started: the last scan and its retries in this thread
        elif wait:
            self._thread.join(timeout_s + 5.0)
        return not self.pending()

    def __enter__(self) -> CheckpointSyncer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        failures = 0
        while True:
            self._wake.clear()
            try:
                ok = self.sync_once()
            except Exception as exc:  # e.g. the local folder vanished mid-scan: keep going
                self._record("(scan)", exc)
                ok = False
            failures = 0 if ok else min(failures + 1, 10)
            delay = min(self.poll_interval_s * 2**failures, _MAX_BACKOFF_S)
            if self._stopping.is_set():
                left = self._deadline - time.monotonic()
                if left <= 0 or not self.pending():  # a failed prune does not hold it
                    return
                delay = min(delay, left)
            self._wake.wait(delay)

    def sync_once(self) -> bool:
        """One scan: upload and commit what is pending, then prune. True if nothing failed."""
        with self._sync_lock:
            try:
                if self._fs is None:
                    self._fs, self._root = remote_fs(self.remote_url, self.storage_options)
            except Exception as exc:
                self._record("(storage)", exc)
                return False
            ok = True
            for name in self._candidates():
                try:
                    upload_checkpoint(
                        self._fs, self._root, self.local_root / name, checksums=self.checksums
                    )
                except Exception as exc:
                    self._record(name, exc)
                    ok = False
                    continue
                logger.debug("checkpoint %s committed to %s", name, self.remote_url)
                with self._cond:
                    self._uploaded.append(name)
                    self._done.add(name)
                    self._prune_due = self.keep_last is not None
                    self._cond.notify_all()
            return self._prune() and ok

    def _candidates(self) -> list[str]:
        names = [p.name for p in complete_checkpoints(self.local_root)]
        with self._cond:
            todo = [n for n in names if n not in self._done]
            if self.keep_last is not None:
                newest = set(names[-self.keep_last :])
                self._done.update(n for n in todo if n not in newest)  # pruning would take them
                todo = [n for n in todo if n in newest]
                self._cond.notify_all()
        return todo

    def _prune(self) -> bool:
        if not self._prune_due or self.keep_last is None:
            return True
        try:
            removed = prune(self._fs, self._root, keep_last=self.keep_last)
        except Exception as exc:
            self._record("(prune)", exc)
            return False
        self._prune_due = False
        if removed:
            logger.debug("pruned checkpoints %s from %s", removed, self.remote_url)
        return True

    def _record(self, name: str, exc: BaseException) -> None:
        logger.warning("checkpoint sync of %s to %s failed: %r", name, self.remote_url, exc)
        with self._cond:
            self._errors.append(f"{name}: {type(exc).__name__}: {exc}")
