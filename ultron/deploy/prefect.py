"""The Prefect server (and its database) and the worker of the Kubernetes work pool.

The worker creates the pool from the base job template in its ConfigMap when the pool does
not exist yet (``prefect worker start --base-job-template``). That copy of
``infra/prefect/kubernetes-base-job-template.json`` defaults to this namespace, the job
service account, the worker image and the shared Redis (its URL built from the password
Secret), so a flow run's pod needs nothing more.

Example:
    >>> from ultron.deploy.values import InfraValues
    >>> [d["kind"] for d in server(InfraValues())]
    ['PersistentVolumeClaim', 'Deployment', 'Service']
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ultron.deploy.objects import (
    Obj,
    claim,
    container,
    deployment,
    meta,
    rbac,
    secret_env,
    service,
    statefulset,
    volume_claim,
)
from ultron.deploy.redis import redis_env
from ultron.deploy.security import HOME
from ultron.deploy.values import InfraValues

__all__ = ["API_PORT", "api_url", "server", "worker"]

API_PORT = 4200
_TEMPLATE_FILE = "base-job-template.json"
_POSTGRES_UID = 999  # the postgres user of the official image


def api_url(values: InfraValues) -> str:
    """The Prefect API inside the cluster."""
    return f"http://prefect-server.{values.namespace}.svc.cluster.local:{API_PORT}/api"


def _sqlite(values: InfraValues) -> tuple[list[Obj], list[Obj], Obj]:
    """The SQLite file's volume claim; the server's env and pod fields for it."""
    pvc = claim(
        "prefect-data", values.namespace, values.prefect.database_storage, values.storage_class
    )
    url = "sqlite+aiosqlite:////data/prefect.db"
    env = [{"name": "PREFECT_API_DATABASE_CONNECTION_URL", "value": url}]
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "prefect-data"}}
    return [pvc], env, {"volumes": [volume]}


def _postgres(values: InfraValues) -> tuple[list[Obj], list[Obj], Obj]:
    """The PostgreSQL StatefulSet and Service; the server's env for it."""
    p, ns = values.prefect, values.namespace
    password = secret_env("POSTGRES_PASSWORD", p.postgres_password_secret)
    pg_env = [
        {"name": "POSTGRES_USER", "value": "prefect"},
        {"name": "POSTGRES_DB", "value": "prefect"},
        password,
        {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
    ]
    box = container(
        "postgres", p.postgres_image, values.image_pull_policy, ports={"postgres": 5432},
        env=pg_env, mounts={"pgdata": "/var/lib/postgresql/data"},
        probe={"exec": {"command": ["pg_isready", "-U", "prefect"]}, "periodSeconds": 5},
    )  # fmt: skip
    claims = [volume_claim("pgdata", p.database_storage, values.storage_class)]
    database = [
        service("prefect-postgres", ns, "prefect-postgres", {"postgres": 5432}),
        # The image's own user (999) owns the data folder it initialises; the socket folder
        # is the one more place it writes.
        statefulset(
            "prefect-postgres", ns, [box], 1, claims=claims, user=_POSTGRES_UID,
            group=_POSTGRES_UID, writable={"run": "/var/run/postgresql"},
        ),
    ]  # fmt: skip
    url = "postgresql+asyncpg://prefect:$(POSTGRES_PASSWORD)@prefect-postgres:5432/prefect"
    return database, [password, {"name": "PREFECT_API_DATABASE_CONNECTION_URL", "value": url}], {}


def server(values: InfraValues) -> list[Obj]:
    """The Prefect server: a Deployment of one replica (SQLite allows one writer) and its
    Service ``prefect-server``, after its database."""
    p, ns = values.prefect, values.namespace
    database, env, pod = _sqlite(values) if p.database == "sqlite" else _postgres(values)
    env = [
        {"name": "PREFECT_SERVER_API_HOST", "value": "0.0.0.0"},
        {"name": "PREFECT_UI_API_URL", "value": p.ui_api_url or api_url(values)},
        # The server copies its UI there at start: by default into its package, which the
        # read-only root filesystem does not let it write.
        {"name": "PREFECT_UI_STATIC_DIRECTORY", "value": f"{HOME}/.prefect/ui"},
        *env,
    ]
    box = container(
        "prefect-server", p.image, values.image_pull_policy,
        command=["prefect", "server", "start"], args=["--host", "0.0.0.0", "--port", str(API_PORT)],
        ports={"api": API_PORT}, env=env, mounts={"data": "/data"} if pod else None,
        probe={"httpGet": {"path": "/api/health", "port": "api"}, "periodSeconds": 10},
    )  # fmt: skip
    # recreate: the old pod lets go of the SQLite volume before the new one starts.
    return [
        *database,
        deployment("prefect-server", ns, [box], recreate=True, **pod),
        service("prefect-server", ns, "prefect-server", {"api": API_PORT}),
    ]


def job_template(values: InfraValues, template: dict[str, Any]) -> dict[str, Any]:
    """``template`` (the repository's base job template) with this cluster's defaults."""
    out = copy.deepcopy(template)
    props = out["variables"]["properties"]
    props["namespace"]["default"] = values.namespace
    props["service_account_name"]["default"] = values.dask.job_service_account
    props["image"]["default"] = values.worker_image
    props["image_pull_policy"]["default"] = values.image_pull_policy
    box = out["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    # A list, not "{{ env }}": Prefect puts the run's env (its variable) in front of it, and
    # these entries can read the Redis password from its Secret. HOME: the pod's emptyDir
    # (the root filesystem is read-only), whatever the image says.
    box["env"] = [{"name": "HOME", "value": HOME}, *redis_env(values)]
    return out


def worker(values: InfraValues, template: dict[str, Any]) -> list[Obj]:
    """The worker of the Kubernetes work pool, its RBAC (Jobs and their pods, in this
    namespace only) and the base job template it creates the pool with."""
    p, ns = values.prefect, values.namespace
    name = "prefect-worker"
    rules = [
        {"apiGroups": ["batch"], "resources": ["jobs"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods", "pods/log", "pods/status"],
         "verbs": ["get", "list", "watch"]},
        # create, patch: the observer posts events about the pods it handles.
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
         "verbs": ["get", "list", "watch", "create", "patch"]},
    ]  # fmt: skip
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("prefect-base-job-template", ns, name),
        "data": {_TEMPLATE_FILE: json.dumps(job_template(values, template), indent=2) + "\n"},
    }
    env = [
        {"name": "PREFECT_API_URL", "value": api_url(values)},
        # The worker's observer (kopf) of its Jobs' pods otherwise watches the whole cluster,
        # which the Role (this namespace only) does not allow.
        {"name": "PREFECT_INTEGRATIONS_KUBERNETES_OBSERVER_NAMESPACES", "value": ns},
    ]
    args = ["--pool", p.work_pool, "--type", "kubernetes",
            "--base-job-template", f"/etc/prefect/{_TEMPLATE_FILE}"]  # fmt: skip
    box = container(
        name,
        p.worker_image,
        values.image_pull_policy,
        command=["prefect", "worker", "start"],
        args=args,
        env=env,
        mounts={"template": "/etc/prefect"},
    )
    volume = {"name": "template", "configMap": {"name": "prefect-base-job-template"}}
    worker = deployment(name, ns, [box], serviceAccountName=name, volumes=[volume], api_access=True)
    return [*rbac(name, ns, name, rules), config, worker]
