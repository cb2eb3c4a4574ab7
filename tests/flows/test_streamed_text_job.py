"""A job on a text corpus larger than its cache, streamed from the S3 server on loopback: two
trials each read every line once per epoch, in orders of their own, and nothing is staged whole
on the job's machine (issue 27)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

import ultron
from ultron.datamanager import DataSpec
from ultron.datamanager.streaming import FileCache, listing
from ultron.paths import scratch_dir

pytest.importorskip("s3fs", reason="S3 needs the s3 extra")

TOY = Path(__file__).parents[2] / "tests" / "data" / "toy"
FILES, LINES = 8, 300
CACHE_BYTES = 30_000  # about 2 of the 8 files: the corpus is 4 times the cache

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]


def _write_corpus(url: str, options: dict[str, Any]) -> int:
    """Text files of lines ``<id> <words>``, of random lengths; returns the corpus's bytes."""
    import s3fs

    fs = s3fs.S3FileSystem(**options)
    rng = random.Random(7)
    size = 0
    for f in range(FILES):
        lines = (
            f"{f * LINES + i} "
            + " ".join("w" * rng.randint(1, 9) for _ in range(rng.randint(1, 12)))
            for i in range(LINES)
        )
        data = "".join(line + "\n" for line in lines).encode()
        fs.pipe(f"{url}/corpus/part-{f:03d}.txt", data)
        size += len(data)
    return size


def test_two_trials_stream_a_corpus_larger_than_the_cache_each_epoch_once_in_their_own_order(
    tmp_path: Path,
    redis_url: str,
    s3_url: str,
    s3_storage_options: dict[str, Any],
    ultron_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = f"{s3_url}/{tmp_path.name}"
    corpus_bytes = _write_corpus(prefix, s3_storage_options)
    assert corpus_bytes > 3 * CACHE_BYTES
    calls = tmp_path / "calls.jsonl"
    monkeypatch.setenv("TOY_CALLS_FILE", str(calls))
    result = ultron.run(
        {
            "name": "streamed",
            "code": str(TOY),
            "model": "toy_model:ReadsText",
            "search_space": {"tag": ["a", "b"], "epochs": [2]},
            "strategy": "grid",
            "objective": {"metric": "records", "mode": "maximize"},
            "num_iterations": 2,
            "parallelism": 2,
            "data": {
                "url": f"{prefix}/corpus/",
                "format": "text",
                "placement": "stream",
                "batch_size": 64,
                "shuffle_buffer": 200,
                "stream_cache": CACHE_BYTES,
            },
            "redis_url": redis_url,
            "storage": str(tmp_path / "runs"),
        }
    )
    assert result.status == "completed", result
    assert sorted(t.status for t in result.trials) == ["completed", "completed"]
    epochs = [json.loads(line) for line in calls.read_text().splitlines()]
    assert sorted((e["tag"], e["epoch"]) for e in epochs) == [
        ("a", 0),
        ("a", 1),
        ("b", 0),
        ("b", 1),
    ]
    for entry in epochs:
        assert sorted(entry["ids"]) == list(range(FILES * LINES))  # every line once
    orders = {(e["tag"], e["epoch"]): e["ids"] for e in epochs}
    assert len({tuple(ids) for ids in orders.values()}) == 4  # each trial and epoch its own
    # Nothing staged whole: nothing in the job's scratch space's data folder, and the file
    # cache of this corpus (under ULTRON_HOME, keyed by its listing) holds at most its limit.
    assert not list((scratch_dir(result.job_id) / "data").rglob("*"))
    manifest = listing(
        DataSpec(url=f"{prefix}/corpus/", format="text", placement="stream"), base_dir=tmp_path
    )
    cache = FileCache(ultron_home / "data-cache", manifest["sha256"], CACHE_BYTES)
    assert 0 < cache.used() <= CACHE_BYTES < corpus_bytes
