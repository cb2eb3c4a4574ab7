"""Every ``ULTRON_*`` environment variable, in one typed model.

Code reads the environment through :func:`settings`, never through ``os.environ``: each call
reads the variables afresh (a job, a test or a benchmark may change them while the process
runs), and a bad value raises :class:`ultron.errors.EnvironmentVariableError`, which names the
variable, its value, the rule and the fix. Importing this module loads pydantic and
pydantic-settings only.

Example:
    >>> UltronSettings(max_units=8).max_units
    8
    >>> UltronSettings.model_fields["lease_ttl"].default
    30.0
"""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, Json, ValidationError, field_validator
from pydantic.json_schema import JsonDict
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ultron.errors import ConfigIssue, EnvironmentVariableError

__all__ = ["PREFIX", "UltronSettings", "settings"]

logger = logging.getLogger(__name__)

PREFIX = "ULTRON_"
# Read by scripts and deployment files, not by this package, so they have no field here.
READ_ELSEWHERE = frozenset({"ULTRON_EXTRAS", "ULTRON_BENCHMARK_DATA", "ULTRON_REPO"})


def _field(default: Any = None, *, description: str, rule: str, example: str, **kw: Any) -> Any:
    """A field whose rule and example value make the error for a bad value."""
    extra: JsonDict = {"rule": rule, "example": example}
    return Field(default, description=description, json_schema_extra=extra, **kw)


class UltronSettings(BaseSettings):
    """The ``ULTRON_*`` environment variables; each field reads ``ULTRON_<FIELD NAME>``.

    An empty variable counts as unset. Variables read elsewhere, with no field here:
    ``ULTRON_EXTRAS`` (the extras ``scripts/setup.sh`` installs), ``ULTRON_BENCHMARK_DATA``
    (the benchmarks' data folder, ``benchmarks/data.py``) and ``ULTRON_REPO`` (the working
    directory of the deployments in ``prefect.yaml``).

    Attributes:
        home: the local folder for trial environments, the embedded Redis and scratch.
        archive_max_bytes: the most bytes a code base archive may unpack to.
        archive_max_members: the most members (files, folders, links) a code base archive holds.
        cancel_grace: seconds running trials get to stop after a cancellation.
        checkpoint_flush_s: seconds finalize waits for the checkpoints still uploading.
        dask_address: a running Dask scheduler to send trials to; None starts a local cluster.
        data_service: the data service of a trial process, as JSON.
        fresh_trial_process: a fresh trial process per trial (a benchmark's baseline).
        gpus: how many GPUs this machine (or worker) hands to trials; None counts them.
        heartbeat_s: seconds between a job's heartbeats; it is ``lost`` 2.5 of them after
            its last one, and another master may take it over then.
        lease_ttl: seconds a dead job's resource units stay held.
        max_units: the resource limiter's maximum when Redis has none set.
        prefect_server: ``shared``, one Prefect server for the machine's jobs, started by the
            first and up until ``ultron server stop``; ``ephemeral``, Prefect's own per job.
        prefect_start_timeout_s: seconds the shared Prefect server may take to start.
        redis_address: ``host:port`` the embedded Redis also listens on (with its password),
            for workers on other machines; None: its Unix socket only.
        redis_retry_s: seconds Redis clients retry through an outage.
        spawn_workers: local workers start in fresh interpreters, not from the warm
            forkserver (a benchmark's baseline).

    Example:
        >>> UltronSettings(dask_address="tcp://scheduler:8786").dask_address
        'tcp://scheduler:8786'
    """

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, env_ignore_empty=True, frozen=True, validate_default=True
    )

    home: Path = _field(
        Path("~/.cache/ultron"),
        description="Trial environments, the embedded Redis's data, scratch (checkpoints, logs).",
        rule="it must be a folder",
        example="~/.cache/ultron",
    )
    archive_max_bytes: int = _field(
        2 * 2**30,
        ge=1,
        description="The most bytes a code base archive may unpack to; a larger one is refused "
        "before anything is extracted.",
        rule="it must be a whole number of bytes, at least 1",
        example="2147483648",
    )
    archive_max_members: int = _field(
        100_000,
        ge=1,
        description="The most members (files, folders, links) a code base archive may hold.",
        rule="it must be a whole number of at least 1",
        example="100000",
    )
    cancel_grace: float = _field(
        5.0,
        ge=0,
        description="Seconds running trials get to return (ultron.report answers STOP) after "
        "Ctrl-C or SIGTERM before they are stopped; they resume from their checkpoints.",
        rule="it must be a number of seconds, 0 or more",
        example="5",
    )
    checkpoint_flush_s: float = _field(
        300.0,
        ge=0,
        description="Seconds a finishing job waits for the trials' checkpoints still uploading "
        "to the store; any not committed by then is named in the job's summary. A trial's "
        "answer waits for its own uploads at most 120 s, or this long if shorter.",
        rule="it must be a number of seconds, 0 or more",
        example="300",
    )
    dask_address: str | None = _field(
        description="A running Dask scheduler to send trials to; unset starts a local cluster.",
        rule="it must be a Dask scheduler address",
        example="tcp://scheduler:8786",
    )
    data_service: Annotated[Json[dict[str, Any]] | None, NoDecode] = _field(
        description="The data service of a trial process outside a job, as JSON "
        "(DataServiceHandle.trial_config()); a job hands it to its trials itself.",
        rule="it must be a JSON object, as DataServiceHandle.trial_config() gives",
        example='{"dispatcher": "grpc://localhost:5050"}',
    )
    fresh_trial_process: bool = _field(
        False,
        description="Start a fresh trial process for every trial instead of reusing a warm one "
        "(the baseline of benchmarks/overhead.py).",
        rule="it must be a boolean",
        example="1",
    )
    gpus: int | None = _field(
        ge=0,
        description="How many GPUs trials may use here (GPUs 0 to N-1), instead of counting them "
        "(NVML, CUDA_VISIBLE_DEVICES, nvidia-smi): for tests, or to advertise fewer.",
        rule="it must be a whole number of GPUs, 0 or more",
        example="2",
    )
    heartbeat_s: float = _field(
        5.0,
        gt=0,
        description="Seconds between the heartbeats of a job's master process (its lease of "
        "the job, renewed); a job whose heartbeat is 2.5 of them old is shown lost, and another "
        "master (ultron resume, a restart) may take it over.",
        rule="it must be a number of seconds greater than 0",
        example="5",
    )
    lease_ttl: float = _field(
        30.0,
        gt=0,
        description="Seconds a job's lease of resource units outlives its last renewal.",
        rule="it must be a number of seconds greater than 0",
        example="30",
    )
    max_units: int = _field(
        64,
        ge=1,
        description="The resource limiter's maximum when Redis has no ultron:limiter:max_units.",
        rule="it must be a whole number of at least 1",
        example="64",
    )
    prefect_server: Literal["shared", "ephemeral"] = _field(
        "shared",
        description="Where jobs without a PREFECT_API_URL run their flow: a Prefect server "
        "shared by the machine's jobs (up until `ultron server stop`), or Prefect's ephemeral "
        "one per job.",
        rule="it must be shared or ephemeral",
        example="ephemeral",
    )
    prefect_start_timeout_s: float = _field(
        120.0,
        gt=0,
        description="Seconds the shared Prefect server may take to start and answer.",
        rule="it must be a number of seconds greater than 0",
        example="120",
    )
    redis_address: str | None = _field(
        pattern=r"^\S+:\d{1,5}$",
        description="host:port the embedded Redis also listens on over TCP, with its password, "
        "for Dask workers on other machines (SLURM); unset: only its Unix socket in "
        "ULTRON_HOME/redis, which only this user can open.",
        rule="it must be host:port",
        example="10.0.0.5:6379",
    )
    redis_retry_s: float = _field(
        120.0,
        ge=0,
        description="Seconds Redis clients retry through a Redis outage before failing.",
        rule="it must be a number of seconds, 0 or more",
        example="120",
    )

    spawn_workers: bool = _field(
        False,
        description="Start each local Dask worker in a fresh interpreter instead of forking it "
        "from a forkserver that imported Dask and ultron once (the baseline of "
        "benchmarks/first_trial.py).",
        rule="it must be a boolean",
        example="1",
    )

    @field_validator("home")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()


def settings() -> UltronSettings:
    """The ``ULTRON_*`` variables as they are now.

    Built again whenever they (or ``HOME``, which ``~`` in them means) changed since the last
    call, else the last one built for the same values: a worker reads its settings several
    times a trial, and pydantic-settings takes about a millisecond to read the environment.

    Raises:
        EnvironmentVariableError: a variable has a bad value (raised again at every call).
    """
    ours = (
        (name.upper(), value)
        for name, value in os.environ.items()
        if name.upper().startswith(PREFIX)
    )
    return _settings_of(os.environ.get("HOME"), tuple(sorted(ours)))


@functools.lru_cache(maxsize=16)
def _settings_of(home: str | None, variables: tuple[tuple[str, str], ...]) -> UltronSettings:
    """The settings of these variables (the key of the cache; read from the environment)."""
    _warn_unknown()
    try:
        return UltronSettings()
    except ValidationError as exc:
        raise EnvironmentVariableError([_issue(error) for error in exc.errors()]) from exc


def _issue(error: Any) -> ConfigIssue:
    name = str(error["loc"][0])
    variable = PREFIX + name.upper()
    field = UltronSettings.model_fields[name]
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    unset = "unset it" if field.default is None else f"unset it for the default ({field.default})"
    # The value as the variable holds it, not as pydantic had it after parsing JSON.
    raw = {key.upper(): value for key, value in os.environ.items()}.get(variable)
    return ConfigIssue(
        field=variable,
        value=raw if raw is not None else error.get("input"),
        rule=f"{extra.get('rule', 'it must be valid')} ({error['msg']})",
        fix=f"set {variable} to e.g. {extra.get('example', '...')}, or {unset}",
    )


_warned: set[str] = set()


def _warn_unknown() -> None:
    """Warn once per name about an ``ULTRON_*`` variable nothing reads (a typo, most likely)."""
    known = {PREFIX + name.upper() for name in UltronSettings.model_fields} | READ_ELSEWHERE
    for name in os.environ:
        if name.upper().startswith(PREFIX) and name.upper() not in known and name not in _warned:
            _warned.add(name)
            logger.warning(
                "%s is set but means nothing to ultron; known variables: %s",
                name,
                ", ".join(sorted(known)),
            )
