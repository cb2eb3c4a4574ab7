"""Elastic jobs below the flow: the request in Redis, the spec a resume runs with, and the
scaler's units as trials run (a real Redis and limiter; no workers: the address backend's,
which are not the job's to start or stop)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import redis
from typer.testing import CliRunner

from ultron.cli.main import app
from ultron.cluster.elastic import ElasticWorkers
from ultron.cluster.factory import ClusterHandle
from ultron.errors import UsageError
from ultron.limiter.lease_keeper import LeaseKeeper
from ultron.limiter.resource_limiter import ResourceLimiter
from ultron.master.scaler import Scaler
from ultron.master.scaling import effective_spec, request_scale, scale_job
from ultron.redis import keys
from ultron.spec.job import JobSpec

TOY = Path(__file__).parents[2] / "data" / "toy"


def _spec(**extra: object) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "s", "code": str(TOY), "model": "toy_model:Timed", "search_space": {"x": [1]}}
        | extra,
        context={"check_paths": False},
    )


def _job(client: redis.Redis) -> str:
    """A running job: its status, and its master's lease (without it, the job is lost)."""
    job_id = f"scale-{uuid.uuid4().hex[:8]}"
    client.hset(keys.job(job_id), "status", "running")
    # A live master's lease (ultron.master.heartbeat): without it the job would be lost.
    client.set(keys.job_master(job_id), "a-live-master", ex=300)
    return job_id


def test_a_resume_starts_with_the_last_parallelism_asked(redis_client: redis.Redis) -> None:
    job_id = _job(redis_client)
    first = effective_spec(redis_client, job_id, _spec(parallelism=2, min_parallelism=2))
    assert first.parallelism == 2
    request_scale(redis_client, job_id, 1)
    resumed = effective_spec(redis_client, job_id, _spec(parallelism=2, min_parallelism=2))
    assert (resumed.parallelism, resumed.min_parallelism) == (1, 1)
    # A run that asks for another parallelism than the run before it wins over the request.
    assert effective_spec(redis_client, job_id, _spec(parallelism=5)).parallelism == 5


def test_scale_checks_the_job_and_the_number(redis_client: redis.Redis) -> None:
    job_id = _job(redis_client)
    assert scale_job(redis_client, job_id, 3) == "running"
    with pytest.raises(UsageError, match="parallelism is 0; it must be a whole number"):
        scale_job(redis_client, job_id, 0)
    with pytest.raises(UsageError, match="'no-such-job' is not known"):
        scale_job(redis_client, "no-such-job", 2)


def test_the_cli_says_what_it_asked_and_refuses_bad_input(
    redis_client: redis.Redis, redis_url: str
) -> None:
    job_id = _job(redis_client)
    runner = CliRunner()
    asked = runner.invoke(app, ["scale", job_id, "4", "--redis-url", redis_url])
    assert asked.exit_code == 0 and "to run 4 trial(s) at once" in asked.output
    assert redis_client.hget(keys.job(job_id), "parallelism") in ("4", b"4")
    for args in ([job_id, "0"], ["no-such-job", "2"]):
        refused = runner.invoke(app, ["scale", *args, "--redis-url", redis_url])
        assert refused.exit_code == 2 and "Fix:" in refused.output
        assert "Traceback" not in refused.output


def test_the_scaler_takes_free_units_and_gives_back_as_trials_end(
    redis_client: redis.Redis, limiter: ResourceLimiter
) -> None:
    job_id = _job(redis_client)
    lease = limiter.acquire(job_id, 1)
    blocker = limiter.acquire("other", 7)  # 2 of 10 units left
    assert lease is not None and blocker is not None
    keeper = LeaseKeeper(limiter, lease)  # not started: the test renews nothing
    scaler = Scaler(
        redis_client, job_id, limiter=limiter, keeper=keeper,
        workers=ElasticWorkers(ClusterHandle(None, None, {}), _spec(), job_id),
        units_for=float, granted=1, wanted=1, read_s=0.0, retry_s=0.0,
    )  # fmt: skip
    assert scaler.poll(in_flight=1) == 1
    request_scale(redis_client, job_id, 5)
    assert scaler.wake()
    assert scaler.poll(in_flight=1) == 3  # what was free: 3 of the 5 asked
    limiter.release(blocker)
    assert scaler.poll(in_flight=3) == 5  # the rest once released
    assert limiter.holders()[job_id].units == 5
    request_scale(redis_client, job_id, 2)
    assert scaler.poll(in_flight=5) == 2  # no new trial until fewer than 2 run...
    assert limiter.holders()[job_id].units == 5  # ...and the running ones keep their units
    assert scaler.poll(in_flight=3) == 2 and limiter.holders()[job_id].units == 3
    assert scaler.poll(in_flight=1) == 2 and limiter.holders()[job_id].units == 2
    limiter.release(keeper.lease)
