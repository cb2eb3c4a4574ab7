"""The image builder on this machine: podman, else buildah (neither needs a daemon), else
docker with a running daemon (:func:`find_builder`), spoken to alike (:class:`Builder`).

Registries on loopback (``localhost:5000``) are spoken to over plain HTTP, as Docker does.
Every failure is an :class:`ImageError` naming what failed and the fix.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ultron.errors import UltronError

__all__ = ["Builder", "ImageError", "find_builder"]


class ImageError(UltronError):
    """A job's image cannot be built or pushed (no builder, a failed build, a refused push)."""


@dataclass(frozen=True)
class Builder:
    """An image builder on PATH: ``tool`` is podman, buildah or docker."""

    tool: str
    path: str

    def run(self, *args: str, what: str, fix: str, check: bool = True) -> str:
        """Run the builder; a failure is an :class:`ImageError` naming what failed and the fix."""
        command = [self.path, *args]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if check and result.returncode != 0:
            raise ImageError(
                f"{what} failed: `{shlex.join(command)}` exited with {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()[-1500:]}\nFix: {fix}"
            )
        return result.stdout if result.returncode == 0 else ""

    def tls_flags(self, reference: str) -> list[str]:
        """``--tls-verify=false`` for a registry on loopback (docker speaks HTTP to it anyway)."""
        return ["--tls-verify=false"] if self.tool != "docker" and _loopback(reference) else []

    def image_id(self, reference: str) -> str | None:
        """The id of a local image, or None when this machine has no such image."""
        if self.tool == "buildah":
            args = ["inspect", "--type", "image", "--format", "{{.FromImageID}}"]
        else:
            args = ["image", "inspect", "--format", "{{.Id}}"]
        return self.run(*args, reference, what="", fix="", check=False).strip() or None

    def read_file(self, image: str, path: str) -> str:
        """The text of a file in a local image (a container that only runs ``cat``)."""
        what = f"reading {path} in the base image {image}"
        fix = "use a base worker image of infra/docker/ (it writes that file)"
        if self.tool == "buildah":
            container = self.run("from", "-q", image, what=what, fix=fix).strip()
            try:
                return self.run("run", container, "cat", path, what=what, fix=fix)
            finally:
                self.run("rm", container, what="", fix="", check=False)
        return self.run("run", "--rm", "--entrypoint", "cat", image, path, what=what, fix=fix)

    def in_registry(self, reference: str) -> bool:
        """Whether the registry holds ``reference`` (its manifest, read without pulling)."""
        skopeo = shutil.which("skopeo")
        if skopeo:
            tls = ["--tls-verify=false"] if _loopback(reference) else []
            command = [skopeo, "inspect", "--raw", *tls, f"docker://{reference}"]
            result = subprocess.run(command, capture_output=True, check=False)
            return result.returncode == 0
        args = ["manifest", "inspect", *self.tls_flags(reference), reference]
        result = subprocess.run([self.path, *args], capture_output=True, check=False)
        return result.returncode == 0

    def build(self, context: Path, tag: str) -> None:
        """Build the Containerfile in ``context`` as ``tag`` (podman, buildah, docker alike)."""
        args = ["-q", "-f", str(context / "Containerfile"), "-t", tag, str(context)]
        fix = "if pip names a missing dependency, add it to your pyproject.toml; the base image "
        fix += "must be one of infra/docker/ (it holds /opt/ultron/venv)"
        self.run("build", *args, what="building the job's image", fix=fix)

    def push(self, reference: str) -> None:
        """Push ``reference``; a refusal names ``cluster.registry``, the rule and the fix."""
        registry = reference.rsplit("/", 1)[0]
        self.run(
            "push",
            *self.tls_flags(reference),
            reference,
            what=f"cluster.registry is {registry!r}; pushing the job's image there (it must "
            "be reachable and accept pushes from this machine)",
            fix="start the registry or correct cluster.registry, and log in to it "
            f"(`{self.tool} login {registry.split('/')[0]}`)",
        )


def _loopback(reference: str) -> bool:
    """Whether an image reference names a registry on this machine (served over HTTP)."""
    host = reference.split("/", 1)[0].rsplit(":", 1)[0]
    return host in ("localhost", "[::1]") or host.startswith("127.")


def find_builder() -> Builder:
    """The image builder on this machine: podman, else buildah, else docker with a daemon.

    Raises:
        ImageError: none is present (or docker's daemon does not answer).
    """
    for tool in ("podman", "buildah"):
        path = shutil.which(tool)
        if path:
            return Builder(tool, path)
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "info"], capture_output=True).returncode == 0:
        return Builder("docker", docker)
    found = "docker without a running daemon" if docker else "none of podman, buildah, docker"
    raise ImageError(
        f"cluster.type is 'kubernetes' with no cluster.image, so ultron builds the job's image, "
        f"but this machine has no image builder ({found}); one must be on PATH. Fix: install "
        "podman or buildah (no daemon needed: apt-get install podman), start the Docker "
        "daemon, or set cluster.image to an image that holds your code"
    )
