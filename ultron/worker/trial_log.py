"""A trial's log in the job's storage: the worker copies what the trial prints there as it runs.

The trial process writes its stdout and stderr to a file on the worker's disk
(``TrialRequest.log_path``; Python's streams line by line, a C library's as it flushes them).
A side thread of the Dask worker, :class:`TrialLogShipper`, reads what was added every
``poll_s`` seconds (0.5), masks the job's secrets one line at a time
(:func:`ultron.secrets.redact`; a line ends at ``\\n`` or ``\\r``, so a progress bar's updates
go out as they come), and writes the masked lines to ``<storage>/<job>/logs/<trial>.log``
(:func:`ultron.paths.trial_log_url`):

- a folder (a local or a shared disk): the lines are appended after each read;
- an object store (``s3://``, ``gs://``, ...), which cannot append: the whole object is written
  again at most every ``object_interval_s`` seconds (5) when it changed, and once more when the
  trial ends. Its log lags the trial by up to that interval, and each write sends the log so
  far, so a trial that prints megabytes costs as many megabytes per write.

The attempts of a trial share one log: a later attempt appends to what the earlier ones wrote,
after a line ``[ultron] attempt N ...``. The shipper keeps the last :data:`TAIL_LINES` masked
lines of its attempt: a failed trial's row in the trial table holds them. Nothing here raises
into the trial: a failed write is logged, kept in :attr:`TrialLogShipper.errors` and tried again
with the next lines.

Example:
    >>> import os, tempfile
    >>> work = tempfile.mkdtemp()
    >>> local, stored = os.path.join(work, "trial.log"), os.path.join(work, "logs", "0001.log")
    >>> shipper = TrialLogShipper(local, stored)
    >>> shipper.start()
    >>> with open(local, "a") as out:
    ...     _ = out.write("epoch 1 loss 0.5\\nno newline yet")
    >>> shipper.stop(), shipper.tail()
    (True, ['epoch 1 loss 0.5', 'no newline yet'])
    >>> open(stored).read()
    'epoch 1 loss 0.5\\nno newline yet'
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import re
import threading
import time
from typing import Any

from ultron.secrets import add_secrets, job_secrets, redact

__all__ = ["TAIL_LINES", "TrialLogShipper", "ship_trial_log"]

logger = logging.getLogger(__name__)

TAIL_LINES = 20
"""How many of a trial's last lines its row in the trial table keeps when it did not complete."""

_READ_BYTES = 1 << 20  # at most this much per read: a chatty trial is shipped in steps
_LONGEST_LINE = 1 << 16  # a "line" without an end this long is shipped as it is
_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")


class TrialLogShipper:
    """Copies the lines added to a local log file into the job's storage, masked, while a trial
    runs (see the module docstring).

    Call order: :meth:`start`, then :meth:`stop` once, which ships the rest (a last line
    without its end included) in the caller's thread and returns whether everything reached
    the storage. Run one per trial attempt.

    Args:
        local_path: the file the trial process writes to.
        log_url: where the log goes: a path or an fsspec URL (``s3://bucket/job/logs/0001.log``).
        offset: where this attempt's output starts in ``local_path`` (its size before).
        header: a line written before the first line of this attempt (a later attempt's).
        poll_s: seconds between two reads of ``local_path``.
        object_interval_s: least seconds between two writes of an object store's log.
        storage_options: for the fsspec filesystem of ``log_url``.
        remove_local: remove ``local_path`` once everything reached the storage.
    """

    def __init__(
        self,
        local_path: str,
        log_url: str,
        *,
        offset: int = 0,
        header: str | None = None,
        poll_s: float = 0.5,
        object_interval_s: float = 5.0,
        storage_options: dict[str, Any] | None = None,
        remove_local: bool = False,
    ) -> None:
        self.local_path = local_path
        self.remove_local = remove_local
        self.log_url = log_url
        self.poll_s = poll_s
        self.object_interval_s = object_interval_s
        self.storage_options = dict(storage_options or {})
        self._offset = offset
        self._partial = b""  # read, not yet ended by a line end
        self._unsent: list[bytes] = [] if header is None else [redact(header).encode() + b"\n"]
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._appends = "://" not in log_url or log_url.startswith("file://")
        self._whole: bytes | None = None  # an object store's log as last written (and earlier)
        self._written_at = 0.0
        self._errors: collections.deque[str] = collections.deque(maxlen=20)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        if not self._appends:  # the first write comes at once; later ones wait their interval
            self._written_at = -object_interval_s

    @property
    def errors(self) -> list[str]:
        """The last failed writes (each was tried again with the next lines)."""
        with self._lock:
            return list(self._errors)

    def tail(self, lines: int = TAIL_LINES) -> list[str]:
        """The last ``lines`` masked lines of this attempt, without their line ends."""
        with self._lock:
            return list(self._tail)[-lines:]

    def start(self) -> None:
        """Start the side thread (a daemon: :meth:`stop` it when the attempt ends)."""
        self._thread = threading.Thread(
            target=self._run, name=f"trial-log-{os.path.basename(self.log_url)}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Ship what is left and stop; whether everything read reached the storage.

        When it did, the local file is removed: it is not masked, and the storage has it all.
        """
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._lock:
            self._ship(final=True)
            shipped = not self._unsent
        if shipped and self.remove_local:
            with contextlib.suppress(FileNotFoundError):  # the trial printed nothing
                os.remove(self.local_path)
        return shipped

    def _run(self) -> None:
        while not self._stopping.wait(self.poll_s):
            with self._lock:
                self._ship(final=False)

    def _ship(self, *, final: bool) -> None:
        """Read what was added, mask its complete lines and write them (with the lock held)."""
        try:
            self._read(final=final)
        except OSError as exc:  # the trial process has not created its file yet, or it went
            if not isinstance(exc, FileNotFoundError):
                self._record(exc)
        if self._unsent and (final or self._due()):
            try:
                self._write()
            except Exception as exc:  # the storage failed: kept, tried again with the next lines
                self._record(exc)

    def _read(self, *, final: bool) -> None:
        while True:
            with open(self.local_path, "rb") as source:
                source.seek(self._offset)
                data = source.read(_READ_BYTES)
            self._offset += len(data)
            self._split(self._partial + data, final=final)
            if len(data) < _READ_BYTES:
                return

    def _split(self, data: bytes, *, final: bool) -> None:
        end = 0
        for match in _LINE.finditer(data):
            if match.end() == len(data) and data.endswith(b"\r") and not final:
                break  # a "\r" that the next read may follow with "\n"
            self._add(match.group())
            end = match.end()
        rest = data[end:]
        if final or len(rest) >= _LONGEST_LINE:
            if rest:
                self._add(rest)
            rest = b""
        self._partial = rest

    def _add(self, raw: bytes) -> None:
        line = raw.decode("utf-8", errors="replace")
        body = line.rstrip("\r\n")
        masked = redact(body)
        self._unsent.append((masked + line[len(body) :]).encode())
        if body.strip():
            self._tail.append(masked)

    def _due(self) -> bool:
        return self._appends or time.monotonic() - self._written_at >= self.object_interval_s

    def _write(self) -> None:
        import fsspec

        data = b"".join(self._unsent)
        if self._appends:
            path = self.log_url.removeprefix("file://")
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "ab") as out:
                out.write(data)
        else:
            fs, path = fsspec.core.url_to_fs(self.log_url, **self.storage_options)
            if self._whole is None:  # what earlier attempts wrote, kept in front
                try:
                    self._whole = fs.cat_file(path)
                except FileNotFoundError:
                    self._whole = b""
            fs.pipe_file(path, self._whole + data)
            self._whole += data
            self._written_at = time.monotonic()
        self._unsent.clear()

    def _record(self, exc: BaseException) -> None:
        logger.warning("writing the trial log %s failed: %r", self.log_url, exc)
        self._errors.append(f"{type(exc).__name__}: {exc}")


def ship_trial_log(
    local_path: str,
    log_url: str | None,
    *,
    attempt: int,
    worker: str,
    secrets: Any = None,
    start: bool = True,
) -> TrialLogShipper | None:
    """Start shipping this attempt's output of ``local_path`` to ``log_url`` (None: no log
    kept), masking the secrets of ``secrets`` (a trial request's dict: its URLs' passwords)
    and this worker's environment's. The local file goes once all of it is stored.

    The attempt's output is what the file gets from now on. Without ``start`` the caller
    starts the shipper's thread (:meth:`TrialLogShipper.start`), later: what the trial writes
    meanwhile is shipped all the same.
    """
    if log_url is None:
        return None
    add_secrets(job_secrets(secrets))
    try:
        offset = os.path.getsize(local_path)
    except FileNotFoundError:
        offset = 0
    header = f"[ultron] attempt {attempt} on worker {worker}" if attempt > 1 else None
    shipper = TrialLogShipper(local_path, log_url, offset=offset, header=header, remove_local=True)
    if start:
        shipper.start()
    return shipper
