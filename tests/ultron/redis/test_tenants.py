"""Two tenants with their own credentials share one real Redis (ACL users): tenant B reaches
none of tenant A's job, scores, cancel key or lease, through a raw client, the Python API or
the CLI (it cannot list, read, cancel, scale or resume A's job); A holds its own job's lease;
the admin (the ``default`` user) sees both.

The jobs' records are written by the real :class:`JobStore` and :class:`ScoreCache` with the
owner's credentials, as a job's master writes them; one small whole job (``slow``) shows a
tenant's job running end to end with its own credentials.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import yaml
from redis.exceptions import AuthenticationError, NoPermissionError
from typer.testing import CliRunner, Result

from ultron import api
from ultron.cli.main import app
from ultron.errors import JobBusyError, SpecError, UsageError
from ultron.master.cancel import request_cancel
from ultron.master.heartbeat import MasterLease, holding_the_job
from ultron.master.job_state import JobState, JobStatus, JobStore
from ultron.master.overview import find_job, overview, visible_jobs
from ultron.master.score_cache import ScoreCache
from ultron.redis import keys
from ultron.redis.tenants import (
    add_tenant,
    caller_tenant,
    check_tenant,
    list_tenants,
    remove_tenant,
    tenant_url,
)
from ultron.trial_records import TrialResult

REPO = Path(__file__).parents[3]
ULTRON = str(Path(sys.executable).with_name("ultron"))
runner = CliRunner()


def _ultron(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def _shown_url(output: str) -> str:
    return next(line.split(": ", 1)[1] for line in output.splitlines() if "REDIS_URL" in line)


@dataclass
class Tenant:
    name: str
    url: str
    client: redis.Redis


@dataclass
class Two:
    admin: redis.Redis
    admin_url: str
    a: Tenant
    b: Tenant
    job: str  # tenant A's job


def _cache(client: redis.Redis, tenant: str) -> ScoreCache:
    return ScoreCache(
        client,
        code_hash="c0de",
        model="pkg.train:Model",
        seed=0,
        metric="loss",
        tenant=tenant,
        namespace=keys.tenant_namespace(tenant),
    )


@pytest.fixture
def two(redis_url: str) -> Iterator[Two]:
    """Tenants A and B (ACL users of the session's Redis) and a job of A's, written by A."""
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    made: list[Tenant] = []
    for letter in "ab":
        name = f"team-{letter}-{os.getpid()}"
        url = tenant_url(redis_url, name, add_tenant(admin, name))
        made.append(Tenant(name, url, redis.Redis.from_url(url, decode_responses=True)))
    a, b = made
    job = f"secret-job-{os.getpid()}"
    store = JobStore(a.client, job, namespace=keys.tenant_namespace(a.name))
    spec = {"name": "a", "tenant": a.name, "objective": {"metric": "loss", "mode": "minimize"}}
    a.client.hset(store.key, mapping={"spec": json.dumps(spec), "updated": "1"})
    row = TrialResult.from_dict(
        {"trial_id": "0000", "status": "completed", "hyperparameters": {"lr": 0.1}, "score": 0.5}
    )
    store.save(JobState(job, trials=[row], next_trial=1), new=[row])
    store.set_status(JobStatus.RUNNING)
    _cache(a.client, a.name).put({"lr": 0.1}, {"score": 0.5, "metrics": {"loss": 0.5}})
    yield Two(admin, redis_url, a, b, job)
    for tenant in made:
        tenant.client.close()
        remove_tenant(admin, tenant.name)
        for key in admin.scan_iter(match=f"{keys.tenant_namespace(tenant.name)}:*"):
            admin.delete(key)
    admin.close()


def test_a_raw_client_with_b_credentials_gets_noperm_on_every_key_of_a(two: Two) -> None:
    namespace = keys.tenant_namespace(two.a.name)
    a_keys = sorted(two.admin.scan_iter(match=f"{namespace}:*"))
    assert len(a_keys) >= 3  # the job hash, its trial table and the score cache
    b = two.b.client
    for key in a_keys:
        with pytest.raises(NoPermissionError):
            b.type(key)
        with pytest.raises(NoPermissionError):
            b.delete(key)
    with pytest.raises(NoPermissionError):  # cancel: the job's request key
        request_cancel(b, two.job, namespace=namespace)
    # (SCAN, which takes no key, still shows key names: Redis ACLs do not filter it; see the
    # operations page. Every read, write or delete of such a key is refused.)
    with pytest.raises(NoPermissionError):  # nor the default tenant's (the admin's jobs)
        b.exists(keys.job(two.job))
    # B's own keys and the limiter's work.
    b.hset(keys.job("mine", namespace=keys.tenant_namespace(two.b.name)), "status", "running")
    b.hget(keys.limiter("tenant_max_units"), two.b.name)


def test_b_reads_no_score_of_a_from_the_cache(two: Two) -> None:
    mine = _cache(two.a.client, two.a.name).get_many([{"lr": 0.1}], job_id="j", trial_ids=["0"])
    assert mine[0] is not None and mine[0]["score"] == 0.5
    with pytest.raises(NoPermissionError):
        _cache(two.b.client, two.a.name).get_many([{"lr": 0.1}], job_id="j", trial_ids=["0"])
    # B's own cache of the same computation is another key and holds nothing.
    theirs = _cache(two.b.client, two.b.name).get_many([{"lr": 0.1}], job_id="j", trial_ids=["0"])
    assert theirs == [None]


def test_b_s_cache_clear_empties_b_s_own_cache_and_no_other(two: Two) -> None:
    mine = _cache(two.b.client, two.b.name)
    mine.put({"lr": 0.2}, {"score": 0.4, "metrics": {"loss": 0.4}})
    cleared = _ultron("cache", "clear", "--redis-url", two.b.url)
    assert cleared.exit_code == 0, cleared.output
    assert "removed 1 score-cache key(s)" in cleared.output
    assert mine.get_many([{"lr": 0.2}], job_id="j", trial_ids=["0"]) == [None]
    theirs = _cache(two.a.client, two.a.name).get_many([{"lr": 0.1}], job_id="j", trial_ids=["0"])
    assert theirs[0] is not None and theirs[0]["score"] == 0.5  # A's stays


def test_the_python_api_finds_a_job_for_its_tenant_and_the_admin_only(two: Two) -> None:
    with pytest.raises(UsageError, match="is not known to this Redis"):
        api.scale(two.job, 2, redis_url=two.b.url)
    assert (
        two.admin.hget(
            keys.job(two.job, namespace=keys.tenant_namespace(two.a.name)), "parallelism"
        )
        is None
    )
    assert caller_tenant(two.a.client) == two.a.name and caller_tenant(two.admin) is None
    assert find_job(two.b.client, two.job) is None
    assert (keys.tenant_namespace(two.a.name), two.job) not in visible_jobs(two.b.client)
    namespace = find_job(two.a.client, two.job)
    assert namespace == keys.tenant_namespace(two.a.name)
    assert overview(two.a.client, two.job, namespace=namespace).best_score == 0.5
    assert find_job(two.admin, two.job) == namespace
    assert (namespace, two.job) in visible_jobs(two.admin)
    assert {two.a.name, two.b.name} <= set(list_tenants(two.admin))


def test_b_cannot_list_read_cancel_or_follow_a_job_of_a_through_the_cli(two: Two) -> None:
    commands = (
        ["status", two.job],
        ["cancel", two.job, "--wait", "0"],
        ["logs", two.job],
        ["scale", two.job, "2"],
        ["report", two.job],
    )
    for command in commands:
        result = _ultron(*command, "--redis-url", two.b.url)
        assert result.exit_code == 2, (command, result.output)
        assert f"job '{two.job}' is not known to this Redis" in result.output
        assert "tenant" not in result.output  # never "not yours"
    listed = _ultron("jobs", "--redis-url", two.b.url)
    assert listed.exit_code == 0, listed.output
    assert two.job not in listed.output
    # A sees its job; the admin sees it too, and A's own view says its tenant.
    assert two.job in _ultron("status", two.job, "--redis-url", two.a.url).output
    everything = _ultron("jobs", "--redis-url", two.admin_url)
    assert two.job in everything.output and two.a.name in everything.output


def test_a_holds_its_job_s_lease_in_its_namespace_and_b_cannot_resume_the_job(two: Two) -> None:
    namespace = keys.tenant_namespace(two.a.name)
    with pytest.raises(NoPermissionError):  # B cannot take over A's job
        MasterLease(two.b.client, two.job, ttl_s=30.0, namespace=namespace).take()
    resumed = _ultron("resume", two.job, "--redis-url", two.b.url)
    assert resumed.exit_code == 2, resumed.output
    assert "no job of this id is known" in resumed.output and "tenant" not in resumed.output
    with pytest.raises(SpecError, match="no job of this id is known"):
        api.spec_to_resume(two.job, redis_url=two.b.url)
    # Nobody holds A's job's lease: it is lost, found in A's namespace, and cancel says so.
    assert overview(two.a.client, two.job, namespace=namespace).status == "lost"
    lost = _ultron("cancel", two.job, "--wait", "0", "--redis-url", two.a.url)
    assert lost.exit_code == 2 and "is lost" in lost.output, lost.output
    # A's own credentials hold its job's lease, under its namespace: the job runs again, a
    # resume of it is refused meanwhile, and A's cancel names this run's token.
    with holding_the_job(two.a.client, two.job, heartbeat_s=5.0, namespace=namespace) as lease:
        assert two.admin.get(keys.job_master(two.job, namespace=namespace)) == lease.token
        assert overview(two.a.client, two.job, namespace=namespace).status == "running"
        with pytest.raises(JobBusyError):
            api.spec_to_resume(two.job, redis_url=two.a.url)
        asked = _ultron("cancel", two.job, "--wait", "0", "--redis-url", two.a.url)
        assert asked.exit_code == 0, asked.output
        assert two.admin.get(keys.job_cancel(two.job, namespace=namespace)) == lease.token
        assert two.admin.get(keys.job_cancel(two.job)) is None  # not the default namespace
    assert two.admin.get(keys.job_master(two.job, namespace=namespace)) is None


def test_a_spec_naming_another_tenant_is_refused_on_the_tenant_field(two: Two) -> None:
    check_tenant(two.b.client, two.b.name)
    check_tenant(two.admin, two.a.name)  # the admin runs jobs of any tenant
    with pytest.raises(SpecError) as refused:
        check_tenant(two.b.client, two.a.name)
    issue = refused.value.issues[0]
    assert issue.field == "tenant" and issue.value == two.a.name
    assert f"tenant: {two.b.name}" in issue.fix


def test_tenants_commands_add_list_rotate_remove_and_are_the_admin_s(
    two: Two, redis_url: str
) -> None:
    name = f"team-c-{os.getpid()}"
    added = _ultron("tenants", "add", name, "--redis-url", redis_url)
    assert added.exit_code == 0, added.output
    old = _shown_url(added.output)
    old_client = redis.Redis.from_url(old)
    assert caller_tenant(old_client) == name
    assert name in _ultron("tenants", "list", "--redis-url", redis_url).output
    again = _ultron("tenants", "add", name, "--redis-url", redis_url)
    assert again.exit_code == 2 and "exists already" in again.output

    rotated = _ultron("tenants", "rotate", name, "--redis-url", redis_url)
    assert rotated.exit_code == 0, rotated.output
    new = _shown_url(rotated.output)
    assert caller_tenant(redis.Redis.from_url(new)) == name
    with pytest.raises(AuthenticationError):  # the old password no longer works
        redis.Redis.from_url(old).ping()

    # A tenant may neither manage tenants nor set limits.
    for command in (["tenants", "list"], ["limits", "set", "--max-units", "99"]):
        refused = _ultron(*command, "--redis-url", two.a.url)
        assert refused.exit_code == 2 and "admin" in refused.output, refused.output

    assert _ultron("tenants", "remove", name, "--redis-url", redis_url).exit_code == 0
    assert name not in list_tenants(two.admin)
    gone = _ultron("tenants", "remove", name, "--redis-url", redis_url)
    assert gone.exit_code == 2 and "no such tenant" in gone.output
    old_client.close()


def test_save_keeps_the_tenant_s_url_in_a_0600_file_and_rotate_replaces_it(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ULTRON_HOME", str(tmp_path))
    name = f"team-s-{os.getpid()}"
    saved = tmp_path / "tenants" / f"{name}.url"
    try:
        added = _ultron("tenants", "add", name, "--save", "--redis-url", redis_url)
        assert added.exit_code == 0 and str(saved) in added.output, added.output
        assert saved.stat().st_mode & 0o777 == 0o600 and saved.parent.stat().st_mode & 0o077 == 0
        assert saved.read_text().strip() == _shown_url(added.output)
        rotated = _ultron("tenants", "rotate", name, "--save", "--redis-url", redis_url)
        assert rotated.exit_code == 0, rotated.output
        url = saved.read_text().strip()
        assert url == _shown_url(rotated.output) != _shown_url(added.output)
        with redis.Redis.from_url(url) as client:  # the saved URL is the working one
            assert caller_tenant(client) == name
    finally:
        with redis.Redis.from_url(redis_url) as admin:
            remove_tenant(admin, name)


@pytest.mark.slow
@pytest.mark.usefixtures("ultron_home")
def test_a_tenant_runs_a_job_with_its_own_credentials_and_not_as_another(
    two: Two, tmp_path: Path
) -> None:
    """One small whole job of tenant A with A's credentials: the master, the workers and the
    trials write only under A's namespace; the same spec naming B is refused before compute."""
    job_id = f"own-{os.getpid()}"
    spec = {
        "name": "own",
        "code": str(REPO / "tests" / "data" / "toy"),
        "model": "toy_model:Epochs",
        "search_space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}, "epochs": [2]},
        "num_iterations": 2,
        "parallelism": 2,
        "redis_url": two.a.url,
        "tenant": two.a.name,
        "storage": str(tmp_path / "runs"),
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run(
        [ULTRON, "run", str(path), "--job-id", job_id],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    namespace = keys.tenant_namespace(two.a.name)
    record = two.admin.hgetall(keys.job(job_id, namespace=namespace))
    assert record["status"] == "completed"
    assert two.admin.hlen(keys.job_trials(job_id, namespace=namespace)) == 2
    assert not two.admin.exists(keys.job(job_id))  # nothing in the default tenant's keys
    shown = _ultron("status", job_id, "--redis-url", two.a.url)
    assert f"job {job_id} ({two.a.name}): completed" in shown.output

    path.write_text(yaml.safe_dump({**spec, "tenant": two.b.name}))
    refused = _ultron("run", str(path), "--job-id", f"{job_id}-b")
    assert refused.exit_code == 2, refused.output
    assert f"tenant is '{two.b.name}'" in refused.output
    assert f"credentials are those of tenant '{two.a.name}'" in refused.output
    assert "Traceback" not in refused.output
    assert not two.admin.exists(keys.job(f"{job_id}-b", namespace=namespace))
