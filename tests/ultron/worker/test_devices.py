"""GPU packing on a worker: the book of GPU shares, and real Dask workers running shared trials.

No GPU here: the workers' GPUs are what ``ULTRON_GPUS`` (or ``CUDA_VISIBLE_DEVICES``) says, and
the trials record what they were shown instead of using it.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from ultron.errors import UltronError
from ultron.spec.sections import Resources
from ultron.trial_records import TrialRequest, TrialStatus
from ultron.worker.devices import GpuBook

# A trial that records when it ran and which GPUs it was shown, and holds on until four trials
# run at once (or 30 s pass), so that a wave reaches the limit whatever the machine's load.
RECORDER = """
import json, os, time


class Recorder:
    def score(self, hyperparameters, checkpoint_path, resume):
        folder = hyperparameters["folder"]
        running = os.path.join(folder, "running")
        os.makedirs(running, exist_ok=True)
        mark = os.path.join(running, hyperparameters["name"])
        start = time.time()
        open(mark, "w").close()
        deadline = start + 30
        while len(os.listdir(running)) < 4 and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        os.remove(mark)
        record = {"start": start, "end": time.time(), "pid": os.getpid(),
                  "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}
        with open(os.path.join(folder, hyperparameters["name"] + ".json"), "w") as out:
            json.dump(record, out)
        return 1.0
"""


def test_fractions_spread_over_the_gpus_and_never_overfill_one() -> None:
    book = GpuBook(["0", "1"])
    claims = [book.claim(0.25) for _ in range(8)]
    assert [c.devices for c in claims[:4]] == [("0",), ("1",), ("0",), ("1",)]
    assert book.in_use() == {"0": Fraction(1), "1": Fraction(1)}
    with pytest.raises(TimeoutError):
        book.claim(0.25, timeout=0.05)  # both GPUs are full
    book.release(claims[1])
    assert book.claim(0.25, timeout=0.05).devices == ("1",)


def test_whole_gpus_take_free_ones_and_wait_for_them() -> None:
    book = GpuBook(["0", "1", "2"])
    half = book.claim(0.5)
    pair = book.claim(2)
    assert half.devices == ("0",) and pair.devices == ("1", "2") and pair.share == 1
    got: list[tuple[str, ...]] = []
    waiter = threading.Thread(target=lambda: got.append(book.claim(1, timeout=10).devices))
    waiter.start()
    waiter.join(0.2)
    assert got == []  # every GPU holds something: a whole-GPU trial waits
    book.release(pair)
    waiter.join(10)
    assert got == [("1",)]


def test_thirds_are_counted_exactly() -> None:
    book = GpuBook(["0"])
    third = Resources(gpu=1 / 3).gpu
    claims = [book.claim(third, timeout=0.05) for _ in range(3)]
    assert {c.devices for c in claims} == {("0",)} and book.in_use() == {"0": Fraction(1)}


def test_a_share_no_gpu_of_the_worker_can_hold_is_refused() -> None:
    with pytest.raises(UltronError, match=r"asks for 2 GPUs and this worker has 1 \(0\)"):
        GpuBook(["0"]).claim(2)
    with pytest.raises(UltronError, match="none found"):
        GpuBook([]).claim(0.5)


@pytest.fixture
def recorder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    code = tmp_path / "code"
    code.mkdir()
    (code / "recorder.py").write_text(RECORDER)
    # The trial processes inherit the workers' environment: the model comes from PYTHONPATH
    # instead of a built trial environment (tests/ultron/test_environment.py covers those).
    monkeypatch.setenv("PYTHONPATH", f"{code}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    yield tmp_path / "records"


def _requests(records: Path, redis_url: str, count: int) -> list[dict[str, object]]:
    job = f"gpu-pack-{uuid.uuid4().hex[:8]}"
    return [
        TrialRequest(
            job_id=job,
            trial_id=f"t{i}",
            hyperparameters={"folder": str(records), "name": f"t{i}"},
            model="recorder:Recorder",
            python=sys.executable,
            metric="score",
            seed=i,
            checkpoint_path=str(records / "ckpt" / f"t{i}"),
            log_path=str(records / "logs" / f"t{i}.log"),
            redis_url=redis_url,
        ).to_dict()
        for i in range(count)
    ]


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that overlap (an end before a start at the same time)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def test_a_worker_of_two_gpus_runs_four_half_gpu_trials_at_once(
    recorder: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distributed import Client, LocalCluster

    from ultron.worker.runner import run_trial

    monkeypatch.setenv("ULTRON_GPUS", "2")  # the worker's GPUs: 0 and 1
    amount = Resources(gpu=0.5).gpu
    # Six threads: Dask's GPU accounting, not the thread count, must hold it to four trials.
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=6, resources={"GPU": 2}, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        futures = [
            client.submit(run_trial, request, pure=False, resources={"GPU": amount})
            for request in _requests(recorder, redis_url, 8)
        ]
        results = client.gather(futures)
    assert [r["status"] for r in results] == [TrialStatus.COMPLETED] * 8
    records = [json.loads((recorder / f"t{i}.json").read_text()) for i in range(8)]
    intervals = [(r["start"], r["end"]) for r in records]
    assert _most_at_once(intervals) == 4  # four ran together, never five or six
    assert {r["gpus"] for r in records} == {"0", "1"}  # one GPU of the worker's each
    for gpu in ("0", "1"):
        on_it = [(r["start"], r["end"]) for r in records if r["gpus"] == gpu]
        assert _most_at_once(on_it) == 2  # two halves share a GPU, never three
    # Warm processes are kept per GPU: a process shown GPU 0 never runs a trial on GPU 1.
    by_pid: dict[int, set[str]] = {}
    for record in records:
        by_pid.setdefault(record["pid"], set()).add(record["gpus"])
    assert all(len(gpus) == 1 for gpus in by_pid.values())
    assert len(by_pid) < 8  # and reused
