"""OCI images of a job's trial environment, for the kubernetes backend (paper V-B).

A job's image is the base worker image (``infra/docker/``: Python and ultron with its
dependencies in ``/opt/ultron/venv``) plus the user's package, installed from a wheelhouse made
on this machine (the build itself reaches no package index, and is reproducible), and the code
base in ``/opt/code``. Its tag is a content hash of the code base, the dependency wheels and
the base image, so an image already in the registry is reused: nothing is built or pushed.

The builder is whichever is present: podman, else buildah, else docker with a running daemon
(:mod:`ultron.containerize.builder`).

Example::

    image = build_job_image("examples/quickstart/code", registry="localhost:5000/hpo",
                            base_image="ultron-automl/worker-cpu:0.1.0", work_dir=tmp)
    image.reference   # 'localhost:5000/hpo/ultron-job:3f2a...'
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ultron.containerize.archive import safe_extract
from ultron.containerize.builder import Builder, ImageError, find_builder
from ultron.containerize.codebase import ARCHIVE_SUFFIXES, code_hash
from ultron.containerize.codebase import ignored as ignored_in_code
from ultron.containerize.environment import TrialEnvironment, find_project_root
from ultron.deploy.security import GID, UID
from ultron.usercode import import_paths

__all__ = [
    "IMAGE_CODE",
    "IMAGE_PYTHON",
    "ImageEnvironment",
    "JobImage",
    "build_job_image",
    "image_tag",
    "with_image",
    "worker_paths",
]

IMAGE_PYTHON = "/opt/ultron/venv/bin/python"
"""The interpreter of the trial environment inside a worker image."""
IMAGE_CODE = "/opt/code"
"""Where a job's image holds the code base (its project root)."""
LOCK_FILE = "/opt/ultron/requirements.lock"
"""The base image's ``pip freeze`` (infra/docker/worker-cpu.Dockerfile writes it)."""
REPOSITORY = "ultron-job"
_TAG_SCHEME = b"ultron-image/2\0"  # bump when the job image's layout changes

# Root installs the package into the base image's venv (root's, so a trial cannot change it);
# the image then runs as the base image's non-root user, whatever user the base ends with.
_CONTAINERFILE = f"""\
FROM {{base}}
USER 0:0
COPY wheels /tmp/ultron-wheels
COPY code {IMAGE_CODE}
RUN {IMAGE_PYTHON} -m pip install -q --no-index --find-links /tmp/ultron-wheels {{package}} \\
 && rm -rf /tmp/ultron-wheels
LABEL org.ultron.image-tag="{{tag}}"
USER {UID}:{GID}
"""


@dataclass(frozen=True)
class JobImage:
    """A job's image, pushed to its registry.

    Attributes:
        reference: ``<registry>/ultron-job:<tag>``, what the worker pods run.
        tag: the content hash of the code base, the dependency wheels and the base image.
        python: the trial environment's interpreter inside the image.
        code_paths: the code base's import folders inside the image.
        reused: True when the registry already held the tag: nothing was built or pushed.
    """

    reference: str
    tag: str
    python: str = IMAGE_PYTHON
    code_paths: tuple[str, ...] = (IMAGE_CODE,)
    reused: bool = False


@dataclass(frozen=True)
class ImageEnvironment(TrialEnvironment):
    """The local trial environment of a kubernetes job (the flow checks the model in it) and
    the image its workers run (:func:`worker_paths`, :func:`with_image`)."""

    image: JobImage | None = None


def with_image(spec: Any, env: TrialEnvironment) -> Any:
    """``spec`` with ``cluster.image`` set to the job's image, when ``env`` has one."""
    image = getattr(env, "image", None)
    if image is None:
        return spec
    cluster = spec.cluster.model_copy(update={"image": image.reference})
    return spec.model_copy(update={"cluster": cluster})


def worker_paths(env: TrialEnvironment) -> tuple[str, tuple[str, ...]]:
    """The interpreter and import folders of the trial environment as the workers see them:
    inside the job's image for an :class:`ImageEnvironment`, else the local ones."""
    image = getattr(env, "image", None)
    if image is not None:
        return image.python, image.code_paths
    return str(env.python), import_paths(env.source)


def image_tag(code_digest: str, dependencies: list[str], base_id: str) -> str:
    """The tag of a job's image: a hash of what goes into it, the same on every machine.

    Args:
        code_digest: :func:`~ultron.containerize.codebase.code_hash` of the code base.
        dependencies: the dependency wheels' file names (name, version, tags); order is free.
        base_id: the base image's id (the digest of its configuration).
    """
    digest = hashlib.sha256(_TAG_SCHEME)
    for part in (code_digest, *sorted(set(dependencies)), base_id):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:40]


def build_job_image(
    code: str | Path,
    *,
    registry: str,
    base_image: str,
    work_dir: str | Path,
    builder: Builder | None = None,
    python: str = sys.executable,
) -> JobImage:
    """Build and push the image of a code base, or find it already in the registry.

    Args:
        code: a project folder or a tar archive of one (``.tar``, ``.tar.gz``, ...).
        registry: where the image goes, e.g. ``localhost:5000/hpo`` (``cluster.registry``).
        base_image: the base worker image; pulled when this machine does not have it.
        work_dir: a scratch folder for the build context (removed afterwards).
        builder: the builder; default :func:`find_builder`.
        python: the interpreter whose pip builds the wheelhouse.

    Raises:
        ImageError: no builder, or the base image, the build or the push failed.
        CodeBaseError: the code base cannot be read or its wheel not built.
    """
    builder = builder or find_builder()
    base_id = builder.image_id(base_image)
    if base_id is None:
        builder.run(
            "pull",
            *builder.tls_flags(base_image),
            base_image,
            what=f"pulling the base image {base_image}",
            fix="build it here (bash infra/docker/make-base.sh && bash "
            "infra/docker/build-worker.sh) or set cluster.base_image to one you can pull",
        )
        base_id = builder.image_id(base_image) or base_image
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="image-", dir=work_dir) as scratch:
        context = Path(scratch)
        project = _copy_code(Path(code).expanduser(), context / "code")
        code_paths = _image_code_paths(project)
        installed = _installed(builder, base_image)
        package, dependencies = _wheelhouse(
            project, context / "wheels", python=python, installed=installed
        )
        tag = image_tag(code_hash(Path(code).expanduser()), dependencies, base_id)
        reference = f"{registry.rstrip('/')}/{REPOSITORY}:{tag}"
        if builder.in_registry(reference):
            return JobImage(reference, tag, code_paths=code_paths, reused=True)
        (context / "Containerfile").write_text(
            _CONTAINERFILE.format(base=base_image, package=package, tag=tag)
        )
        builder.build(context, reference)
    builder.push(reference)
    return JobImage(reference, tag, code_paths=code_paths)


def _copy_code(source: Path, target: Path) -> Path:
    """The code base's files (as its code hash sees them) under ``target``; its project root."""
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, ignore=ignored_in_code)
    elif source.name.endswith(ARCHIVE_SUFFIXES):
        safe_extract(source, target)
    else:
        code_hash(source)  # raises the CodeBaseError that says what a code base must be
    root = find_project_root(target, label=str(source))
    if root != target:  # an archive's single top-level folder: the image holds the project
        staged = target.with_name("code-root")
        root.rename(staged)
        shutil.rmtree(target)
        staged.rename(target)
    _readable_by_all(target)
    return target


def _readable_by_all(folder: Path) -> None:
    """Let every user read the code base's files (and enter its folders): the image holds
    them as root's, and its trials run as a user of their own (a file the user's umask made
    0600 would be unreadable there)."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode
        extra = 0o555 if path.is_dir() or mode & 0o100 else 0o444
        path.chmod(mode | extra)


def _image_code_paths(project: Path) -> tuple[str, ...]:
    """The import folders of the code base inside the image (``src/`` first, as locally)."""
    local = import_paths(project)
    return tuple(IMAGE_CODE + p[len(str(project)) :] for p in local)


def _wheelhouse(
    project: Path, wheels: Path, *, python: str, installed: dict[str, str]
) -> tuple[str, list[str]]:
    """Build the user's wheel, and those of its dependencies the base image lacks, into
    ``wheels``; return the package's name and the dependency wheels' file names.

    ``installed`` maps the base image's distributions to their versions: a requirement they
    satisfy is not built again, and the others are resolved with them as constraints.
    """
    from packaging.utils import canonicalize_name

    # No build isolation, as for the local environment: the build tools of this environment
    # build the wheel, and nothing is fetched for them.
    args = ["--no-deps", "--no-build-isolation", "-w", str(wheels), str(project)]
    _pip_wheel(python, *args, label=str(project))
    built = sorted(wheels.glob("*.whl"))
    if len(built) != 1:
        raise ImageError(f"pip built {len(built)} wheels from {project}; expected one")
    name, missing = _missing_requirements(built[0], installed)
    if missing:
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as lock:
            lock.write("".join(f"{n}=={v}\n" for n, v in installed.items()))
            lock.flush()
            _pip_wheel(python, "-w", str(wheels), "-c", lock.name, *missing, label=str(project))
    dependencies = []
    for wheel in sorted(wheels.glob("*.whl")):
        dist = canonicalize_name(wheel.name.split("-")[0])
        if dist in installed:
            wheel.unlink()  # in the base image already (a dependency's dependency)
        elif dist != name:
            dependencies.append(wheel.name)
    return name, dependencies


def _missing_requirements(wheel: Path, installed: dict[str, str]) -> tuple[str, list[str]]:
    """The wheel's distribution name and the requirements the base image does not satisfy."""
    import zipfile
    from email.parser import Parser

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(archive.read(meta_name).decode())
    missing = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = installed.get(canonicalize_name(req.name))
        if have is None or not req.specifier.contains(have, prereleases=True):
            missing.append(str(req))
    return canonicalize_name(meta["Name"]), missing


def _pip_wheel(python: str, *args: str, label: str) -> None:
    from ultron.containerize.environment import _install_cause, _pip_env

    command = [python, "-m", "pip", "wheel", "-q", *args]
    result = subprocess.run(command, capture_output=True, text=True, env=_pip_env())
    if result.returncode != 0:
        raise ImageError(
            f"the wheelhouse of code base {label!r} cannot be built: `{shlex.join(command)}` "
            f"exited with {result.returncode} ({_install_cause(result.stdout + result.stderr)})"
            "; the package and the dependencies its base image lacks must build as wheels. "
            "Fix: make setup.py/pyproject.toml build (`pip wheel .`) and its dependencies "
            "reachable from the package index (or in the base image)"
        )


def _installed(builder: Builder, base_image: str) -> dict[str, str]:
    """The base image's distributions (its /opt/ultron/requirements.lock) by canonical name."""
    from packaging.utils import canonicalize_name

    lock = builder.read_file(base_image, LOCK_FILE)
    pins = (line.split("==", 1) for line in lock.splitlines() if "==" in line)
    return {canonicalize_name(n.strip()): v.strip() for n, v in pins}
