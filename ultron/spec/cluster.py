"""Where a job's trials run: the ``cluster:`` section of a job spec.

One typed section per backend, told apart by ``type``; the same spec moves from a laptop to
an HPC or a Kubernetes cluster by changing this section alone. ``ULTRON_DASK_ADDRESS``, when
set, overrides it (the job then uses that scheduler, as with ``type: address``).

Example:
    >>> from pydantic import TypeAdapter
    >>> TypeAdapter(ClusterSpec).validate_python({"type": "slurm", "partition": "gpu"}).walltime
    '01:00:00'
    >>> TypeAdapter(ClusterSpec).validate_python({}).type
    'local'
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from ultron.spec.strict import Strict, rule_error

__all__ = [
    "AddressCluster",
    "ClusterSpec",
    "KubernetesCluster",
    "LocalCluster",
    "SlurmCluster",
    "dashboard_address",
]

_WALLTIME = re.compile(r"^(\d+-)?\d{1,3}:\d{2}(:\d{2})?$")
_ADDRESS = re.compile(r"^(tcp|tls|inproc|ucx)://\S+$")
# HOST:PORT of a listening socket: a host name, an IPv4 address, [an IPv6 one], or nothing (every
# interface), then a port.
_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):(\d{1,5})$")
# A Kubernetes name (RFC 1123 label): namespaces and service accounts.
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class _Dashboard(Strict):
    """The Dask dashboard of a scheduler that the job starts in its own process."""

    dashboard_address: str = Field(
        default="127.0.0.1:0",
        description="Where the Dask dashboard listens, HOST:PORT (port 0: any free one). It "
        "shows the scheduler's log and trials' exceptions: the default, loopback, keeps it to "
        "this machine; :8787 opens it on every interface.",
    )

    @field_validator("dashboard_address")
    @classmethod
    def _listen(cls, value: str) -> str:
        match = _LISTEN.match(value)
        if match is None or int(match.group(2)) > 65535:
            raise rule_error(
                "dashboard_address must be HOST:PORT with a port from 0 to 65535",
                "write it like 127.0.0.1:8787 (this machine only) or :8787 (every interface)",
            )
        return value


class LocalCluster(_Dashboard):
    """A Dask ``LocalCluster`` on this machine: ``parallelism`` worker processes (the default),
    at most ``num_iterations`` and four per core (more would only queue), or as many as the
    cores fit at ``resources.cpu`` each where that is more (``cpu: 0.1``: ten per core)."""

    type: Literal["local"] = Field(default="local", description="local: this machine.")


class AddressCluster(Strict):
    """A Dask scheduler that already runs (started by hand, by a Helm chart, by a batch job)."""

    type: Literal["address"] = Field(description="address: an existing Dask scheduler.")
    address: str = Field(
        description="The scheduler's address, e.g. tcp://10.0.0.5:8786 or tls://host:8786."
    )

    @field_validator("address")
    @classmethod
    def _scheme(cls, value: str) -> str:
        if not _ADDRESS.match(value):
            raise rule_error(
                "address must be a Dask scheduler address with its protocol",
                "write it as tcp://HOST:PORT (or tls://HOST:PORT), as `dask scheduler` prints",
            )
        return value


class KubernetesCluster(Strict):
    """A Dask cluster made by the Dask Kubernetes operator (``KubeCluster``): one worker pod per
    running trial (trials of a fraction of a GPU share a whole-GPU pod), sized from
    ``resources``, adaptive between ``min_workers`` and the pods ``parallelism`` trials fill, on
    the image ``containerize`` builds (or ``image``)."""

    type: Literal["kubernetes"] = Field(description="kubernetes: Dask Kubernetes operator.")
    namespace: str = Field(default="default", description="Namespace of the Dask cluster.")
    service_account: str | None = Field(
        default=None, description="Service account of the scheduler and worker pods."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels the worker pods need, e.g. {nvidia.com/gpu.product: H100}.",
    )
    min_workers: int = Field(
        default=0,
        ge=0,
        le=10_000,
        strict=True,
        description="Workers kept while the job idles (adaptive minimum).",
    )
    image: str | None = Field(
        default=None,
        description="Worker image; default: the image containerize builds and pushes to "
        "`registry`.",
    )
    registry: str | None = Field(
        default=None,
        description="Registry the job's image is pushed to, e.g. registry.example.com/hpo.",
    )
    base_image: str = Field(
        default="ultron-automl/worker-cpu:0.1.0",
        description="Base worker image the job's image is built on (infra/docker/; "
        "ultron-automl/worker-cuda:0.1.0 for GPUs); pulled when this machine lacks it.",
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables of the worker pods."
    )

    @field_validator("namespace", "service_account")
    @classmethod
    def _k8s_name(cls, value: str | None) -> str | None:
        if value is not None and not _K8S_NAME.match(value):
            raise rule_error(
                "it must be a Kubernetes name: lower-case letters, digits and '-', at most 63",
                "write it as `kubectl get namespaces` (or serviceaccounts) lists it",
            )
        return value


class SlurmCluster(_Dashboard):
    """Dask workers as SLURM batch jobs (dask-jobqueue's ``SLURMCluster``): one job per worker,
    each with the cores, memory and GPUs (``--gres=gpu:N``) of one trial from ``resources``.
    The trial environment (the job's virtual environment and code) must lie on a file system
    the compute nodes share: set ``ULTRON_HOME`` to a shared folder."""

    type: Literal["slurm"] = Field(description="slurm: workers as SLURM jobs.")
    partition: str | None = Field(default=None, description="Partition (queue) of the jobs.")
    account: str | None = Field(default=None, description="Account charged for the jobs.")
    walltime: str = Field(
        default="01:00:00", description="Time limit of each worker job, [D-]HH:MM[:SS]."
    )
    python: str | None = Field(
        default=None,
        description="Python of the workers on the compute nodes; default: this Python.",
    )
    job_directives: list[str] = Field(
        default_factory=list,
        description="Extra #SBATCH options, e.g. ['--constraint=a100', '--qos=short'].",
    )
    interface: str | None = Field(
        default=None,
        description="Network interface the scheduler and workers talk on, e.g. ib0; default: "
        "the address of this host's default route.",
    )

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, value: str) -> str:
        if not _WALLTIME.match(value):
            raise rule_error(
                "walltime must be SLURM's [D-]HH:MM[:SS]",
                "write it like 01:30:00 or 2-00:00:00",
            )
        return value


def dashboard_address(cluster: Any) -> str | None:
    """Where the dashboard of the scheduler the job starts listens: ``dashboard_address`` of a
    ``local`` or ``slurm`` section; None for the others (their scheduler is not ours)."""
    return cluster.dashboard_address if isinstance(cluster, _Dashboard) else None


def _cluster_type(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("type", "local"))
    return str(getattr(value, "type", "local"))


ClusterSpec = Annotated[
    Annotated[LocalCluster, Tag("local")]
    | Annotated[AddressCluster, Tag("address")]
    | Annotated[KubernetesCluster, Tag("kubernetes")]
    | Annotated[SlurmCluster, Tag("slurm")],
    Discriminator(_cluster_type),
]
"""The ``cluster:`` section: ``type`` picks the backend; ``local`` when left out."""
