"""The kubernetes backend's images, for real and without a daemon: the quickstart's image is
built with podman on a base worker image made here (mmdebstrap, infra/docker/), pushed to
Debian's docker-registry on loopback, found there by a second build, pulled back, and one
trial runs inside a container from it through the worker's trial runner, as the image's
non-root user with a read-only root filesystem."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ultron.containerize.builder import ImageError, find_builder
from ultron.containerize.image import IMAGE_PYTHON, build_job_image
from ultron.deploy.security import GID, HOME, UID

# The first run on a machine builds the base worker image (torch and all) from uv's cache that
# scripts/setup.sh filled: 2.8 min in all on a fresh 2-core machine; later runs keep its
# dependency layer and rebuild only ultron's (30 s in all).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).parents[3]
INFRA = ROOT / "infra" / "docker"
QUICKSTART = ROOT / "examples" / "quickstart" / "code"
# What the base worker image is made of: its tag changes when any of it does.
WORKER_INPUTS = ("pyproject.toml", "ultron", "tasks", "flows", "algorithms", "datamanager")


def _missing() -> str | None:
    # It builds and pushes a 1.7 GB image: from uv's cache (infra/docker/build-worker.sh) 2.8 min
    # on a fresh 2-core machine, 30 s with the worker image cached. ULTRON_TEST_IMAGES=0 opts out.
    if os.environ.get("ULTRON_TEST_IMAGES") == "0":
        return "ULTRON_TEST_IMAGES=0: the image test (a 1.7 GB image, about 3 min) is off"
    if os.geteuid() != 0:
        return "needs root: podman's storage and mmdebstrap"
    for tool in ("podman", "mmdebstrap", "docker-registry"):
        if shutil.which(tool) is None:
            return f"needs {tool} (scripts/setup.sh installs it with apt when root)"
    return None


if reason := _missing():
    pytestmark = [*pytestmark, pytest.mark.skip(reason=reason)]


def _podman(*args: str) -> str:
    result = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"podman {' '.join(args)}: {result.stderr[-2000:]}"
    return result.stdout


@pytest.fixture(scope="module")
def containers_conf() -> Iterator[None]:
    """podman as this machine needs it (runc, cgroupfs, ulimits): infra/docker/containers.conf."""
    before = os.environ.get("CONTAINERS_CONF")
    os.environ["CONTAINERS_CONF"] = str(INFRA / "containers.conf")
    yield
    if before is None:
        os.environ.pop("CONTAINERS_CONF", None)
    else:
        os.environ["CONTAINERS_CONF"] = before


def _worker_tag() -> str:
    """A hash of ultron's sources, the installed versions and the image recipe."""
    digest = hashlib.sha256()
    files = [INFRA / name for name in ("worker-cpu.Dockerfile", "entrypoint.sh", "build-worker.sh")]
    for name in WORKER_INPUTS:
        path = ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    freeze = [sys.executable, "-m", "pip", "freeze", "--exclude-editable"]
    digest.update(subprocess.run(freeze, capture_output=True, check=True).stdout)
    return "test-" + digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def worker_image(containers_conf: None) -> str:
    """The CPU base worker image of this checkout, on an OS base made here (both kept: a
    second run with the same sources builds nothing; older test images are removed)."""
    subprocess.run(["bash", str(INFRA / "make-base.sh")], check=True)
    image = f"ultron-automl/worker-cpu:{_worker_tag()}"
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(cache / "ultron-wheelhouse")}
    subprocess.run(["bash", str(INFRA / "build-worker.sh"), image], check=True, env=env)
    # Older test images go once this one is built: their dependency layer was its cache.
    listed = _podman(
        "images",
        "--format",
        "{{.Repository}}:{{.Tag}}",
        "--filter",
        "reference=ultron-automl/worker-cpu",
    )
    for old in listed.split():
        if ":test-" in old and not old.endswith(image.split(":")[1]):
            _podman("rmi", old)
    return image


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's docker-registry (distribution 2.8) on a free loopback port, storage in tmp."""
    folder = tmp_path_factory.mktemp("registry")
    port = _free_port()
    config = folder / "config.yml"
    config.write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {folder / 'data'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    log = (folder / "registry.log").open("w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2),
            ):
                break
            assert server.poll() is None, (folder / "registry.log").read_text()
            assert time.monotonic() < deadline, "the registry did not answer in 30 s"
            time.sleep(0.2)
        yield f"localhost:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_the_quickstart_image_is_built_pushed_reused_and_runs_a_trial(
    worker_image: str, registry: str, redis_url: str, tmp_path: Path
) -> None:
    builder = find_builder()
    assert builder.tool == "podman"
    target = f"{registry}/hpo"
    first = build_job_image(QUICKSTART, registry=target, base_image=worker_image, work_dir=tmp_path)
    assert not first.reused
    assert first.reference == f"{target}/ultron-job:{first.tag}"
    assert builder.in_registry(first.reference)

    second = build_job_image(
        QUICKSTART, registry=target, base_image=worker_image, work_dir=tmp_path
    )
    assert second.reused and second.reference == first.reference

    # What a node does: the image comes from the registry, not from this machine's copy.
    _podman("rmi", first.reference)
    _podman("pull", "-q", "--tls-verify=false", first.reference)
    try:
        result, owners = _trial_in_container(first.reference, first.code_paths, redis_url)
    finally:
        _podman("rmi", "--force", first.reference)
    assert result["status"] == "completed", result
    assert result["metrics"]["accuracy"] == result["score"]
    assert 0.5 < result["score"] <= 1.0  # 10 digit classes: chance is 0.1
    # The image's user, not root, ran the worker and the trial: the trial's checkpoints (its
    # own process wrote them) are that user's.
    assert owners["worker"] == [UID, GID], owners
    assert owners["checkpoints"] == [UID], owners


def test_a_registry_that_refuses_the_push_is_a_clear_error(worker_image: str) -> None:
    nowhere = f"localhost:{_free_port()}/hpo/ultron-job:refused"  # nothing listens there
    _podman("tag", worker_image, nowhere)
    try:
        with pytest.raises(ImageError) as caught:
            find_builder().push(nowhere)
    finally:
        _podman("rmi", nowhere)
    message = str(caught.value)
    assert f"cluster.registry is '{nowhere.rsplit('/', 1)[0]}'" in message
    assert "Fix: start the registry or correct cluster.registry" in message


def _trial_in_container(
    reference: str, code_paths: tuple[str, ...], redis_url: str
) -> tuple[dict, dict]:
    """One quickstart trial run by ``ultron.worker.runner.run_trial`` in a container held as
    the pods hold it (infra/k8s): the image's own user, a read-only root filesystem with
    scratch at /tmp and the home, no capabilities, no privilege escalation. Returns the
    trial's result and the owners of what ran: the worker's user and group, and the users
    owning the trial's checkpoint files."""
    request = {
        "job_id": f"image-test-{os.getpid()}",
        "trial_id": "t0",
        "hyperparameters": {
            "lr": 0.01,
            "hidden": 64,
            "layers": 1,
            "dropout": 0.1,
            "optimizer": "adam",
            "epochs": 4,
        },
        "model": "digits_mlp.train:Model",
        "python": IMAGE_PYTHON,
        "code_paths": list(code_paths),
        "metric": "accuracy",
        "seed": 7,
        "checkpoint_path": "/tmp/trial/checkpoints/t0",
        "log_path": "/tmp/trial/logs/trial-t0.log",
        "redis_url": redis_url,
        "timeout": 300,
    }
    script = (
        "import json, os, sys\n"
        "from ultron.worker.runner import run_trial\n"
        "print('RESULT', json.dumps(run_trial(json.loads(sys.argv[1]))))\n"
        "walk = os.walk('/tmp/trial/checkpoints')\n"
        "files = [os.path.join(d, f) for d, _, fs in walk for f in fs]\n"
        "owners = {'worker': [os.getuid(), os.getgid()],\n"
        "          'checkpoints': sorted({os.stat(f).st_uid for f in files})}\n"
        "print('OWNERS', json.dumps(owners))\n"
    )
    # --network host: the trial reports to this session's Redis on loopback. No --user: the
    # image's USER is what is under test. --read-only keeps /tmp writable (a tmpfs).
    confined = ["--read-only", "--tmpfs", HOME, "--cap-drop", "all",
                "--security-opt", "no-new-privileges"]  # fmt: skip
    out = _podman(
        "run", "--rm", "--network", "host", *confined, reference,
        "python", "-c", script, json.dumps(request),
    )  # fmt: skip
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()
             if line.startswith(("RESULT ", "OWNERS "))}  # fmt: skip
    return json.loads(lines["RESULT"]), json.loads(lines["OWNERS"])
