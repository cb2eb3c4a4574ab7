"""What varies between clusters in ``infra/k8s/``: one typed model, read from a values file.

Every field has a type, a default and a description; the defaults render the committed files
under ``infra/k8s/``. Unknown keys are errors, and a bad value is reported with its field, the
value, the rule and the fix (:func:`load_values`).

Example:
    >>> values = InfraValues.model_validate({"namespace": "hpo", "dask": {"worker_gpus": 2}})
    >>> values.namespace, values.dask.worker_gpus, values.redis.replicas
    ('hpo', 2, 3)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from ultron.errors import ConfigIssue, SpecError

__all__ = [
    "DaskValues",
    "DataServiceValues",
    "EgressRule",
    "InfraValues",
    "NetworkValues",
    "PrefectValues",
    "RedisValues",
    "load_values",
]

# A Kubernetes name (RFC 1123 label): namespaces, secrets, service accounts, pools.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")


class _Values(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError("it must be a Kubernetes quantity such as 500m, 2 or 4Gi")
    return value


def _name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(
            "it must be a Kubernetes name: lower-case letters, digits and '-', at most 63, "
            "starting and ending with a letter or digit"
        )
    return value


K8sName = Annotated[str, AfterValidator(_name)]
Quantity = Annotated[str, AfterValidator(_quantity)]


class PrefectValues(_Values):
    """The Prefect server, its database and the worker of the Kubernetes work pool."""

    image: str = Field(
        default="prefecthq/prefect:3.8.8-python3.11",
        description="Image of the Prefect server (the Prefect version ultron pins).",
    )
    worker_image: str = Field(
        default="prefecthq/prefect:3.8.8-python3.11-kubernetes",
        description="Image of the Prefect worker: Prefect with prefect-kubernetes installed.",
    )
    work_pool: K8sName = Field(
        default="kubernetes",
        description="The Kubernetes work pool the worker serves (prefect.yaml's hpo-job-k8s).",
    )
    database: Literal["sqlite", "postgres"] = Field(
        default="sqlite",
        description="sqlite: a file on a volume, one server replica; postgres: a PostgreSQL "
        "StatefulSet next to it (its password from postgres_password_secret).",
    )
    postgres_image: str = Field(default="postgres:16", description="Image of the PostgreSQL.")
    postgres_password_secret: K8sName = Field(
        default="ultron-postgres",
        description="Secret holding the PostgreSQL password under the key `password`.",
    )
    database_storage: Quantity = Field(
        default="10Gi", description="Size of the database's volume (SQLite file or PostgreSQL)."
    )
    ui_api_url: str | None = Field(
        default=None,
        description="The API URL the browser uses (PREFECT_UI_API_URL), e.g. "
        "https://prefect.example.com/api; default: the in-cluster service.",
    )


class RedisValues(_Values):
    """Redis with Sentinel: one master and replicas, append-only files on volumes."""

    image: str = Field(default="redis:7.4", description="Image of Redis and its sentinels.")
    replicas: int = Field(
        default=3, ge=1, description="Redis servers (the first starts as master)."
    )
    sentinels: int = Field(
        default=3, ge=1, description="Sentinels; a quorum of a majority elects a new master."
    )
    master_name: K8sName = Field(
        default="ultron", description="The name the sentinels monitor the master under."
    )
    password_secret: K8sName = Field(
        default="ultron-redis",
        description="Secret holding the Redis (and sentinel) password under the key `password`.",
    )
    storage: Quantity = Field(default="8Gi", description="Size of each Redis server's volume.")


class DaskValues(_Values):
    """The Dask side: the role that lets jobs create Dask clusters (``cluster: kubernetes``)
    and a standing cluster of GPU workers for ``cluster: address``."""

    job_service_account: K8sName = Field(
        default="ultron-job",
        description="Service account of the job pods; it may create DaskClusters here.",
    )
    workers: int = Field(default=2, ge=0, description="Workers of the standing Dask cluster.")
    worker_cpu: Quantity = Field(default="4", description="CPU limit of each worker pod.")
    worker_memory: Quantity = Field(default="16Gi", description="Memory limit of each worker pod.")
    worker_gpus: int = Field(
        default=1,
        ge=0,
        description="NVIDIA GPUs of each worker pod (nvidia.com/gpu); 0 for CPU workers.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels the worker pods need, e.g. {nvidia.com/gpu.product: H100}.",
    )


class DataServiceValues(_Values):
    """A standing tf.data service: a dispatcher and workers that read a shared volume."""

    enabled: bool = Field(default=True, description="Render the data service at all.")
    image: str = Field(
        default="tensorflow/tensorflow:2.21.0",
        description="Image with TensorFlow (the tf.data service's servers).",
    )
    workers: int = Field(default=2, ge=1, description="tf.data service workers.")
    dispatcher_port: int = Field(
        default=5050, ge=1, le=65535, description="The dispatcher's gRPC port."
    )
    worker_port: int = Field(default=5051, ge=1, le=65535, description="Each worker's port.")
    shared_storage: Quantity = Field(
        default="50Gi",
        description="Size of the shared volume (ReadWriteMany) for ULTRON_HOME: the staged "
        "data the workers read and the dispatcher's journal.",
    )


def _cidr(value: str) -> str:
    import ipaddress

    try:
        ipaddress.ip_network(value)
    except ValueError:
        raise ValueError("it must be a network in CIDR notation such as 10.0.0.0/16") from None
    return value


Cidr = Annotated[str, AfterValidator(_cidr)]


class EgressRule(_Values):
    """Addresses outside the cluster that trial pods may reach (an object store)."""

    cidr: Cidr = Field(description="The network, e.g. 52.216.0.0/15 or 10.0.0.0/16.")
    exclude: list[Cidr] = Field(
        default_factory=list,
        description="Networks inside `cidr` that stay out of reach (the ipBlock's except).",
    )
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=lambda: [443], min_length=1, description="TCP ports, e.g. [443]."
    )


class NetworkValues(_Values):
    """The NetworkPolicy of the trial (Dask worker) pods: they reach only their scheduler,
    Redis, the object store, the data service and DNS; only schedulers and job pods reach
    them."""

    enabled: bool = Field(default=True, description="Render the NetworkPolicy at all.")
    object_store: list[EgressRule] = Field(
        default_factory=lambda: [EgressRule(cidr="0.0.0.0/0", ports=[443])],
        description="Where the object store (s3://, gs://) is: trial pods may reach these "
        "networks and ports. The default, HTTPS anywhere, suits a cloud store; narrow it to "
        "your store's addresses, e.g. [{cidr: 10.0.5.0/24, ports: [9000]}] for MinIO.",
    )
    dns_namespace: K8sName = Field(
        default="kube-system", description="Namespace of the cluster's DNS pods."
    )
    dns_labels: dict[str, str] = Field(
        default_factory=lambda: {"k8s-app": "kube-dns"},
        description="Labels of the cluster's DNS pods (CoreDNS keeps k8s-app: kube-dns).",
    )


class InfraValues(_Values):
    """Everything ``ultron infra render`` fills into the manifests of ``infra/k8s/``."""

    namespace: K8sName = Field(default="ultron", description="Namespace of everything.")
    worker_image: str = Field(
        default="ultron-automl/worker-cpu:0.1.0",
        description="The ultron worker image (infra/docker/): Dask workers and job pods.",
    )
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = Field(
        default="IfNotPresent", description="Pull policy of every container."
    )
    storage_class: str | None = Field(
        default=None,
        description="StorageClass of the volumes; none: the cluster's default. The data "
        "service's shared volume needs one that offers ReadWriteMany.",
    )
    prefect: PrefectValues = Field(default_factory=PrefectValues, description="Prefect.")
    redis: RedisValues = Field(default_factory=RedisValues, description="Redis with Sentinel.")
    dask: DaskValues = Field(default_factory=DaskValues, description="Dask.")
    data_service: DataServiceValues = Field(
        default_factory=DataServiceValues, description="The tf.data service."
    )
    network: NetworkValues = Field(
        default_factory=NetworkValues, description="The trial pods' NetworkPolicy."
    )


def load_values(path: Path | None) -> InfraValues:
    """The values in ``path`` (YAML or JSON) over the defaults; the defaults for ``None``.

    Raises:
        SpecError: the file is missing or unreadable, or a value breaks its field's rule;
            every problem is named with its field, value, rule and fix.
    """
    if path is None:
        return InfraValues()
    source = f"values file {path}"
    try:
        data: Any = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        issue = ConfigIssue(
            "(file)", str(path), f"it must be a readable YAML file ({exc})", "fix the path"
        )
        raise SpecError([issue], source) from None
    try:
        return InfraValues.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_issue(err) for err in exc.errors()], source) from None


def _issue(err: Any) -> ConfigIssue:
    loc = tuple(str(part) for part in err["loc"])
    field = ".".join(loc) or "(top level)"
    rule = str(err["msg"]).removeprefix("Value error, ").replace("Input should be", "it must be")
    if not loc:
        rule = "it must be a mapping of settings to values, e.g. namespace: hpo"
    if err["type"] == "extra_forbidden":
        known = _known(loc[:-1])
        return ConfigIssue(field, err["input"], "it is not a setting", f"use one of {known}")
    return ConfigIssue(field, err["input"], rule, _fix(loc))


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = InfraValues
    for part in loc:
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _known(parent: tuple[str, ...]) -> str:
    model = _model_at(parent)
    return ", ".join(model.model_fields) if model else "the documented settings"


def _fix(loc: tuple[str, ...]) -> str:
    model = _model_at(loc[:-1])
    field = model.model_fields.get(loc[-1]) if model and loc else None
    if field is None:
        return "see infra/README.md for the values and their rules"
    default = field.get_default(call_default_factory=True)
    about = (field.description or "").rstrip(".")
    return f"set {'.'.join(loc)} as the rule says ({about}), or leave it out for {default!r}"
