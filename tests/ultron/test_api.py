"""``ultron.run``'s own rules, before any job starts."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import ultron
from ultron.api import _one_job
from ultron.errors import UltronError

TOY = Path(__file__).parents[1] / "data" / "toy"


def test_a_second_job_in_the_same_process_is_refused_clearly(tmp_path: Path) -> None:
    spec = {
        "code": str(TOY),
        "model": "toy_model:Quadratic",
        "search_space": {"x": [1.0]},
        "num_iterations": 1,
        "storage": str(tmp_path / "runs"),
    }
    # Another thread's job holds the process (held here directly: a real one takes ~20 s).
    holder = threading.Thread(target=_one_job.acquire)
    holder.start()
    holder.join()
    try:
        with pytest.raises(UltronError, match="one process runs one job at a time"):
            ultron.run(spec)
    finally:
        _one_job.release()
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_a_job_runs_without_prefect_flow_heartbeats_unless_the_user_set_them() -> None:
    """Prefect's heartbeat thread held every job's end for up to a second; a user's own
    setting (an environment variable, a profile) is kept."""
    from prefect.settings import get_current_settings, temporary_settings

    from ultron.api import _no_flow_heartbeats

    before = get_current_settings().flows.heartbeat_frequency
    with _no_flow_heartbeats():
        assert get_current_settings().flows.heartbeat_frequency is None
    assert get_current_settings().flows.heartbeat_frequency == before
    with temporary_settings(updates={"flows.heartbeat_frequency": 60}), _no_flow_heartbeats():
        assert get_current_settings().flows.heartbeat_frequency == 60
