"""TFRecord, Parquet and a glob of NumPy files go all the way: staged, served, read by a trial.

Each test writes a small dataset whose ``id`` column is a permutation (so the stored order is
not the id order), starts a real tf.data service in this process, reads one epoch as NumPy and
checks that every id comes once with the ``x`` and ``y`` written for it.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ultron.data
from ultron.datamanager import DataServiceError, DataSpec, DataValidationError, start_data_service
from ultron.datamanager.sources import read_chunks

tf = pytest.importorskip("tensorflow")

ROWS = 300
BATCH = 32
FEATURES = {
    "x": {"dtype": "float32", "shape": [4]},
    "y": {"dtype": "int64", "shape": []},
    "id": {"dtype": "int64", "shape": []},
}


@dataclass(frozen=True)
class Written:
    """What a test wrote: row ``i`` of each array is one example."""

    x: np.ndarray
    y: np.ndarray
    id: np.ndarray

    def rows(self, start: int, stop: int) -> Written:
        return Written(self.x[start:stop], self.y[start:stop], self.id[start:stop])


def _examples(rows: int = ROWS, *, seed: int = 0) -> Written:
    rng = np.random.default_rng(seed)
    return Written(
        x=rng.standard_normal((rows, 4)).astype(np.float32),
        y=rng.integers(0, 10, rows).astype(np.int64),
        id=rng.permutation(rows).astype(np.int64),
    )


def _read_epoch(spec: DataSpec, *, base_dir: Path, work_dir: Path) -> list[dict[str, Any]]:
    """The batches of epoch 0, read as NumPy from a service started in this process."""
    with start_data_service(
        spec, job_id="test-formats", seed=3, base_dir=base_dir, work_dir=work_dir, in_process=True
    ) as handle:
        try:
            ultron.data.set_service(handle.trial_config(), seed=7)
            with ultron.data.batches(epoch=0, framework="numpy") as stream:
                return [{k: np.array(v) for k, v in batch.items()} for batch in stream]
        finally:
            ultron.data.set_service(None)  # the trial's reader ends before the service


def _assert_epoch_is(batches: list[dict[str, Any]], written: Written) -> None:
    """Every id once, with the x and y written for it; full batches of (BATCH, 4) float32."""
    assert [len(b["id"]) for b in batches] == [BATCH] * (ROWS // BATCH) + [ROWS % BATCH]
    for batch in batches:
        assert sorted(batch) == ["id", "x", "y"]
        assert batch["x"].shape == (len(batch["id"]), 4)
        assert (batch["x"].dtype, batch["y"].dtype, batch["id"].dtype) == (
            np.float32,
            np.int64,
            np.int64,
        )
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids.tolist()) == list(range(ROWS))
    by_id = np.argsort(written.id)  # by_id[i]: the row written with id i
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in batches]), written.x[by_id][ids])
    np.testing.assert_array_equal(np.concatenate([b["y"] for b in batches]), written.y[by_id][ids])


def _spec(url: str, **fields: Any) -> DataSpec:
    return DataSpec.model_validate(
        {"url": url, "batch_size": BATCH, "shuffle_buffer": 64, "shard_rows": 128, **fields}
    )


def _write_tfrecord(path: Path, written: Written) -> None:
    def example(row: int) -> bytes:
        feature = {
            "x": tf.train.Feature(float_list=tf.train.FloatList(value=written.x[row].tolist())),
            "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(written.y[row])])),
            "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(written.id[row])])),
        }
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    with tf.io.TFRecordWriter(str(path)) as writer:
        for row in range(len(written.id)):
            writer.write(example(row))


def _write_parquet(path: Path, written: Written) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table(
        {
            "x": pa.array(list(written.x), type=pa.list_(pa.float32(), 4)),  # fixed-size list
            "y": pa.array(written.y),
            "id": pa.array(written.id),
        }
    )
    pq.write_table(table, path)


def test_tfrecord_of_examples_is_served_whole(tmp_path: Path) -> None:
    written = _examples()
    _write_tfrecord(tmp_path / "train.tfrecord", written)
    spec = _spec("train.tfrecord", features=FEATURES)
    assert spec.resolved_format() == "tfrecord"
    batches = _read_epoch(spec, base_dir=tmp_path, work_dir=tmp_path / "service")
    _assert_epoch_is(batches, written)


def test_parquet_with_a_fixed_size_list_column_is_served_whole(tmp_path: Path) -> None:
    written = _examples()
    _write_parquet(tmp_path / "train.parquet", written)
    spec = _spec("train.parquet", features={"x": {"shape": [4]}})
    assert spec.resolved_format() == "parquet"
    batches = _read_epoch(spec, base_dir=tmp_path, work_dir=tmp_path / "service")
    _assert_epoch_is(batches, written)  # x float32, as written


def test_parquet_variable_length_lists_of_one_length_keep_their_type(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    written = _examples(rows=3)
    x = pa.array(list(written.x), type=pa.list_(pa.float32()))  # not fixed-size
    pq.write_table(pa.table({"x": x, "y": written.y, "id": written.id}), tmp_path / "d.parquet")
    (chunk,) = read_chunks(_spec("d.parquet"), base_dir=tmp_path)
    assert chunk["x"].dtype == np.float32
    np.testing.assert_array_equal(chunk["x"], written.x)


def test_gzip_tfrecord_is_read(tmp_path: Path) -> None:
    written = _examples()
    _write_tfrecord(tmp_path / "plain.tfrecord", written)
    with gzip.open(tmp_path / "train.tfrecord.gz", "wb") as out:
        out.write((tmp_path / "plain.tfrecord").read_bytes())
    spec = _spec("train.tfrecord.gz", features=FEATURES)
    assert spec.resolved_format() == "tfrecord"
    batches = _read_epoch(spec, base_dir=tmp_path, work_dir=tmp_path / "service")
    _assert_epoch_is(batches, written)


def test_a_cut_tfrecord_names_the_file_and_the_fix(tmp_path: Path) -> None:
    _write_tfrecord(tmp_path / "whole.tfrecord", _examples(rows=5))
    (tmp_path / "cut.tfrecord").write_bytes((tmp_path / "whole.tfrecord").read_bytes()[:-30])
    with pytest.raises(DataServiceError) as info:
        list(read_chunks(_spec("cut.tfrecord", features=FEATURES), base_dir=tmp_path))
    assert "cut.tfrecord" in str(info.value) and "Fix:" in str(info.value)


def test_glob_of_npz_files_is_served_whole(tmp_path: Path) -> None:
    written = _examples()
    for part, start in enumerate(range(0, ROWS, 100)):  # 3 files; shards cross their bounds
        rows = written.rows(start, start + 100)
        np.savez(tmp_path / f"part-{part}.npz", x=rows.x, y=rows.y, id=rows.id)
    np.savez(tmp_path / "other.npz", x=written.x[:1], y=written.y[:1], id=written.id[:1])
    spec = _spec("part-*.npz")
    assert spec.resolved_format() == "numpy"
    batches = _read_epoch(spec, base_dir=tmp_path, work_dir=tmp_path / "service")
    _assert_epoch_is(batches, written)


def test_parquet_nested_lists_keep_their_type(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    column = pa.array(x.tolist(), type=pa.list_(pa.list_(pa.float32())))
    pq.write_table(pa.table({"x": column, "y": [0, 1, 2]}), tmp_path / "d.parquet")
    (chunk,) = read_chunks(_spec("d.parquet"), base_dir=tmp_path)
    assert chunk["x"].dtype == np.float32
    np.testing.assert_array_equal(chunk["x"], x)


@pytest.mark.parametrize(
    ("lists", "observed"),
    [([[1.0], [2.0, 3.0]], "lengths [1, 2]"), ([[1.0], None], "1 missing list(s)")],
)
def test_parquet_lists_of_other_lengths_are_named(
    tmp_path: Path, lists: list[Any], observed: str
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"x": lists, "y": [0, 1]}), tmp_path / "d.parquet")
    with pytest.raises(DataValidationError) as info:
        list(read_chunks(_spec("d.parquet"), base_dir=tmp_path))
    (failure,) = info.value.failures
    assert failure.column == "x" and observed in failure.observed and failure.fix


def test_a_zlib_tfrecord_is_refused_with_the_fix(tmp_path: Path) -> None:
    options = tf.io.TFRecordOptions(compression_type="ZLIB")
    with tf.io.TFRecordWriter(str(tmp_path / "z.tfrecord"), options) as writer:
        writer.write(b"x" * 100)
    with pytest.raises(DataServiceError) as info:
        list(read_chunks(_spec("z.tfrecord", features=FEATURES), base_dir=tmp_path))
    assert "z.tfrecord" in str(info.value) and "ZLIB" in str(info.value)


def test_a_folder_of_gzip_tfrecords_is_found(tmp_path: Path) -> None:
    written = _examples(rows=4)
    _write_tfrecord(tmp_path / "plain.tfrecord", written)
    (tmp_path / "folder").mkdir()
    with gzip.open(tmp_path / "folder" / "part.tfrecord.gz", "wb") as out:
        out.write((tmp_path / "plain.tfrecord").read_bytes())
    spec = _spec("folder", format="tfrecord", features=FEATURES)
    (chunk,) = read_chunks(spec, base_dir=tmp_path)
    assert sorted(chunk["id"].tolist()) == sorted(written.id.tolist())
