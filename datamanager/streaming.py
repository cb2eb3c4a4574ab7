"""Streaming: each trial reads the job's data file by file from the store, never staged whole.

With ``placement: stream`` the job does not copy its data to the job machine and starts no
data service. The master lists the data's files (their sizes and entity tags name the data:
:func:`listing`); each trial reads them itself through fsspec, in an order of its own:

- the files in an order drawn from the trial's seed and the epoch,
- their records through a shuffle buffer of ``shuffle_buffer`` records drawn from the same,

so every record comes once per epoch, the same seed and epoch give the same order, and memory
holds one read chunk and the buffer, whatever the data's size. Records may be strings (text
lines, a Parquet string column) and lists of any length (tokenized text): a batch holds a
NumPy array for a column of numbers or of equal-shape arrays, and a list for the others.

The files fetched are kept in a cache on the machine's disk (:class:`FileCache`), shared by
later epochs, trials and jobs on the same data (keyed by the listing's fingerprint), up to
``stream_cache`` bytes; the files beyond it are read from the store every epoch.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> for i in range(2):
    ...     with open(os.path.join(folder, f"part-{i}.txt"), "w") as f:
    ...         _ = f.write("".join(f"line {i}.{j}\\n" for j in range(3)))
    >>> spec = DataSpec(url=os.path.join(folder, "*.txt"), placement="stream", batch_size=4)
    >>> manifest = listing(spec, base_dir=folder)
    >>> config = {"manifest": manifest, "format": "text", "batch_size": 4, "shuffle_buffer": 8}
    >>> epoch = [b for e, b in epochs(config, seed=1, first_epoch=0, last_epoch=0)]
    >>> [len(b["text"]) for b in epoch if b is not EPOCH_END], epoch[-1] is EPOCH_END
    ([4, 2], True)
    >>> sorted(sum((b["text"] for b in epoch[:-1]), []))[:2]
    ['line 0.0', 'line 0.1']
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ultron.datamanager.sources import RECORD_READERS, as_column, data_files, gunzipped
from ultron.datamanager.spec import DataSpec

__all__ = ["EPOCH_END", "FileCache", "epochs", "listing"]


class _EpochEnd:
    """Marks the end of one epoch in a stream of ``(epoch, batch)``."""


EPOCH_END = _EpochEnd()


def listing(spec: DataSpec, *, base_dir: str | Path) -> dict[str, Any]:
    """The data's files as the trials read them, and the fingerprint that names the data.

    Each file's size and entity tag (an object store's ETag, else its modification time) are
    part of the fingerprint: the score cache and the file cache key on it, so a file
    rewritten is read and trained anew.

    Raises:
        DataValidationError: the URL names no file of the spec's format.
    """
    fs, names = data_files(spec, base_dir=base_dir)
    files = []
    for name in names:
        info = fs.info(name)
        tag = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified")
        files.append({"url": fs.unstrip_protocol(name), "size": int(info["size"]), "tag": str(tag)})
    text = json.dumps([spec.resolved_format(), files], sort_keys=True)
    return {
        "streamed": True,
        "files": files,
        "bytes": sum(f["size"] for f in files),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def epochs(
    config: dict[str, Any],
    *,
    seed: int,
    first_epoch: int,
    last_epoch: int,
    batch_size: int | None = None,
    pipeline: Callable[..., Any] | None = None,
    hyperparameters: dict[str, Any] | None = None,
) -> Iterator[tuple[int, Any]]:
    """``(epoch, batch)`` for each batch of the epochs asked, then ``(epoch, EPOCH_END)``.

    Args:
        config: the trial's data config (``DataServiceHandle.trial_config()``).
        seed: the trial's seed; with the epoch it draws the order.
        first_epoch: the first epoch to read (a resumed trial starts later).
        last_epoch: the last epoch to read.
        batch_size: overrides the config's batch size.
        pipeline: the user's function ``(batch, hyperparameters=, seed=) -> batch``.
        hyperparameters: handed to ``pipeline``.
    """
    size = int(batch_size or config["batch_size"])
    drop = bool(config.get("drop_remainder", False))
    cache = FileCache.of(config)
    for epoch in range(first_epoch, last_epoch + 1):
        epoch_seed = _epoch_seed(seed, epoch)
        rng = np.random.default_rng(epoch_seed)
        records = _shuffled(_records(config, rng, cache), rng, int(config["shuffle_buffer"]))
        batch: list[dict[str, Any]] = []
        for record in records:
            batch.append(record)
            if len(batch) == size:
                yield epoch, _finish(batch, pipeline, hyperparameters, epoch_seed)
                batch = []
        if batch and not drop:
            yield epoch, _finish(batch, pipeline, hyperparameters, epoch_seed)
        yield epoch, EPOCH_END


def _epoch_seed(seed: int, epoch: int) -> int:
    digest = hashlib.sha256(f"{seed}/{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _records(config: dict[str, Any], rng: Any, cache: FileCache | None) -> Iterator[dict[str, Any]]:
    """Every record of the data once, file after file in an order drawn from ``rng``."""
    files = config["manifest"]["files"]
    read = RECORD_READERS[config["format"]]
    for index in rng.permutation(len(files)):
        entry = files[int(index)]
        with _open(entry, cache) as handle:
            yield from read(handle, entry["url"])


def _shuffled(records: Iterator[dict[str, Any]], rng: Any, buffer: int) -> Iterator[dict[str, Any]]:
    """The records through a shuffle buffer of ``buffer`` (0: in the order they come)."""
    if buffer <= 0:
        yield from records
        return
    held: list[dict[str, Any]] = []
    for record in records:
        if len(held) < buffer:
            held.append(record)
            continue
        index = int(rng.integers(buffer))
        held[index], record = record, held[index]
        yield record
    for index in rng.permutation(len(held)):
        yield held[int(index)]


def _finish(
    records: list[dict[str, Any]],
    pipeline: Callable[..., Any] | None,
    hyperparameters: dict[str, Any] | None,
    seed: int,
) -> Any:
    """A batch: column -> NumPy array (numbers, equal-shape arrays) or list (the others)."""
    batch = {key: as_column([r[key] for r in records]) for key in records[0]}
    if pipeline is not None:
        return pipeline(batch, hyperparameters=hyperparameters or {}, seed=seed)
    return batch


@contextlib.contextmanager
def _open(entry: dict[str, Any], cache: FileCache | None) -> Iterator[Any]:
    """A binary file of ``entry``: from the cache when it is there or fits, else the store."""
    import fsspec

    local = cache.fetch(entry) if cache is not None else None
    with open(local, "rb") if local else fsspec.open(entry["url"], "rb").open() as raw:
        yield gunzipped(raw)


class FileCache:
    """The files of one data set fetched to local disk, up to ``limit`` bytes in all.

    A file is fetched whole into ``<folder>/<fingerprint>/`` the first time it is read while the
    cache has room for it; later reads (later epochs, other trials and jobs on the same data)
    open the local copy. A file that does not fit is read from the store each time. One process
    at a time decides and fetches (a lock file), so the folder never holds more than ``limit``
    bytes, and a copy is complete or absent (written aside, then renamed).
    """

    def __init__(self, folder: str | Path, fingerprint: str, limit: int) -> None:
        self.folder = Path(folder) / fingerprint[:32]
        self.limit = limit

    @classmethod
    def of(cls, config: dict[str, Any]) -> FileCache | None:
        """The cache a trial config names (``None``: no cache)."""
        cache = config.get("cache") or {}
        if not cache.get("dir") or int(cache.get("bytes", 0)) <= 0:
            return None
        return cls(cache["dir"], config["manifest"]["sha256"], int(cache["bytes"]))

    def path(self, entry: dict[str, Any]) -> Path:
        """Where ``entry``'s local copy is (or would be)."""
        key = hashlib.sha256(f"{entry['url']}\0{entry['tag']}".encode()).hexdigest()[:32]
        return self.folder / key

    def used(self) -> int:
        """Bytes the complete copies take."""
        return sum(p.stat().st_size for p in self.folder.glob("*") if "." not in p.name)

    def fetch(self, entry: dict[str, Any]) -> Path | None:
        """The local copy of ``entry``, fetched now if it fits; ``None`` if it does not."""
        import fcntl

        import fsspec

        target = self.path(entry)
        if target.exists():
            return target
        if entry["size"] > self.limit:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if target.exists():
                return target
            for stale in self.folder.glob("*.part"):  # a fetch cut short by a dead process
                stale.unlink(missing_ok=True)
            if self.used() + entry["size"] > self.limit:
                return None
            part = target.with_suffix(".part")
            fs, path = fsspec.core.url_to_fs(entry["url"])
            fs.get_file(path, str(part))
            os.replace(part, target)
        return target
