"""A whole job on Redis Sentinel rides through a failover: the master is killed mid-job.

The spec's ``redis_url`` is the ``redis+sentinel://`` URL of a real setup on loopback (one
master, one replica, three sentinels); the flow, the Dask workers and the trial processes all
get that URL. The master is SIGKILLed at one of three moments of a small job (four trials, two
at a time), each forced, never left to timing, and always with a write in flight: the test pauses
the master's writes (``CLIENT PAUSE ... WRITE``), lets the job go on, and kills the master once a
client waits there for a write, which its retry must then send to the new master:

- ``first_round``: both first trials have started; every trial is held until the writes are
  paused, and then the writes of their results are in flight.
- ``between_rounds``: the first two rows are in the trial table (and on the replica); the later
  trials are held until the writes are paused, so the master dispatches and records them
  across the failover.
- ``finalize``: finalize's first write (the job's status) is held until the writes are paused,
  so it is in flight, and the clean-up after it rides the failover.

Each run completes with every configuration scored once, and the rows stored before the kill
are still there.
"""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import ultron
from ultron.master.job_state import JobStatus, JobStore
from ultron.redis import keys
from ultron.redis.client import connect
from ultron.trial_records import TrialStatus

TRIALS = 4
WAIT_S = 180.0

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect")]

# A model that claims a start ordinal (0, 1, ... in the order trials start), logs its start and
# end, and from ordinal GATE_FROM on waits until the file ``open`` exists in GATE_DIR.
_MODEL = """
import json, os, time


def _log(folder, **entry):
    with open(os.path.join(folder, "calls.jsonl"), "a") as handle:
        handle.write(json.dumps(entry) + "\\n")


def _claim(folder):
    ordinal = 0
    while True:
        try:
            os.close(os.open(os.path.join(folder, f"started-{ordinal}"), os.O_CREAT | os.O_EXCL))
            return ordinal
        except FileExistsError:
            ordinal += 1


class Gated:
    def score(self, hyperparameters, checkpoint_path, resume):
        folder, x = os.environ["GATE_DIR"], float(hyperparameters["x"])
        ordinal = _claim(folder)
        _log(folder, event="start", x=x, ordinal=ordinal)
        deadline = time.monotonic() + 180
        while ordinal >= int(os.environ["GATE_FROM"]) and not os.path.exists(
            os.path.join(folder, "open")
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("the test never opened the gate")
            time.sleep(0.05)
        _log(folder, event="end", x=x, ordinal=ordinal)
        return x
"""


def _setup_module() -> ModuleType:
    # pytest runs in importlib mode, so test folders are not packages to import from: load the
    # Sentinel setup from the client test that defines it, by path.
    path = Path(__file__).parents[1] / "ultron" / "redis" / "test_sentinel.py"
    spec = importlib.util.spec_from_file_location("_sentinel_setup", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[Any]:
    setup = _setup_module().SentinelSetup(tmp_path / "sentinel")
    try:
        yield setup.start()
    finally:
        setup.stop()


def _code(folder: Path) -> Path:
    (folder / "gated_model").mkdir(parents=True)
    (folder / "gated_model" / "__init__.py").write_text(_MODEL)
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "gated-model"\nversion = "0.1.0"\n'
        '[tool.setuptools]\npackages = ["gated_model"]\n'
    )
    return folder


def _until(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"never reached: {what}")
        time.sleep(0.05)


_BLOCKING_READS = {"blpop", "brpop", "blmove", "brpoplpush", "bzpopmin", "bzpopmax", "xread"}


def _writes_held(master: Any) -> bool:
    """Whether a client of the paused master waits for a write (not a blocking read)."""
    clients = master.client_list()
    return any("b" in c["flags"] and c["cmd"] not in _BLOCKING_READS for c in clients)


@pytest.mark.parametrize("moment", ["first_round", "between_rounds", "finalize"])
def test_a_job_completes_across_a_failover_with_nothing_lost(
    moment: str, tmp_path: Path, sentinel_setup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = sentinel_setup
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("GATE_DIR", str(gate))
    monkeypatch.setenv("GATE_FROM", {"first_round": "0", "between_rounds": "2"}.get(moment, "99"))
    job_id = f"sentinel-{uuid.uuid4().hex[:8]}"
    table = keys.job_trials(job_id)
    watcher = connect(setup.url)
    stored_before: dict[bytes, bytes] = {}
    errors: list[BaseException] = []
    in_finalize, released = threading.Event(), threading.Event()

    set_status = JobStore.set_status

    ended = {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED}

    def finalize_waits_for_the_kill(store: JobStore, status: JobStatus, **why: Any) -> None:
        if status in ended:  # finalize's first write
            in_finalize.set()
            if not released.wait(WAIT_S):
                raise TimeoutError("the test never let finalize go on")
        set_status(store, status, **why)

    monkeypatch.setattr(JobStore, "set_status", finalize_waits_for_the_kill)

    def release() -> None:
        released.set()
        (gate / "open").touch()

    def kill() -> None:
        try:
            if moment == "first_round":
                _until("both first trials started", lambda: (gate / "started-1").exists())
            elif moment == "between_rounds":
                _until("two rows stored", lambda: watcher.hlen(table) >= 2)
            else:
                _until("finalize", lambda: in_finalize.is_set())
            stored_before.update(watcher.hgetall(table))
            assert int(watcher.execute_command("WAIT", 1, 2000)) >= 1  # the replica has them
            # The master holds writes, the job goes on, and the master dies with one in flight.
            master = setup._client(setup.master_port, decode_responses=True)
            master.execute_command("CLIENT", "PAUSE", int(WAIT_S * 1000), "WRITE")
            release()
            _until("a write in flight", lambda: _writes_held(master))
            setup.kill_master()
        except BaseException as exc:  # handed to the test
            errors.append(exc)
        finally:
            release()

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    try:
        result = ultron.run(
            {
                "name": "sentinel",
                "seed": 5,
                "code": str(_code(tmp_path / "code")),
                "model": "gated_model:Gated",
                "search_space": {"x": {"type": "uniform", "low": 0, "high": 1}},
                "num_iterations": TRIALS,
                "parallelism": 2,
                "storage": str(tmp_path / "runs"),
                "redis_url": setup.url,
            },
            job_id=job_id,
        )
        killer.join(30)
        assert not errors, errors
        assert setup.processes["master"].poll() is not None  # the master was killed mid-job
        assert watcher.connection_pool.get_master_address()[1] == setup.replica_port

        assert sorted(t.trial_id for t in result.trials) == [f"{i:04d}" for i in range(TRIALS)]
        assert all(t.status is TrialStatus.COMPLETED for t in result.trials)
        after = watcher.hgetall(table)
        assert len(after) == TRIALS
        assert {k: after[k] for k in stored_before} == stored_before  # nothing stored was lost
        assert watcher.hget(keys.job(job_id), "status") == b"completed"
        assert not watcher.keys(keys.job_run(job_id, "*"))  # finalize cleaned up
        calls = [json.loads(line) for line in (gate / "calls.jsonl").read_text().splitlines()]
        ends = Counter(call["x"] for call in calls if call["event"] == "end")
        assert ends == Counter({t.hyperparameters["x"]: 1 for t in result.trials})  # each once
    finally:
        watcher.close()
