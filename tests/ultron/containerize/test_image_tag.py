"""The job image's tag is a content hash; the builder and registry errors say what to do."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ultron.containerize.builder import Builder, ImageError, find_builder
from ultron.containerize.codebase import code_hash
from ultron.containerize.environment import TrialEnvironment
from ultron.containerize.image import (
    IMAGE_CODE,
    IMAGE_PYTHON,
    ImageEnvironment,
    JobImage,
    image_tag,
    with_image,
    worker_paths,
)
from ultron.errors import SpecError
from ultron.spec.job import JobSpec

QUICKSTART = Path(__file__).parents[3] / "examples" / "quickstart" / "code"
DEPS = ["scikit_learn-1.7.2-cp311-cp311-manylinux_2_17_x86_64.whl"]
BASE = "sha256:" + "ab" * 32


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the quickstart's code base, ours to change."""
    return Path(shutil.copytree(QUICKSTART, tmp_path / "code"))


def _tag(folder: Path, deps: list[str] = DEPS, base: str = BASE) -> str:
    return image_tag(code_hash(folder), deps, base)


def test_the_tag_changes_when_the_code_changes(project: Path) -> None:
    before = _tag(project)
    train = project / "digits_mlp" / "train.py"
    train.write_text(train.read_text() + "\n# one more line\n")
    assert _tag(project) != before


def test_the_tag_stays_when_only_the_code_base_place_times_or_caches_change(
    project: Path, tmp_path: Path
) -> None:
    before = _tag(project)
    elsewhere = Path(shutil.copytree(project, tmp_path / "elsewhere"))
    os.utime(elsewhere / "digits_mlp" / "train.py", (1, 1))
    cache = elsewhere / "digits_mlp" / "__pycache__"
    cache.mkdir()
    (cache / "train.cpython-311.pyc").write_bytes(b"compiled")
    (elsewhere / "build").mkdir()  # setuptools' output beside pyproject.toml
    (elsewhere / "build" / "junk.txt").write_text("x")
    assert _tag(elsewhere) == before


def test_the_tag_changes_with_the_dependencies_and_the_base_not_their_order(
    project: Path,
) -> None:
    two = [*DEPS, "joblib-1.5.2-py3-none-any.whl"]
    assert _tag(project, two) == _tag(project, list(reversed(two)))
    assert _tag(project, two) != _tag(project, DEPS)
    assert _tag(project, base="sha256:" + "cd" * 32) != _tag(project)


def test_workers_see_the_image_paths_and_the_cluster_its_reference(tmp_path: Path) -> None:
    local = TrialEnvironment(tmp_path / "venv/bin/python", "0" * 64, tmp_path, tmp_path, False)
    image = JobImage("localhost:5000/hpo/ultron-job:abc", "abc")
    env = ImageEnvironment(**local.__dict__, image=image)
    assert worker_paths(env) == (IMAGE_PYTHON, (IMAGE_CODE,))
    assert worker_paths(local) == (str(local.python), (str(tmp_path),))
    spec = JobSpec.model_validate(_spec(cluster={"type": "kubernetes", "registry": "r/x"}))
    assert with_image(spec, env).cluster.image == image.reference  # type: ignore[union-attr]
    assert with_image(spec, local) is spec


def test_no_builder_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no podman, buildah, docker
    with pytest.raises(ImageError) as caught:
        find_builder()
    message = str(caught.value)
    assert "cluster.image" in message and "no image builder" in message
    assert "Fix: install podman" in message


def test_a_kubernetes_job_without_registry_or_image_is_a_spec_error(tmp_path: Path) -> None:
    from ultron.tasks.containerize import _with_job_image

    spec = JobSpec.model_validate(_spec(cluster={"type": "kubernetes"}))
    local = TrialEnvironment(tmp_path / "python", "0" * 64, tmp_path, tmp_path, False)
    with pytest.raises(SpecError) as caught:
        _with_job_image(spec, local, spec.cluster)  # type: ignore[arg-type]
    assert caught.value.issues[0].field == "cluster.registry"
    assert "Fix: set cluster.registry" in str(caught.value)


def _spec(**extra: object) -> dict[str, object]:
    return {
        "name": "image-tag",
        "code": str(QUICKSTART),
        "model": "digits_mlp.train:Model",
        "search_space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}},
        "num_iterations": 1,
        "objective": {"metric": "accuracy", "mode": "maximize"},
        **extra,
    }


@pytest.mark.parametrize(
    ("reference", "loopback"),
    [
        ("localhost:5000/hpo/ultron-job:abc", True),
        ("127.0.0.1:5000/ultron-job:abc", True),
        ("[::1]:5000/ultron-job:abc", True),
        ("localhost.example.com/hpo/ultron-job:abc", False),
        ("registry.example.com/hpo/ultron-job:abc", False),
    ],
)
def test_only_loopback_registries_are_spoken_to_over_http(reference: str, loopback: bool) -> None:
    flags = Builder("podman", "/usr/bin/podman").tls_flags(reference)
    assert (flags == ["--tls-verify=false"]) is loopback
    assert Builder("docker", "/usr/bin/docker").tls_flags(reference) == []


def test_a_trial_request_names_the_paths_inside_the_image(tmp_path: Path) -> None:
    """The dispatcher sends workers the image's interpreter and code, not the flow machine's:
    /opt/code does not exist where the flow runs, and the local venv not in the pod."""
    from ultron.master.dispatcher import TrialDispatcher
    from ultron.master.job_state import JobStore
    from ultron.redis import keys

    local = TrialEnvironment(tmp_path / "venv/bin/python", "0" * 64, tmp_path, tmp_path, False)
    env = ImageEnvironment(**local.__dict__, image=JobImage("r/x/ultron-job:abc", "abc"))
    spec = JobSpec.model_validate(_spec(cluster={"type": "kubernetes", "registry": "r/x"}))
    # No Redis is touched: request() only reads the store's job id.
    store = JobStore.__new__(JobStore)
    store.job_id, store.namespace = "job-1", keys.NAMESPACE
    from distributed import Client

    # An in-process scheduler with no worker: the dispatcher needs a client, no trial runs.
    with Client(processes=False, n_workers=0, dashboard_address=None) as client:
        dispatcher = TrialDispatcher(
            client, store, spec=spec, env=env, redis_url="redis://x:1/0", scratch=str(tmp_path)
        )
        request = dispatcher.request("t1", {"lr": 0.1})
    assert (request.python, tuple(request.code_paths)) == (IMAGE_PYTHON, (IMAGE_CODE,))
