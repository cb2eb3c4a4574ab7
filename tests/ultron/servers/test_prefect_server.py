"""The Prefect server shared by a machine's jobs: reused while used, stopped when idle."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import psutil
import pytest
from filelock import FileLock

from ultron.servers import prefect as prefect_share


def test_a_users_own_prefect_api_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    own = temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"})
    with own, prefect_share.prefect_api() as url:
        assert url is None
    monkeypatch.setenv("ULTRON_PREFECT_SERVER", "ephemeral")
    with prefect_share.prefect_api() as url:
        assert url is None
    assert not (tmp_path / "prefect" / "server.json").exists()  # nothing was started


def test_a_job_that_finds_the_server_starting_does_not_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    (tmp_path / "prefect").mkdir()
    starting = FileLock(tmp_path / "prefect" / "server.lock")  # another job is starting it
    with starting, prefect_share.prefect_api() as url:
        assert url is None  # Prefect's ephemeral server, as without a shared one
    assert not list((tmp_path / "prefect").glob("users/*.lock"))


@pytest.mark.slow
def test_the_shared_server_is_reused_and_stops_once_idle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    monkeypatch.setenv("ULTRON_PREFECT_IDLE_S", "3")
    state_file = tmp_path / "prefect" / "server.json"
    first_url, first = prefect_share.shared_server_url(timeout_s=180)
    try:
        second_url, second = prefect_share.shared_server_url(timeout_s=180)
        assert second_url == first_url  # the second job reuses the first one's server
        pid = json.loads(state_file.read_text())["pid"]
        first.drop()
        time.sleep(6)  # past the idle time, but the second job still uses it
        assert httpx.get(f"{first_url}/health", timeout=10).status_code == 200
        second.drop()
        deadline = time.monotonic() + 60
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie":
            assert time.monotonic() < deadline, "the idle server did not stop"
            time.sleep(0.5)
        assert not state_file.exists()
    finally:
        prefect_share.stop_shared_server()
