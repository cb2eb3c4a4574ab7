"""The Prefect server of ULTRON_HOME: only for jobs with no Prefect API, and it asks for its
generated auth string."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from ultron.servers import prefect as prefect_server


def test_a_users_own_prefect_api_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    own = temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"})
    with own, prefect_server.prefect_api() as url:
        assert url is None
    monkeypatch.setenv("ULTRON_PREFECT_SERVER", "ephemeral")
    with prefect_server.prefect_api() as url:
        assert url is None
    assert not (tmp_path / "prefect").exists()  # nothing was started


@pytest.mark.slow
def test_jobs_get_the_server_with_its_auth_string_and_others_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_DATABASE_CONNECTION_URL,
        temporary_settings,
    )

    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    monkeypatch.delenv("ULTRON_PREFECT_SERVER", raising=False)
    # The server's process gets a HOME of its own: it must write nothing to ~/.prefect.
    user_home = tmp_path / "user-home"
    user_home.mkdir()
    monkeypatch.setenv("HOME", str(user_home))
    # As a user without a server, in a process with another server's database set (as
    # prefect_test_harness sets its own): the server of ULTRON_HOME keeps a database of its own.
    other = tmp_path / "other.db"
    updates = {
        PREFECT_API_URL: None,
        PREFECT_SERVER_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{other}",
    }
    with temporary_settings(updates=updates):
        with prefect_server.prefect_api() as url:
            assert url is not None and url.startswith("http://127.0.0.1:")
            with get_client(sync_client=True) as client:  # the job's client: it gets in
                assert client.read_flows() == []
        with prefect_server.prefect_api() as again:
            assert again == url  # the next job reuses it
    assert not other.exists()
    # The database is the home's own, this user's alone; the user's ~/.prefect is untouched.
    database = tmp_path / "prefect" / "prefect.db"
    assert database.is_file() and database.stat().st_mode & 0o777 == 0o600
    assert not (user_home / ".prefect").exists()
    auth = (tmp_path / "prefect" / "auth").read_text()
    assert (tmp_path / "prefect" / "auth").stat().st_mode & 0o077 == 0
    assert httpx.post(f"{url}/flows/filter", json={}).status_code == 401
    # Prefect's clients send the string as Basic credentials, base64 of the string itself.
    header = {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
    assert httpx.post(f"{url}/flows/filter", json={}, headers=header).status_code == 200
