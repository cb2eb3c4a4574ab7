"""``placement: stream``: each trial reads the files itself, every record once per epoch in an
order of its own, strings and lists of any length included, with a bounded cache of the files
it fetched that later jobs on the same data share."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ultron.datamanager import DataSpec, start_data_service
from ultron.datamanager.errors import DataValidationError
from ultron.datamanager.reader import EPOCH_END
from ultron.datamanager.sources import as_column
from ultron.datamanager.streaming import FileCache, epochs, listing
from ultron.errors import SpecError
from ultron.spec.loader import load_spec

LINES = 50  # per file


def _write_text(folder: Path, files: int = 4) -> list[str]:
    """``files`` text files (one gzipped) of lines ``<id> <words>`` of different lengths."""
    folder.mkdir(parents=True, exist_ok=True)
    every = []
    for f in range(files):
        lines = [f"{f * LINES + i} " + "word " * ((f * LINES + i) % 7) for i in range(LINES)]
        every += lines
        data = "".join(line + "\n" for line in lines).encode()
        if f == 0:
            (folder / f"part-{f}.txt.gz").write_bytes(gzip.compress(data))
        else:
            (folder / f"part-{f}.txt").write_bytes(data)
    return every


def _config(spec: DataSpec, folder: Path, cache: Path | None = None, limit: int = 0) -> Any:
    handle = start_data_service(spec, job_id="j", seed=0, work_dir=folder / "w", base_dir=folder)
    config = handle.trial_config()
    config["cache"] = {"dir": str(cache) if cache else None, "bytes": limit}
    return config


def _ids(config: dict[str, Any], seed: int, epoch: int, **kwargs: Any) -> list[int]:
    out = []
    for e, batch in epochs(config, seed=seed, first_epoch=epoch, last_epoch=epoch, **kwargs):
        assert e == epoch
        if batch is not EPOCH_END:
            out += [int(line.split(" ", 1)[0]) for line in batch["text"]]
    return out


def test_every_record_once_per_epoch_in_an_order_of_the_seed_and_epoch(tmp_path: Path) -> None:
    lines = _write_text(tmp_path / "data")
    spec = DataSpec(url="data/", format="text", placement="stream", shuffle_buffer=30)
    config = _config(spec, tmp_path)
    assert config["manifest"]["streamed"] and len(config["manifest"]["files"]) == 4
    orders = {(seed, epoch): _ids(config, seed, epoch) for seed in (1, 2) for epoch in (0, 1)}
    for order in orders.values():
        assert sorted(order) == list(range(len(lines)))  # each record once
    assert len({tuple(order) for order in orders.values()}) == 4  # each seed and epoch its own
    assert _ids(config, 1, 1) == orders[(1, 1)]  # a resumed trial gets the same epoch again


def test_the_stream_ends_each_epoch_and_keeps_strings_and_ragged_lists(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    rows = [{"text": "é" * (i % 5), "tokens": list(range(i % 4)), "y": i} for i in range(10)]
    (folder / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = DataSpec(url="data/a.jsonl", placement="stream", batch_size=4, drop_remainder=True)
    config = _config(spec, tmp_path)
    assert config["format"] == "jsonl"
    items = list(epochs(config, seed=3, first_epoch=0, last_epoch=1))
    assert [e for e, _ in items] == [0, 0, 0, 1, 1, 1]  # 10 rows in 4s: 2 batches, then the end
    assert items[2][1] is EPOCH_END and items[5][1] is EPOCH_END
    batch = items[0][1]
    assert isinstance(batch["y"], np.ndarray) and batch["y"].dtype.kind == "i"
    assert all(isinstance(t, list) for t in batch["tokens"])  # lists of any length stay lists
    by_y = {r["y"]: r for r in rows}
    for text, tokens, y in zip(batch["text"], batch["tokens"], batch["y"], strict=True):
        assert (text, tokens) == (by_y[int(y)]["text"], by_y[int(y)]["tokens"])


def test_a_column_is_an_array_only_when_every_value_is_a_number_or_one_shape() -> None:
    assert as_column([1, 2.5, True]).tolist() == [1.0, 2.5, 1.0]
    assert as_column([np.zeros(2), np.ones(2)]).shape == (2, 2)
    assert as_column([1, "2"]) == [1, "2"]  # a mix is never turned into strings
    assert as_column([[1], [1, 2]]) == [[1], [1, 2]]


def test_parquet_strings_and_lists_of_any_length_stream(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "data"
    folder.mkdir()
    table = pa.table({"text": ["a", "bb", "ccc"], "ids": [[1], [2, 3], []]})
    pq.write_table(table, folder / "p.parquet")
    spec = DataSpec(url="data/p.parquet", placement="stream", batch_size=8, shuffle_buffer=0)
    batches = [b for _, b in epochs(_config(spec, tmp_path), seed=0, first_epoch=0, last_epoch=0)]
    assert batches[-1] is EPOCH_END
    assert sorted(zip(batches[0]["text"], map(tuple, batches[0]["ids"]), strict=True)) == [
        ("a", (1,)),
        ("bb", (2, 3)),
        ("ccc", ()),
    ]


def test_the_cache_keeps_files_up_to_its_limit_and_a_later_job_reads_them_from_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec

    _write_text(tmp_path / "data", files=6)
    sizes = sorted(p.stat().st_size for p in (tmp_path / "data").iterdir())
    limit = sizes[-1] + sizes[-2]  # room for two files whatever their order, not three
    spec = DataSpec(url="data/", format="text", placement="stream")
    cache = tmp_path / "cache"
    store_reads: list[str] = []
    real_open = fsspec.open

    # Counts the reads that go to the store (the real open still does them): a cached file
    # is opened from local disk with the built-in open instead.
    def counting_open(url: str, *args: Any, **kwargs: Any) -> Any:
        store_reads.append(url)
        return real_open(url, *args, **kwargs)

    monkeypatch.setattr(fsspec, "open", counting_open)
    config = _config(spec, tmp_path, cache, limit)
    _ids(config, seed=0, epoch=0)
    held = FileCache.of(config)
    assert held is not None
    kept = sorted(p.name for p in held.folder.iterdir() if not p.name.startswith("."))
    assert len(kept) == 2 and held.used() <= limit < config["manifest"]["bytes"]
    assert len(store_reads) == 4  # the two files that did not fit were read from the store
    store_reads.clear()
    # A later job on the same data: the two kept files come from the cache, the rest again
    # from the store; nothing more is kept.
    later = _config(spec, tmp_path, cache, limit)
    assert later["manifest"]["sha256"] == config["manifest"]["sha256"]
    assert sorted(_ids(later, seed=5, epoch=0)) == list(range(6 * LINES))
    assert len(store_reads) == 4
    assert sorted(p.name for p in held.folder.iterdir() if not p.name.startswith(".")) == kept
    # A rewritten file is other data: another fingerprint, another cache folder.
    (tmp_path / "data" / "part-1.txt").write_text("999 new\n")
    changed = _config(spec, tmp_path, cache, limit)
    assert changed["manifest"]["sha256"] != config["manifest"]["sha256"]


def test_a_fetch_cut_short_leaves_no_file_in_the_cache(tmp_path: Path) -> None:
    _write_text(tmp_path / "data", files=1)
    spec = DataSpec(url="data/", format="text", placement="stream")
    config = _config(spec, tmp_path, tmp_path / "cache", 1 << 20)
    cache = FileCache.of(config)
    assert cache is not None
    entry = config["manifest"]["files"][0]
    cache.folder.mkdir(parents=True)
    cache.path(entry).with_suffix(".part").write_bytes(b"half")  # a dead process's fetch
    assert cache.fetch(entry) == cache.path(entry)
    assert [p.suffix for p in cache.folder.iterdir() if not p.name.startswith(".")] == [""]
    assert cache.path(entry).stat().st_size == entry["size"]


def test_text_needs_the_stream_placement_and_a_cache_size(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'm'\n")
    base = {"code": str(tmp_path), "model": "m:M", "search_space": {"x": [1, 2]}}
    with pytest.raises(SpecError) as error:
        load_spec({**base, "data": {"url": "s3://b/corpus/*.txt"}})
    text = str(error.value)
    assert "data.placement" in text or "data" in text
    assert "placement: stream" in text and "text" in text
    with pytest.raises(SpecError) as error:
        load_spec(
            {
                **base,
                "data": {
                    "url": "c/",
                    "format": "text",
                    "placement": "stream",
                    "stream_cache": "lots",
                },
            }
        )
    assert "stream_cache" in str(error.value) and "'lots'" in str(error.value)
    spec = load_spec(
        {**base, "data": {"url": "c.jsonl", "placement": "stream", "stream_cache": "64KiB"}}
    )
    assert spec.data is not None and spec.data.rows_to_validate() == 100_000


def test_validation_reads_text_records(tmp_path: Path) -> None:
    from ultron.datamanager import validate_data

    _write_text(tmp_path / "data", files=2)
    good = DataSpec.model_validate(
        {
            "url": "data/",
            "format": "text",
            "placement": "stream",
            "expectations": [
                {"expect": "columns", "columns": ["text"]},
                {"expect": "not_null", "column": "text"},
            ],
        }
    )
    validate_data(good, base_dir=tmp_path)
    bad = DataSpec.model_validate(
        {
            "url": "data/",
            "format": "text",
            "placement": "stream",
            "expectations": [{"expect": "columns", "columns": ["tokens"]}],
        }
    )
    with pytest.raises(DataValidationError, match="tokens"):
        validate_data(bad, base_dir=tmp_path)


def test_listing_names_every_file_with_its_size(tmp_path: Path) -> None:
    _write_text(tmp_path / "data", files=3)
    spec = DataSpec(url="data/*.txt*", placement="stream", format="text")
    manifest = listing(spec, base_dir=tmp_path)
    sizes = {Path(f["url"]).name: f["size"] for f in manifest["files"]}
    assert sizes == {p.name: p.stat().st_size for p in (tmp_path / "data").iterdir()}
    assert manifest["bytes"] == sum(sizes.values())
