"""``ultron infra render``: the Kubernetes manifests of ``infra/k8s/`` from a values file.

The committed files are the rendering of the defaults; ``--check`` tells whether a folder is
up to date with the values (CI runs it through the tests).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from ultron.cli.exits import ExitCode, fail
from ultron.errors import ConfigIssue, SpecError

__all__ = ["infra_app", "register"]

console = Console(soft_wrap=True, highlight=False)
infra_app = typer.Typer(help="The Kubernetes manifests (infra/k8s/), from typed values.")


def register(app: typer.Typer) -> None:
    """Adds ``ultron infra`` to the ``ultron`` command."""
    app.add_typer(infra_app, name="infra")


def _template(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        data["variables"]["properties"]["namespace"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        issue = ConfigIssue(
            "--base-job-template",
            str(path),
            f"it must be a Prefect Kubernetes base job template, a JSON file ({exc})",
            "run from the repository's root, or pass "
            "--base-job-template infra/prefect/kubernetes-base-job-template.json",
        )
        raise SpecError([issue], "ultron infra render") from None
    return dict(data)


@infra_app.command("render")
def render(
    values: Annotated[
        Path | None,
        typer.Option(help="A YAML file of values (see infra/README.md); default: the defaults."),
    ] = None,
    out: Annotated[Path, typer.Option(help="The folder of the manifests.")] = Path("infra/k8s"),
    base_job_template: Annotated[
        Path,
        typer.Option(help="The Prefect base job template the worker creates its pool with."),
    ] = Path("infra/prefect/kubernetes-base-job-template.json"),
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; exit 1 if the folder is not up to date."),
    ] = False,
) -> None:
    """Render the manifests into OUT: one file per piece, to apply in order."""
    from ultron.deploy import load_values, stale_files, write
    from ultron.deploy import render as render_files

    try:
        files = render_files(load_values(values), _template(base_job_template))
    except SpecError as exc:
        fail(exc)
    if check:
        stale = stale_files(files, out) if out.is_dir() else sorted(files)
        if stale:
            fix = "ultron infra render" + (f" --values {values}" if values else "")
            fail(
                f"{out} is not up to date: {', '.join(stale)}; run: {fix}", code=ExitCode.JOB_FAILED
            )
        console.print(f"{escape(str(out))}: {len(files)} files up to date")
        return
    changed = write(files, out)
    names = ", ".join(changed) or "none"
    console.print(f"{escape(str(out))}: {len(files)} files, {len(changed)} changed ({names})")
