"""Reading the job's data from a folder or an object store, in chunks of columns.

Every format comes out the same way: an iterator of chunks, each a ``dict`` of column name to a
NumPy array whose first axis is the example. The staging step and the validation both read
through here, so they see the same data.

Example:
    >>> import numpy as np, tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> np.savez(os.path.join(folder, "a.npz"), x=np.zeros((3, 2), "float32"), y=np.arange(3))
    >>> spec = DataSpec(url="a.npz")
    >>> [sorted(chunk) for chunk in read_chunks(spec, base_dir=folder)]
    [['x', 'y']]
"""

from __future__ import annotations

import gzip
import io
import json
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ultron.datamanager.errors import DataServiceError, DataValidationError, ExpectationFailure
from ultron.datamanager.spec import SUFFIX_FORMATS, DataSpec

__all__ = ["RECORD_READERS", "STREAMED_FORMATS", "data_files", "read_chunks", "resolve_url"]

_SUFFIXES = {
    fmt: tuple(suffix for suffix, of in SUFFIX_FORMATS.items() if of == fmt and suffix != ".npy")
    for fmt in set(SUFFIX_FORMATS.values())
}
_MAX_RECORD_BYTES = 1 << 31  # a longer TFRecord "record" is a file that is not TFRecord
_READ_ROWS = 1024  # Parquet rows read at a time when streamed


def resolve_url(url: str, *, base_dir: str | Path) -> str:
    """A URL as fsspec reads it: relative paths are taken from ``base_dir``."""
    if "://" in url or Path(url).is_absolute():
        return url
    return str((Path(base_dir) / url).resolve())


def data_files(spec: DataSpec, *, base_dir: str | Path) -> tuple[Any, list[str]]:
    """The filesystem and the sorted data files the spec's ``url`` names.

    Raises:
        DataValidationError: when the URL names no file of the spec's format.
    """
    import fsspec

    url = resolve_url(spec.url, base_dir=base_dir)
    fs, path = fsspec.core.url_to_fs(url)
    fmt = spec.resolved_format() or ""
    if any(ch in path for ch in "*?["):
        files = fs.glob(path)
    elif fs.isdir(path):
        files = [f for f in fs.find(path) if f.lower().endswith(_SUFFIXES[fmt])]
    else:
        files = [path] if fs.exists(path) else []
    if not files:
        failure = ExpectationFailure(
            "data files exist",
            None,
            f"no {fmt} file found at {url}",
            f"check data.url, or write the files ({', '.join(_SUFFIXES[fmt])}) there",
        )
        raise DataValidationError(url, [failure])
    return fs, sorted(files)


def read_chunks(
    spec: DataSpec, *, base_dir: str | Path, max_rows: int | None = None
) -> Iterator[dict[str, np.ndarray]]:
    """The data as chunks of columns, every chunk with the same columns, dtypes and shapes."""
    fs, files = data_files(spec, base_dir=base_dir)
    reader = {
        "numpy": _numpy_chunks,
        "parquet": _parquet_chunks,
        "tfrecord": _tfrecord_chunks,
        "text": _record_chunks,
        "jsonl": _record_chunks,
    }[spec.resolved_format() or ""]
    schema: dict[str, tuple[str, tuple[int, ...]]] | None = None
    remaining = max_rows
    for name in files:
        for chunk in reader(fs, name, spec):
            chunk = _reshape(chunk, spec)
            this = {k: (str(v.dtype), tuple(v.shape[1:])) for k, v in chunk.items()}
            schema = schema or this
            if this != schema:
                _schema_mismatch(name, schema, this)
            if remaining is not None:
                chunk = {k: v[:remaining] for k, v in chunk.items()}
                remaining -= len(next(iter(chunk.values())))
            yield chunk
            if remaining is not None and remaining <= 0:
                return


def _schema_mismatch(name: str, first: dict[str, Any], this: dict[str, Any]) -> None:
    failure = ExpectationFailure(
        "every file has the same columns, dtypes and shapes",
        None,
        f"{name} has {this}, the first file has {first}",
        "write every file with the same columns",
    )
    raise DataValidationError(name, [failure])


def _reshape(chunk: dict[str, np.ndarray], spec: DataSpec) -> dict[str, np.ndarray]:
    """Apply the shapes ``features`` declares (a Parquet list column of 3072 -> 32x32x3)."""
    lengths = {len(v) for v in chunk.values()}
    if len(lengths) > 1:
        raise DataValidationError(
            spec.url,
            [
                ExpectationFailure(
                    "every column has one value per example",
                    None,
                    f"columns of lengths {sorted(lengths)}",
                    "write columns of equal length",
                )
            ],
        )
    out = {}
    for key, value in chunk.items():
        feature = spec.features.get(key)
        out[key] = value.reshape(len(value), *feature.shape) if feature else value
    return out


def _numpy_chunks(fs: Any, name: str, spec: DataSpec) -> Iterator[dict[str, np.ndarray]]:
    with fs.open(name, "rb") as handle:
        payload = io.BytesIO(handle.read())
    with np.load(payload, allow_pickle=False) as arrays:
        yield {key: np.asarray(arrays[key]) for key in arrays.files}


def _parquet_chunks(fs: Any, name: str, spec: DataSpec) -> Iterator[dict[str, np.ndarray]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("Parquet data needs pyarrow: pip install 'ultron-automl[data]'") from exc
    with fs.open(name, "rb") as handle:
        parquet = pq.ParquetFile(handle)
        for batch in parquet.iter_batches(batch_size=spec.shard_rows):
            yield {col: _column(batch.column(col), name, col) for col in batch.schema.names}


def _column(column: Any, name: str, col: str) -> np.ndarray:
    """A pyarrow column as NumPy: scalars as they are, lists of equal length stacked.

    A list column keeps its value type (float32 stays float32), nested lists too.

    Raises:
        DataValidationError: a missing list, or lists of different lengths.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type)):
        return column.to_numpy(zero_copy_only=False)
    leaf = column.type.value_type
    while pa.types.is_list(leaf) or pa.types.is_fixed_size_list(leaf):
        leaf = leaf.value_type
    dtype = leaf.to_pandas_dtype()
    if not len(column):
        return np.zeros((0,), dtype=dtype)
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    if column.null_count or len(set(lengths.tolist())) > 1:
        seen = sorted({int(n) for n in lengths if n == n})  # NaN: a missing list
        raise DataValidationError(
            name,
            [
                ExpectationFailure(
                    "a list column has one list of one length per example",
                    col,
                    f"{column.null_count} missing list(s), lengths {seen[:10]}",
                    "pad or cut the lists to one length, and fill the missing ones",
                )
            ],
        )
    if pa.types.is_nested(column.type.value_type):
        return np.stack([np.asarray(v, dtype=dtype) for v in column.to_pylist()])
    flat = column.flatten().to_numpy(zero_copy_only=False)
    return flat.reshape(len(column), int(lengths[0]))


def _tfrecord_chunks(fs: Any, name: str, spec: DataSpec) -> Iterator[dict[str, np.ndarray]]:
    from ultron.datamanager.pipeline import import_tensorflow

    tf = import_tensorflow()
    features = {
        key: tf.io.FixedLenFeature(f.shape, tf.float32 if f.dtype == "float32" else tf.int64)
        for key, f in spec.features.items()
    }
    records: list[bytes] = []
    with fs.open(name, "rb") as raw:
        for record in _tfrecords(gunzipped(raw), name=name):
            records.append(record)
            if len(records) == spec.shard_rows:
                yield {k: v.numpy() for k, v in tf.io.parse_example(records, features).items()}
                records = []
    if records:
        yield {k: v.numpy() for k, v in tf.io.parse_example(records, features).items()}


def gunzipped(raw: Any) -> Any:
    """``raw`` (a binary file object that can seek), decompressed when it is GZIP."""
    gzipped = raw.read(2) == b"\x1f\x8b"  # GZIP's magic number
    raw.seek(0)
    return gzip.GzipFile(fileobj=raw) if gzipped else raw


def _record_chunks(fs: Any, name: str, spec: DataSpec) -> Iterator[dict[str, np.ndarray]]:
    """Text or JSON Lines records as chunks of columns (strings and ragged lists as objects)."""
    read = RECORD_READERS[spec.resolved_format() or ""]
    rows: list[dict[str, Any]] = []
    with fs.open(name, "rb") as raw:
        for record in read(gunzipped(raw), name):
            rows.append(record)
            if len(rows) == spec.shard_rows:
                yield _as_columns(rows, name)
                rows = []
    if rows:
        yield _as_columns(rows, name)


def _as_columns(rows: list[dict[str, Any]], name: str) -> dict[str, np.ndarray]:
    keys = list(rows[0])
    if any(list(row) != keys for row in rows):
        odd = next(list(row) for row in rows if list(row) != keys)
        failure = ExpectationFailure(
            "every record has the same keys",
            None,
            f"{name} has {odd} and {keys}",
            "write every record with the same keys",
        )
        raise DataValidationError(name, [failure])
    out = {}
    for key in keys:
        column = as_column([row[key] for row in rows])
        if isinstance(column, list):  # staging and validation take arrays: one of objects
            objects = np.empty(len(column), dtype=object)
            objects[:] = column
            column = objects
        out[key] = column
    return out


def as_column(values: list[Any]) -> np.ndarray | list[Any]:
    """One column of records as a batch holds it.

    Numbers and booleans become a NumPy array, NumPy arrays of one shape are stacked, anything
    else (strings, lists of any length, a mix) stays a list. Every value is looked at, so a
    column that mixes numbers and strings is never turned into an array of strings.
    """
    if all(isinstance(v, (bool, int, float, np.number, np.bool_)) for v in values):
        return np.asarray(values)
    first = values[0]
    if isinstance(first, np.ndarray) and all(
        isinstance(v, np.ndarray) and v.shape == first.shape for v in values
    ):
        return np.stack(values)
    return values


def _tfrecords(handle: Any, *, name: str) -> Iterator[bytes]:
    """The records of a TFRecord stream (length, its CRC, data, its CRC); CRCs not checked."""
    while header := handle.read(12):
        length = struct.unpack("<Q", header[:8])[0] if len(header) == 12 else None
        whole = length is not None and length <= _MAX_RECORD_BYTES
        data = handle.read(length) if whole else b""
        handle.read(4)
        if not whole or len(data) != length:
            raise DataServiceError(
                f"data.url: {name} is not a whole TFRecord file (a record is cut short or "
                "its length is impossible). Rule: TFRecord files, uncompressed or GZIP. "
                "Fix: rewrite the file, or decompress a ZLIB one"
            )
        yield data


def _text_records(handle: Any, name: str) -> Iterator[dict[str, Any]]:
    """A text file's lines (UTF-8, without their line end), one record each."""
    try:
        for line in io.TextIOWrapper(handle, encoding="utf-8", newline=None):
            yield {"text": line[:-1] if line.endswith("\n") else line}
    except UnicodeDecodeError as exc:
        raise DataServiceError(
            f"data.url: {name} is not UTF-8 text ({exc}). Rule: text data is UTF-8, a record "
            "per line. Fix: re-encode the file as UTF-8, or set format to what it is"
        ) from exc


def _parquet_records(handle: Any, name: str) -> Iterator[dict[str, Any]]:
    """A Parquet file's rows: scalars and strings as they are, lists of any length as lists."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("Parquet data needs pyarrow: pip install 'ultron-automl[data]'") from exc
    for batch in pq.ParquetFile(handle).iter_batches(batch_size=_READ_ROWS):
        yield from batch.to_pylist()


def _jsonl_records(handle: Any, name: str) -> Iterator[dict[str, Any]]:
    """A JSON Lines file's objects, one record each."""
    for number, line in enumerate(io.TextIOWrapper(handle, encoding="utf-8"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataServiceError(
                f"data.url: line {number} of {name} is not JSON ({exc.msg}). Rule: JSON Lines, "
                "one object per line. Fix: rewrite that line"
            ) from exc
        if not isinstance(record, dict):
            raise DataServiceError(
                f"data.url: line {number} of {name} is {type(record).__name__}, not an "
                "object. Rule: each line is a JSON object (its keys are the columns). "
                'Fix: write {"text": ...}'
            )
        yield record


RECORD_READERS: dict[str, Callable[[Any, str], Iterator[dict[str, Any]]]] = {
    "text": _text_records,
    "jsonl": _jsonl_records,
    "parquet": _parquet_records,
}
STREAMED_FORMATS = tuple(RECORD_READERS)  # what placement: stream reads
