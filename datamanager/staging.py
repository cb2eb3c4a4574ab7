"""Staging: the job's data copied once into shards of fixed-length records on the job's machine.

TensorFlow cannot read ``s3://`` or Parquet by itself, and a tf.data service worker runs only
graph ops (no Python functions: the pipeline reaches it as a serialized graph through the
dispatcher). So the service's process reads the data once through fsspec and writes it
into shards of fixed-length records (each record one example, its columns' raw bytes one
after the other), which ``tf.data.FixedLengthRecordDataset`` reads at full speed. The
manifest says where each column lies in a record, and its ``sha256`` (of the layout and the
shards' bytes) names the data: the score cache keys on it, so new data is trained anew.

Example:
    >>> import numpy as np, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> np.savez(os.path.join(folder, "a.npz"), x=np.ones((5, 2), "float32"), y=np.arange(5))
    >>> manifest = stage(DataSpec(url="a.npz", shard_rows=2), base_dir=folder,
    ...                  out_dir=os.path.join(folder, "staged"))
    >>> manifest["rows"], manifest["row_bytes"], [s["rows"] for s in manifest["shards"]]
    (5, 16, [2, 2, 1])
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ultron.datamanager.errors import DataServiceError
from ultron.datamanager.sources import read_chunks
from ultron.datamanager.spec import DataSpec

__all__ = ["MANIFEST_NAME", "stage"]

MANIFEST_NAME = "manifest.json"
_SUPPORTED = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")


def stage(spec: DataSpec, *, base_dir: str | Path, out_dir: str | Path) -> dict[str, Any]:
    """Write the data as shards under ``out_dir`` and return the manifest (also written there)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    columns: list[dict[str, Any]] | None = None
    shards: list[dict[str, Any]] = []
    pending: list[np.ndarray] = []
    pending_rows = 0
    for chunk in read_chunks(spec, base_dir=base_dir):
        columns = columns or _layout(chunk)
        pending.append(_records(chunk, columns))
        pending_rows += len(pending[-1])
        while pending_rows >= spec.shard_rows:
            rows = np.concatenate(pending)
            shards.append(_write_shard(out, len(shards), rows[: spec.shard_rows]))
            pending = [rows[spec.shard_rows :]]
            pending_rows = len(pending[0])
    if pending_rows:
        shards.append(_write_shard(out, len(shards), np.concatenate(pending)))
    if not columns or not shards:
        raise DataServiceError(f"{spec.url} holds no examples; write some data there")
    manifest = {
        "root": str(out.resolve()),
        "rows": sum(s["rows"] for s in shards),
        "row_bytes": sum(c["nbytes"] for c in columns),
        "columns": columns,
        "shards": shards,
        "sha256": _digest(columns, shards),
    }
    tmp = out / (MANIFEST_NAME + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, out / MANIFEST_NAME)
    return manifest


def _layout(chunk: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Where each column lies in a record: name, dtype, shape, byte offset and length."""
    columns, offset = [], 0
    for name, array in chunk.items():
        dtype = array.dtype.name
        if dtype not in _SUPPORTED:
            raise DataServiceError(
                f"column {name!r} has dtype {dtype}; the data service streams numbers and "
                f"booleans only ({', '.join(_SUPPORTED)}). Fix: encode it as numbers"
            )
        nbytes = int(array.dtype.itemsize * int(np.prod(array.shape[1:], dtype=np.int64)))
        shape = [int(d) for d in array.shape[1:]]
        columns.append(
            {"name": name, "dtype": dtype, "shape": shape, "offset": offset, "nbytes": nbytes}
        )
        offset += nbytes
    return columns


def _records(chunk: dict[str, np.ndarray], columns: list[dict[str, Any]]) -> np.ndarray:
    """The chunk as an (examples, record bytes) uint8 array, columns in layout order."""
    rows = len(chunk[columns[0]["name"]])
    parts = []
    for column in columns:
        array = np.ascontiguousarray(chunk[column["name"]], dtype=np.dtype(column["dtype"]))
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        parts.append(array.reshape(rows, -1).view(np.uint8).reshape(rows, column["nbytes"]))
    return np.concatenate(parts, axis=1)


def _write_shard(out: Path, index: int, rows: np.ndarray) -> dict[str, Any]:
    name = f"shard-{index:05d}.bin"
    rows = np.ascontiguousarray(rows)
    rows.tofile(out / name)
    return {"file": name, "rows": len(rows), "sha256": hashlib.sha256(rows.data).hexdigest()}


def _digest(columns: list[dict[str, Any]], shards: list[dict[str, Any]]) -> str:
    """The data's content hash: its layout and its shards' hashes, in order."""
    text = json.dumps([columns, [s["sha256"] for s in shards]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
