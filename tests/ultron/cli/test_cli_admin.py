"""``ultron limits`` and ``ultron jobs`` against a real Redis server of the test's own.

The commands work in the ``ultron`` namespace, as jobs do: a server of its own keeps the
limits these tests set away from every other test's jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner, Result

from ultron.cli.main import app
from ultron.limiter.limits import read_max_units, read_tenant_max_units
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.redis import keys
from ultron.redis.tenants import add_tenant
from ultron.servers.redis_process import EmbeddedRedis

runner = CliRunner()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[str]:
    """URL of a Redis server of this test alone."""
    with EmbeddedRedis(tmp_path / "redis", appendonly=False) as server:
        yield server.url


def _ultron(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def _limiter(url: str, tenant: str) -> ResourceLimiter:
    return ResourceLimiter(redis.Redis.from_url(url), max_units=10, tenant=tenant)


def test_limits_set_and_show(own_redis: str) -> None:
    client = redis.Redis.from_url(own_redis)
    result = _ultron("limits", "set", "--max-units", "10", "--redis-url", own_redis)
    assert result.exit_code == 0, result.output
    assert "the global max_units set to 10" in result.output
    result = _ultron(
        "limits", "set", "--tenant", "team-a", "--max-units", "4", "--redis-url", own_redis
    )
    assert result.exit_code == 0, result.output
    # What a job of team-a reads when it starts waiting (tasks/acquire_resources.py):
    assert read_max_units(client, default=64) == 10
    assert read_tenant_max_units(client, "team-a") == 4
    assert read_tenant_max_units(client, "team-b") is None
    lease = _limiter(own_redis, "team-a").acquire("job-a", 3)
    assert lease is not None

    shown = _ultron("limits", "--redis-url", own_redis)
    assert shown.exit_code == 0, shown.output
    assert "global: max_units 10 (set in Redis); 3 in use; 0 job(s) waiting" in shown.output
    row = next(line for line in shown.output.splitlines() if "team-a" in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells == ["team-a", "4", "3", "1 job(s)", "0 job(s)"]
    assert _ultron("limits", "show", "--redis-url", own_redis).output == shown.output

    result = _ultron("limits", "set", "--tenant", "team-a", "--unset", "--redis-url", own_redis)
    assert result.exit_code == 0 and "max_units of tenant 'team-a' removed" in result.output
    assert read_tenant_max_units(client, "team-a") is None
    assert _ultron("limits", "set", "--unset", "--redis-url", own_redis).exit_code == 0
    shown = _ultron("limits", "--redis-url", own_redis).output
    assert "max_units 64 (the default, ULTRON_MAX_UNITS)" in shown
    assert "none" in next(line for line in shown.splitlines() if "team-a" in line)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["limits", "set"], "give exactly one of --max-units N and --unset"),
        (["limits", "set", "--max-units", "3", "--unset"], "give exactly one of"),
        (["limits", "set", "--max-units", "0"], "--max-units is 0; it must be an integer of"),
        (["limits", "set", "--tenant", "", "--max-units", "2"], "--tenant is ''; it must not be"),
    ],
)
def test_limits_set_refuses_bad_input_in_one_error(
    own_redis: str, args: list[str], message: str
) -> None:
    result = _ultron(*args, "--redis-url", own_redis)
    assert result.exit_code == 2
    assert message in result.output and "Fix:" in result.output
    assert "Traceback" not in result.output


def test_a_bad_stored_limit_is_named(own_redis: str) -> None:
    redis.Redis.from_url(own_redis).hset("ultron:limiter:tenant_max_units", "team-a", "lots")
    result = _ultron("limits", "--redis-url", own_redis)
    assert result.exit_code == 2
    assert "ultron:limiter:tenant_max_units[team-a] is 'lots'" in result.output
    assert "Traceback" not in result.output


def test_fractional_units_show_as_a_person_reads_them(own_redis: str) -> None:
    """GPU trials hold fractions of units (``resources.gpu: 0.1`` at parallelism 1): their sums
    show no float noise (0.1 + 0.2 is not 0.30000000000000004)."""
    team = _limiter(own_redis, "team-a")
    assert team.acquire("job-tenth", 0.1) is not None
    assert team.acquire("job-fifth", 0.2) is not None
    shown = _ultron("limits", "--redis-url", own_redis).output
    assert "0.3 in use" in shown, shown
    row = next(line for line in shown.splitlines() if "team-a" in line)
    assert [cell.strip() for cell in row.split("│")[1:-1]][2] == "0.3"
    listed = _ultron("jobs", "--redis-url", own_redis).output
    rows = {line.split("│")[1].strip(): line for line in listed.splitlines() if "job-" in line}
    assert " 0.1 " in rows["job-tenth"] and " 0.2 " in rows["job-fifth"], listed
    assert "0000" not in shown + listed


def test_jobs_shows_holders_and_waiters_with_tenant_units_and_since(own_redis: str) -> None:
    empty = _ultron("jobs", "--redis-url", own_redis)
    assert empty.exit_code == 0 and "no job is known to this Redis" in empty.output
    team_a, team_b = _limiter(own_redis, "team-a"), _limiter(own_redis, "team-b")
    assert team_a.acquire("job-a1", 6) is not None
    assert team_b.acquire("job-b1", 4) is not None
    assert team_a.acquire("job-a2", 2, queue=True) is None  # the cluster is full
    assert team_b.acquire("job-b2", 3, queue=True) is None

    result = _ultron("jobs", "--redis-url", own_redis)
    assert result.exit_code == 0, result.output
    rows = {
        line.split("│")[1].strip(): line for line in result.output.splitlines() if "job-" in line
    }
    # Newest first: the order of their "since" times (tests/ultron/test_cli_jobs.py checks it).
    assert set(rows) == {"job-a1", "job-b1", "job-a2", "job-b2"}
    assert "team-a" in rows["job-a1"] and "holding" in rows["job-a1"] and " 6 " in rows["job-a1"]
    assert "queued (#1 of its tenant)" in rows["job-b2"] and " 3 " in rows["job-b2"]
    assert all(" UTC (" in row and "s ago)" in row for row in rows.values())

    mine = _ultron("jobs", "--tenant", "team-a", "--redis-url", own_redis).output
    assert "job-a1" in mine and "job-a2" in mine
    assert "job-b1" not in mine and "job-b2" not in mine
    none = _ultron("jobs", "--tenant", "team-c", "--redis-url", own_redis).output
    assert "no job of tenant 'team-c' is known to this Redis" in none


def test_without_a_url_the_commands_use_redis_url_then_the_embedded_server(
    own_redis: str, ultron_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", own_redis)
    assert _ultron("limits", "set", "--tenant", "team-a", "--max-units", "2").exit_code == 0
    assert read_tenant_max_units(redis.Redis.from_url(own_redis), "team-a") == 2
    monkeypatch.delenv("REDIS_URL")
    result = _ultron("limits")  # the embedded server of ULTRON_HOME, started for the command
    assert result.exit_code == 0, result.output
    assert "team-a" not in result.output


def test_the_admin_s_cache_clear_empties_every_tenant_s_cache(own_redis: str) -> None:
    """The admin's ``ultron cache clear`` reaches the default namespace and every tenant's,
    also of a tenant removed since (its keys stay), and nothing but score caches."""
    client = redis.Redis.from_url(own_redis, decode_responses=True)
    add_tenant(client, "vision")
    entries = [
        keys.score_cache("c0de", None, model="m:M", seed=0, tenant=tenant,
                         namespace=keys.tenant_namespace(tenant))
        for tenant in ("default", "vision", "gone")
    ]  # fmt: skip
    for key in entries:
        client.hset(key, "f", "{}")
    job = keys.job("cache-1", namespace=keys.tenant_namespace("vision"))
    client.hset(job, "status", "completed")
    result = _ultron("cache", "clear", "--redis-url", own_redis)
    assert result.exit_code == 0, result.output
    assert "removed 3 score-cache key(s)" in result.output
    assert client.exists(*entries) == 0 and client.exists(job) == 1
    client.close()
